"""``harness replay --html``: one self-contained HTML file per attempt, and a study index.

The page needs nothing but itself: CSS and script are inline, the budget chart is inline SVG,
every output and blob the page shows is inlined (capped, and the cap is stated where it
cuts), and a Content-Security-Policy allows no network at all and only the page's own script
(by its hash), so even a string that slipped past escaping could not run.

Everything taken from the attempt is hostile: every text goes through
:func:`harness.text.inert_block` and ``html.escape`` before it is written, and the data
the script reads sits in a ``<script type="application/json">`` block with ``<``, ``>`` and
``&`` written as JSON escapes, so no ``</script>`` can end it early. The script only ever
sets ``textContent``.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from harness.audit import replay
from harness.audit.replay import Capped, Replay, ReplayEvent
from harness.records.attempt import (
    RECORD_NAME,
    AttemptPaths,
    atomic_write,
)
from harness.text import inert_block, one_line

# One output, blob, artifact, message or diff: at most this much inline (head and tail).
OUTPUT_CAP = 1024**2
# The whole page: past this much inlined text, each further text shows only its head.
PAGE_CAP = 48 * 1024**2
PREVIEW_CAP = 8 * 1024
# Strings in the raw-data view of each event.
RAW_STRING_CHARS = 400
CAPS_STATEMENT = (f"Each output, blob, artifact, message and diff is inlined up to "
                  f"{OUTPUT_CAP // 1024**2} MiB (head and tail, the cut marked); past "
                  f"{PAGE_CAP // 1024**2} MiB inlined in all, only the first "
                  f"{PREVIEW_CAP // 1024} KiB of each further text. The transcript's "
                  "blobs/ and the attempt's artifacts/ hold everything whole.")


def esc(text: str) -> str:
    """Hostile text as inert HTML text (control characters shown as escapes)."""
    return html.escape(inert_block(text), quote=True)


def json_for_script(value: Any) -> str:
    """JSON that cannot end or open a tag inside ``<script type="application/json">``."""
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _asset(name: str) -> str:
    return resources.files("harness.audit").joinpath("templates", name).read_text(encoding="utf-8")


def page(title: str, body: str, data: dict[str, Any]) -> str:
    """The whole document: template, body, data block, and the script allowed by hash."""
    script = _asset("replay.js")
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
           f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'")
    return (_asset("replay.html")
            .replace("@@CSP@@", html.escape(csp, quote=True))
            .replace("@@TITLE@@", esc(title))
            .replace("@@BODY@@", body)
            .replace("@@DATA@@", json_for_script(data))
            .replace("@@SCRIPT@@", script))


@dataclass
class _Budget:
    """What the page may still inline."""

    left: int = PAGE_CAP

    def cap(self) -> int:
        return OUTPUT_CAP if self.left > 0 else PREVIEW_CAP

    def spend(self, capped: Capped) -> Capped:
        self.left -= len(capped.text)
        return capped


class _Page:
    def __init__(self, rp: Replay) -> None:
        self.rp = rp
        self.budget = _Budget()
        self.manifest = replay.manifest_digests(rp.attempt_dir)
        self.snapshots = {s.line: s for s in rp.snapshots}

    # -- pieces ------------------------------------------------------------------------------

    def text(self, value: Any, where: str = "") -> Capped:
        return self.budget.spend(self.rp.text(value, self.budget.cap(), where))

    def pre(self, capped: Capped, cls: str = "") -> str:
        if capped.problem:
            return f'<p class="problem">{esc(capped.problem)}</p>'
        klass = f' class="{cls}"' if cls else ""
        return f"<pre{klass}>{esc(capped.text)}</pre>"

    def block(self, label: str, value: Any, *, where: str = "", open_: bool = False,
              cls: str = "out", diff: bool = False) -> str:
        """A collapsible text: its head in the summary, the whole (capped) one click away."""
        capped = self.text(value, where)
        size = f"{capped.total_bytes} bytes" + (
            f", {capped.omitted_bytes} not inlined" if capped.omitted_bytes else "")
        first = next((ln for ln in capped.text.splitlines() if ln.strip()), "")
        head = f' <span class="head">{esc(one_line(first, 100))}</span>' if first else ""
        inner = self.diff_pre(capped) if diff else self.pre(capped)
        return (f'<details class="{cls}"{" open" if open_ else ""}><summary>{esc(label)} '
                f'<span class="size">({esc(size)})</span>{head}</summary>{inner}</details>')

    def diff_pre(self, capped: Capped) -> str:
        if capped.problem:
            return f'<p class="problem">{esc(capped.problem)}</p>'
        rows = []
        for line in capped.text.split("\n"):
            cls = ("add" if line.startswith("+") and not line.startswith("+++") else
                   "del" if line.startswith("-") and not line.startswith("---") else
                   "hunk" if line.startswith("@@") else
                   "file" if line.startswith(("diff ", "+++", "---")) else "")
            rows.append(f'<span class="{cls}">{esc(line)}</span>' if cls else esc(line))
        return '<pre class="diff">' + "\n".join(rows) + "</pre>"

    def raw(self, event: ReplayEvent) -> str:
        """Every field of the event, strings shortened: nothing is hidden, only trimmed."""

        def trim(value: Any, depth: int = 0) -> Any:
            if depth > 40:
                return "..."
            if isinstance(value, str):
                return value if len(value) <= RAW_STRING_CHARS else (
                    value[:RAW_STRING_CHARS] + f"... [{len(value)} chars; shown above]")
            if isinstance(value, dict):
                return {k: trim(v, depth + 1) for k, v in list(value.items())[:500]}
            if isinstance(value, list):
                return [trim(v, depth + 1) for v in value[:500]]
            return value

        dumped = json.dumps(trim(event.data), ensure_ascii=False, indent=1, default=str)
        return (f'<details class="raw"><summary>event data</summary>'
                f"<pre>{esc(dumped)}</pre></details>")

    # -- events ------------------------------------------------------------------------------

    def event(self, event: ReplayEvent) -> str:
        classes = ["ev", f"k-{_slug(event.kind)}", event.status]
        if event.diagnostic:
            classes.append("diag")
        if event.kind == replay.SNAPSHOT_KIND:
            classes.append("snap")
        attrs = (f'class="{" ".join(classes)}" id="line-{event.line}" data-item '
                 f'data-line="{event.line}" data-kind="{esc(event.kind)}" '
                 f'data-tool="{esc(event.tool or "")}" data-status="{event.status}"')
        if event.status == "damaged":
            return (f"<li {attrs}><div class=\"eh\"><span class=\"ln\">line {event.line}</span>"
                    f'<span class="k">DAMAGED</span><span class="sum">'
                    f"{esc(event.problem or '')}</span></div></li>")
        p = event.progress
        caps = self.rp.caps

        def used(key: str, value: int) -> str:
            cap = caps.get(key)
            return f"{value}" + ("" if cap is None else f"/{cap}")

        head = [f'<span class="ln">line {event.line}</span>',
                f'<span class="seq">seq {"" if event.seq is None else event.seq}</span>',
                f'<span class="t">+{"?" if event.offset_s is None else f"{event.offset_s:.2f}"}'
                " s</span>",
                f'<span class="k">{esc(event.kind)}</span>']
        if event.tool:
            head.append(f'<span class="tool">{esc(event.tool)}</span>')
        if event.exit_code is not None:
            bad = " bad" if event.exit_code != 0 else ""
            head.append(f'<span class="x{bad}">exit {event.exit_code}</span>')
        head.append(f'<span class="sum">{esc(one_line(event.summary, 160))}</span>')
        head.append(f'<span class="bud">tokens {used("tokens_total", p.tokens_total)} · calls '
                    f'{used("tool_calls", p.tool_calls)} · runs '
                    f'{used("candidate_runs", p.candidate_runs)}</span>')
        if event.status == "unverified":
            head.append('<span class="uv">UNVERIFIED</span>')
        body = self.body(event)
        return (f"<li {attrs}><div class=\"eh\">{''.join(head)}</div>"
                f'<div class="eb">{body}{self.raw(event)}</div></li>')

    def body(self, event: ReplayEvent) -> str:
        d = event.data
        kind = event.kind
        if kind == "session_start":
            return (self.block("system prompt", d.get("system_prompt"))
                    + f"<p>tools: {esc(', '.join(map(str, d.get('tools') or [])))}</p>")
        if kind == "model_request":
            return self.messages(d.get("messages"))
        if kind == "model_response":
            return self.response(d)
        if kind == "tool_call":
            return self.call(d)
        if kind == "tool_result":
            return self.result(event)
        if kind == "diff":
            path = AttemptPaths(root=self.rp.attempt_dir).diff
            note = replay.diff_note(self.rp, path)
            capped = self.budget.spend(replay.read_capped(path, self.budget.cap()))
            files = ", ".join(map(str, d.get("files_changed") or []))
            return (f'<p id="final-diff">final tree: {esc(files)}; submission.diff '
                    f'<span class="check">{esc(note)}</span></p>'
                    + f'<details class="out diffbox" open><summary>diff of the final tree '
                      f'<span class="size">({capped.total_bytes} bytes)</span></summary>'
                    + self.diff_pre(capped) + "</details>")
        if kind == replay.SNAPSHOT_KIND:
            return self.snapshot(event)
        return ""

    def messages(self, messages: Any) -> str:
        if not isinstance(messages, list):
            return ""
        parts = []
        for message in messages[:1000]:
            if not isinstance(message, dict):
                continue
            role = str(message.get("role", "?"))
            name = message.get("name")
            label = f"{role}" + (f" ({name})" if isinstance(name, str) else "")
            parts.append(self.block(label, message.get("content"), cls="msg"))
        return f'<div class="msgs">{"".join(parts)}</div>'

    def response(self, d: dict[str, Any]) -> str:
        out = []
        text = d.get("text")
        if (isinstance(text, str) and text.strip()) or replay.is_blob_ref(text):
            out.append('<div class="said">' + self.pre(self.text(text)) + "</div>")
        for i, thought in enumerate(replay.reasoning_blocks(d), 1):
            out.append(self.block(f"reasoning {i} (as the provider returned it)", thought,
                                  cls="reasoning"))
        calls = d.get("tool_calls")
        if isinstance(calls, list) and calls:
            items = "".join(
                f"<li><b>{esc(str(c.get('name')))}</b> "
                f"{esc(replay.short_args(str(c.get('name')), c.get('args')))}</li>"
                for c in calls[:200] if isinstance(c, dict))
            out.append(f'<ul class="calls">{items}</ul>')
        return "".join(out)

    def call(self, d: dict[str, Any]) -> str:
        args = d.get("args")
        if not isinstance(args, dict):
            return ""
        rows = []
        for key, value in list(args.items())[:100]:
            if isinstance(value, str) and len(value) <= 200 and "\n" not in value:
                rows.append(f"<tr><th>{esc(key)}</th><td><code>{esc(value)}</code></td></tr>")
            elif isinstance(value, str) or replay.is_blob_ref(value):
                rows.append(f"<tr><th>{esc(key)}</th><td>{self.block(key, value)}</td></tr>")
            else:
                dumped = json.dumps(value, ensure_ascii=False, default=str)
                rows.append(f"<tr><th>{esc(key)}</th><td><code>"
                            f"{esc(one_line(dumped, 400))}</code></td></tr>")
        return f'<table class="args">{"".join(rows)}</table>'

    def result(self, event: ReplayEvent) -> str:
        d = event.data
        out = []
        if event.diagnostic_outcome is not None:
            out.append(self.violations(event))
        meta = [f"{k} {d[k]}" for k in ("ok", "duration_s", "timed_out", "output_bytes", "kill")
                if k in d and not isinstance(d[k], dict | list)]
        out.append(f'<p class="meta">{esc(", ".join(meta))}</p>')
        out.append(self.block("output", d.get("output"), open_=False))
        if d.get("cut_for_model") is True:
            out.append(self.block("what the model was shown (cut)", d.get("shown_to_model")))
        if d.get("output_truncated") is True or d.get("artifact_truncated") is True:
            path = self.rp.artifact(d.get("artifact"))
            if path is not None:
                rel = f"artifacts/{path.name}"
                note = replay.digest_note(path, rel, self.manifest)
                capped = self.budget.spend(replay.read_capped(path, self.budget.cap(), rel))
                out.append(
                    f'<details class="out artifact"><summary>whole command output from '
                    f'{esc(rel)} <span class="size">({capped.total_bytes} bytes, '
                    f'{esc(note)})</span></summary>{self.pre(capped)}</details>')
        return "".join(out)

    def violations(self, event: ReplayEvent) -> str:
        outcome = event.diagnostic_outcome or ""
        cls = ("viol" if outcome == "violations" else
               "clean" if outcome == "no_new_violations" else "noverdict")
        rows = "".join(
            f"<tr><td>{esc(v.relation)}</td><td>{esc(v.plain_rule or v.rule)}</td>"
            f"<td>{esc(v.rule)}</td><td>{esc(v.first_step)}</td><td>{esc(v.ranks)}</td></tr>"
            for v in event.violations)
        table = ("<table class=\"violations\"><tr><th>relation</th><th>rule (plain)</th>"
                 "<th>TrainCheck's rule</th><th>first step</th><th>ranks</th></tr>"
                 f"{rows}</table>") if rows else ""
        return (f'<div class="diagnostic {cls}"><b>TrainCheck: {esc(outcome)}</b>, '
                f"{len(event.violations)} new violation(s){table}</div>")

    def snapshot(self, event: ReplayEvent) -> str:
        snap = self.snapshots.get(event.line)
        out = []
        if snap is not None:
            files = ", ".join(snap.files_changed)
            out.append(f"<p>snapshot {esc(snap.id)} after {esc(snap.trigger)}: "
                       f"{esc(files or 'no file changed')}</p>")
            if snap.grade is not None:
                cells = "".join(
                    f'<span class="g o-{_slug(outcome)}" title="{esc(cid)}: {esc(outcome)}">'
                    f"{esc(cid)}: {esc(outcome)}</span>"
                    for cid, outcome in snap.grade.contracts.items())
                out.append(f'<p class="sgrade">grade: {esc(snap.grade.verdict)} {cells}</p>')
            else:
                out.append('<p class="sgrade">not graded</p>')
        diff = snap.diff if snap is not None else None
        if diff is not None:
            out.append(self.block("diff of this snapshot", diff, diff=True, cls="out diffbox"))
        return "".join(out)

    # -- sections ----------------------------------------------------------------------------

    def header(self) -> str:
        rp = self.rp
        v = rp.verification
        banner = (f'<div class="banner {"ok" if v.ok else "broken"}">{esc(v.line())}'
                  + ("" if v.ok or v.break_line is None else
                     f' <a href="#line-{v.break_line}">go to line {v.break_line}</a>')
                  + "</div>")
        record = rp.record or {}
        facts = [("attempt", str(rp.attempt_dir))]
        for key in ("study", "session_id", "attempt", "task", "pair", "arm", "model", "status",
                    "outcome", "error", "image", "image_id", "started_at", "ended_at"):
            if record.get(key) is not None:
                facts.append((key, str(record[key])))
        if rp.record_problem:
            facts.append((RECORD_NAME, rp.record_problem))
        usage = record.get("usage")
        if isinstance(usage, dict):
            facts.append(("usage", ", ".join(f"{k} {v}" for k, v in usage.items()
                                             if not isinstance(v, dict))))
        if rp.grade is not None:
            facts.append(("final grade", rp.grade.shown))
        rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(one_line(val, 400))}</td></tr>"
                       for k, val in facts)
        return (f"{banner}<table class=\"facts\">{rows}</table>"
                '<p class="note">session.json is outside the hash chain; the transcript '
                f"below is what the chain covers. {esc(CAPS_STATEMENT)}</p>")

    def grades(self) -> str:
        rp = self.rp
        out = []
        graded = [s for s in rp.snapshots if s.grade is not None]
        if graded:
            contracts = list(dict.fromkeys(
                [c for s in graded for c in s.grade.contracts]  # type: ignore[union-attr]
                + [c.id for c in (rp.grade.contracts if rp.grade else [])]))
            final = {c.id: c.outcome for c in (rp.grade.contracts if rp.grade else [])}
            head = "".join(
                f'<th><a href="#line-{s.line}">+{s.offset_s or 0:.0f} s</a><br>'
                f"{esc(one_line(s.trigger, 20))}</th>" for s in graded)
            body = []
            for cid in contracts:
                cells = []
                for s in graded:
                    outcome = s.grade.contracts.get(cid, "")  # type: ignore[union-attr]
                    cells.append(f'<td class="o-{_slug(outcome)}" title="{esc(outcome)}">'
                                 f"{esc(outcome[:1])}</td>")
                outcome = final.get(cid, "")
                cells.append(f'<td class="o-{_slug(outcome)}" title="{esc(outcome)}">'
                             f"{esc(outcome[:1])}</td>")
                body.append(f"<tr><th>{esc(cid)}</th>{''.join(cells)}</tr>")
            out.append('<h2>Contracts over the snapshots</h2><table class="strip"><tr><th>'
                       f"contract</th>{head}<th>final</th></tr>{''.join(body)}</table>")
        if rp.grade is not None:
            rows = "".join(
                f'<tr><td>{esc(c.id)}</td><td>{esc(c.kind)}</td><td class="o-{_slug(c.outcome)}">'
                f"{esc(c.outcome)}</td><td>{esc(one_line(c.reason, 300))}</td></tr>"
                for c in rp.grade.contracts)
            problem = (f'<p class="problem">{esc(rp.grade.problem)}</p>'
                       if rp.grade.problem else "")
            out.append(f"<h2>Final grade: {esc(rp.grade.shown)}</h2>{problem}"
                       "<details class=\"grade\"><summary>every contract</summary>"
                       "<table class=\"contracts\"><tr><th>contract</th><th>kind</th>"
                       f"<th>outcome</th><th>reason</th></tr>{rows}</table></details>")
        return "".join(out)

    def render(self) -> str:
        rp = self.rp
        record = rp.record or {}
        title = (f"replay: {record.get('session_id', rp.attempt_dir.name)} attempt "
                 f"{record.get('attempt', '?')}")
        items = []
        broken_at = rp.verification.break_line
        marked = False
        for event in rp.events:
            if broken_at is not None and not marked and event.line >= broken_at:
                marked = True
                items.append(f'<li class="break">the chain breaks here (line {broken_at}): '
                             f"{esc(rp.verification.error or '')}; everything below is "
                             "UNVERIFIED</li>")
            items.append(self.event(event))
        if rp.verification.at_end:
            items.append(f'<li class="break">{esc(rp.verification.error or "")}</li>')
        chart = budget_chart(rp)
        body = (f"<h1>{esc(title)}</h1>{self.header()}"
                f'<section id="chart"><h2>Budgets over time</h2>{chart}</section>'
                f"<section id=\"grades\">{self.grades()}</section>"
                '<section id="timeline"><h2>Timeline</h2>'
                '<div class="tools"><input id="search" type="search" placeholder="search events '
                '(all text, collapsed outputs included)" autocomplete="off">'
                '<select id="kind"><option value="">every kind</option></select>'
                '<label><input id="diag-only" type="checkbox"> TrainCheck only</label>'
                '<button id="expand" type="button">expand all</button>'
                '<button id="collapse" type="button">collapse all</button>'
                '<span id="count"></span></div>'
                f'<ol id="events">{"".join(items)}</ol></section>')
        data = {
            "attempt": str(rp.attempt_dir),
            "verification": rp.verification.model_dump(),
            "lines": len(rp.events),
            "events": [{"line": e.line, "seq": e.seq, "kind": e.kind, "tool": e.tool,
                        "status": e.status, "offset_s": e.offset_s,
                        "diagnostic": e.diagnostic} for e in rp.events],
            "snapshots": [s.model_dump() for s in rp.snapshots],
            "caps_statement": CAPS_STATEMENT,
        }
        return page(title, body, data)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text[:40]).lower()


# -- the budget chart -----------------------------------------------------------------------------

_SERIES = (("tokens_total", "tokens", "#1f77b4"), ("tool_calls", "tool calls", "#2ca02c"),
           ("candidate_runs", "candidate runs", "#d62728"))


def budget_chart(rp: Replay) -> str:
    """Each capped budget's share used over time, as inline SVG (step lines)."""
    points: dict[str, list[tuple[float, float]]] = {key: [(0.0, 0.0)] for key, _, _ in _SERIES}
    end = max([e.offset_s for e in rp.events if e.offset_s is not None] + [1.0])
    for event in rp.events:
        if event.kind != "budget" or event.offset_s is None or event.status == "damaged":
            continue
        for key, _label, _colour in _SERIES:
            points[key].append((event.offset_s, float(getattr(event.progress, key))))
    width, height, left, top, bottom, right = 900, 230, 46, 12, 34, 220
    plot_w, plot_h = width - left - right, height - top - bottom
    series: list[tuple[str, str, list[tuple[float, float]]]] = []
    for key, label, colour in _SERIES:
        cap = rp.caps.get(key)
        if not isinstance(cap, int | float) or cap <= 0:
            continue
        shares = [(t, 100.0 * v / cap) for t, v in points[key]] + [(end, 100.0 * points[key][-1][1]
                                                                    / cap)]
        series.append((f"{label} (cap {cap:g})", colour, shares))
    if rp.deadline_s:
        series.append((f"time (deadline {rp.deadline_s:g} s)", "#7f7f7f",
                       [(0.0, 0.0), (end, 100.0 * end / rp.deadline_s)]))
    if not series:
        return '<p class="note">no capped budget was recorded</p>'
    top_pct = max(100.0, *(p for _, _, pts in series for _, p in pts))

    def x(t: float) -> float:
        return left + plot_w * t / end

    def y(p: float) -> float:
        return top + plot_h * (1 - p / top_pct)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} '
             f'{height}" width="{width}" height="{height}" role="img" aria-label="budget used '
             'over time">']
    for pct in (0, 25, 50, 75, 100):
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(pct):.1f}" '
                     f'y2="{y(pct):.1f}" class="grid"/><text x="{left - 4}" y="{y(pct) + 4:.1f}" '
                     f'text-anchor="end">{pct}%</text>')
    for event in rp.events:  # where the diagnostics ran and the snapshots were taken
        if event.offset_s is None or event.status == "damaged":
            continue
        if event.kind == "tool_call" and event.diagnostic:
            parts.append(f'<line x1="{x(event.offset_s):.1f}" x2="{x(event.offset_s):.1f}" '
                         f'y1="{top}" y2="{top + plot_h}" class="mark-diag"><title>'
                         f"{esc(event.tool or '')} at +{event.offset_s:.0f} s</title></line>")
        if event.kind == replay.SNAPSHOT_KIND:
            parts.append(f'<line x1="{x(event.offset_s):.1f}" x2="{x(event.offset_s):.1f}" '
                         f'y1="{top}" y2="{top + plot_h}" class="mark-snap"><title>snapshot '
                         f"at +{event.offset_s:.0f} s</title></line>")
    for i, (label, colour, pts) in enumerate(series):
        path = []
        for j, (t, p) in enumerate(pts):
            if j:
                path.append(f"{x(t):.1f},{y(pts[j - 1][1]):.1f}")  # a step: level, then rise
            path.append(f"{x(t):.1f},{y(p):.1f}")
        dash = ' stroke-dasharray="4 3"' if label.startswith("time") else ""
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.8"{dash} '
                     f'points="{" ".join(path)}"><title>{esc(label)}</title></polyline>')
        ly = top + 14 + 16 * i
        parts.append(f'<line x1="{left + plot_w + 10}" x2="{left + plot_w + 26}" y1="{ly - 4}" '
                     f'y2="{ly - 4}" stroke="{colour}" stroke-width="2"{dash}/>'
                     f'<text x="{left + plot_w + 30}" y="{ly}">{esc(label)}</text>')
    parts.append(f'<text x="{left}" y="{height - 8}">0 s</text><text x="{left + plot_w}" '
                 f'y="{height - 8}" text-anchor="end">{end:.0f} s from the first event</text>')
    parts.append("</svg>")
    return "".join(parts)


