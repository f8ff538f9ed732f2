"use strict";
// The page's only script (allowed by its hash in the CSP). It reads the JSON data block and
// the rendered text, and only ever sets textContent, classes and the open state of details.
(function () {
  const items = Array.from(document.querySelectorAll("[data-item]"));
  const search = document.getElementById("search");
  const kind = document.getElementById("kind");
  const diagOnly = document.getElementById("diag-only");
  const count = document.getElementById("count");
  let data = {};
  try {
    data = JSON.parse(document.getElementById("replay-data").textContent);
  } catch (e) {
    data = {};
  }
  if (kind && Array.isArray(data.events)) {
    const kinds = Array.from(new Set(data.events.map((e) => e.kind).filter(Boolean))).sort();
    for (const k of kinds) {
      const option = document.createElement("option");
      option.value = k;
      option.textContent = k;
      kind.appendChild(option);
    }
  }
  const texts = new Map();
  function textOf(item) {
    if (!texts.has(item)) texts.set(item, item.textContent.toLowerCase());
    return texts.get(item);
  }
  function apply() {
    const q = search ? search.value.trim().toLowerCase() : "";
    const k = kind ? kind.value : "";
    const d = diagOnly ? diagOnly.checked : false;
    let shown = 0;
    for (const item of items) {
      // A damaged line is never hidden by a filter.
      const damaged = item.dataset.status === "damaged";
      const ok = damaged || ((!q || textOf(item).includes(q)) &&
        (!k || item.dataset.kind === k) && (!d || item.classList.contains("diag")));
      item.classList.toggle("hidden", !ok);
      if (ok) shown += 1;
    }
    if (count) count.textContent = shown + " of " + items.length + " shown";
  }
  let timer = null;
  if (search) search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(apply, 120);
  });
  if (kind) kind.addEventListener("change", apply);
  if (diagOnly) diagOnly.addEventListener("change", apply);
  function openAll(open) {
    for (const el of document.querySelectorAll("#events details")) {
      if (!el.classList.contains("raw")) el.open = open;
    }
  }
  const expand = document.getElementById("expand");
  const collapse = document.getElementById("collapse");
  if (expand) expand.addEventListener("click", () => openAll(true));
  if (collapse) collapse.addEventListener("click", () => openAll(false));
  // Opening the page at #line-N shows that event even when it sits in a collapsed block.
  if (location.hash) {
    const target = document.getElementById(location.hash.slice(1));
    if (target) target.scrollIntoView();
  }
  apply();
})();