# -- writing --------------------------------------------------------------------------------------


def render(rp: Replay) -> str:
    return _Page(rp).render()


def write(rp: Replay, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, render(rp).encode("utf-8", "surrogatepass"))
    return out


@dataclass
class IndexRow:
    """One attempt (or a session without one) on the study's index page."""

    session_id: str
    order: int | None  # in the launch order; None: not in the study's assignment
    record: dict[str, Any]
    link: str | None
    verification: str
    ok: bool
    events: int
    verdict: str = ""


def write_index(study_name: str, study_root: Path, order: list[str], out_dir: Path,
                log: Callable[[str], None] | None = None) -> tuple[Path, list[IndexRow]]:
    """A viewer for every attempt under ``study_root`` and an index linking them all, in
    launch order (``order``), sessions without an attempt included."""
    found: dict[str, list[Path]] = {}
    if study_root.is_dir():
        for session_dir in sorted(p for p in study_root.iterdir() if p.is_dir()):
            attempts = sorted((a for a in session_dir.glob("attempt-*")
                               if (AttemptPaths(root=a).transcript).is_file()),
                              key=lambda a: _attempt_number(a.name))
            if attempts:
                found[session_dir.name] = attempts
    pages = out_dir / "sessions"
    rows: list[IndexRow] = []
    positions = {sid: i + 1 for i, sid in enumerate(order)}
    for sid in order + [s for s in found if s not in positions]:
        attempts = found.get(sid, [])
        if not attempts:
            rows.append(IndexRow(sid, positions.get(sid), {}, None, "no attempt", True, 0))
            continue
        for attempt in attempts:
            rp = replay.load(attempt)
            name = f"{_slug(sid)}-{_slug(attempt.name)}.html"
            write(rp, pages / name)
            if log is not None:
                log(f"wrote {pages / name}")
            rows.append(IndexRow(sid, positions.get(sid), rp.record or {}, f"sessions/{name}",
                                 rp.verification.line(), rp.verification.ok,
                                 len(rp.events), rp.grade.shown if rp.grade else ""))
    body_rows = []
    for row in rows:
        rec = row.record
        verdict = row.verdict
        raw_usage = rec.get("usage")
        usage = raw_usage if isinstance(raw_usage, dict) else {}
        link = (f'<a href="{html.escape(row.link, quote=True)}">{esc(row.session_id)}</a>'
                if row.link else esc(row.session_id))
        in_study = "" if row.order is not None else " (not in the study's assignment)"
        cells = [str(row.order or "-"), link + esc(in_study), str(rec.get("attempt", "-")),
                 str(rec.get("arm", "-")), str(rec.get("task", "-")),
                 str(rec.get("status", "-")), str(rec.get("outcome", "-")), verdict or "-",
                 str(usage.get("wall_seconds", "-")), str(usage.get("tool_calls", "-")),
                 str(usage.get("diagnostic_runs", "-")), str(row.events)]
        safe = [cells[0], cells[1]] + [esc(c) for c in cells[2:]]
        status = "ok" if row.ok else "broken"
        body_rows.append(
            f'<tr data-item class="{status}">' + "".join(f"<td>{c}</td>" for c in safe)
            + f'<td class="{status}">{esc(row.verification)}</td></tr>')
    head = "".join(f"<th>{h}</th>" for h in (
        "#", "session", "attempt", "arm", "task", "status", "outcome", "verdict", "wall s",
        "tool calls", "diagnostic runs", "lines", "transcript"))
    title = f"study {study_name}: every session"
    body = (f"<h1>{esc(title)}</h1><p class=\"note\">{esc(str(study_root))}; sessions in launch "
            "order, every attempt with its own replay page (verified when written).</p>"
            '<div class="tools"><input id="search" type="search" placeholder="filter sessions" '
            'autocomplete="off"><span id="count"></span></div>'
            f'<table class="index"><tr>{head}</tr>{"".join(body_rows)}</table>')
    index = out_dir / "index.html"
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(index, page(title, body, {"study": study_name,
                                                   "rows": len(rows)}).encode())
    return index, rows


def _attempt_number(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0
