"""Gap: a checkpoint resume spans two runs, and no TrainCheck relation relates two runs;
a resume that skips ``optimizer.load_state_dict`` leaves invariants only "not triggered".

Run A (plain Python, not traced) trains a ``Linear(4, 4)`` with Adam for 2 steps and
saves model and optimizer state. Run B loads both and trains 2 more steps; run B' is the
same program with ``optimizer.load_state_dict`` skipped (fresh Adam moments after the
resume). B and B' are traced with ``--models-to-track model --model-tracker-style
sampler``. Invariants are learned from B with every relation (``traincheck-infer``), and
both B and B' are checked against them (``traincheck-check``). The script compares the
failed sets, lists what happened to the invariants that mention ``load_state_dict``, and
shows that B' really diverged (the recorded parameter values after the resume differ).

Run inside the TrainCheck image: ``python 09_resume_cross_run.py`` (about 35 s of CPU).
"""

from __future__ import annotations

import glob
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

TRAIN = """
import os
import torch

mode = os.environ["GAP_MODE"]
torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
if mode != "save":
    checkpoint = torch.load(os.environ["GAP_CKPT"])
    model.load_state_dict(checkpoint["model"])
    if mode == "resume":
        optimizer.load_state_dict(checkpoint["optimizer"])
data = torch.randn(8, 4)
for step in range(2):
    optimizer.zero_grad()
    model(data).pow(2).sum().backward()
    optimizer.step()
if mode == "save":
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
               os.environ["GAP_CKPT"])
"""


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``cmd`` in its own process group with a 600 s limit; return exit code and output."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        text, _ = proc.communicate()
    return proc.returncode, text


def read_objects(path: Path) -> list[dict]:
    """The JSON objects concatenated in a checker log (they may contain bare NaN)."""
    text = path.read_text() if path.exists() else ""
    objects: list[dict] = []
    pos = 0
    decoder = json.JSONDecoder()
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return objects
        obj, pos = decoder.raw_decode(text, pos)
        objects.append(obj)


def describe(result: dict) -> str:
    """A stable text for one checked invariant."""
    inv = result["invariant"]
    return f"{inv['relation']}: {inv.get('text_description') or json.dumps(inv['params'])}"


def check(work: Path, trace: Path, invariants: Path) -> dict[str, dict[str, str]]:
    """Check ``trace``; per outcome (failed / not_triggered / passed), each invariant's
    description mapped to its full JSON text."""
    out = work / f"check_{trace.name}"
    run(["traincheck-check", "-f", str(trace), "-i", str(invariants), "-o", str(out),
         "--no-html-report"], work)
    return {kind: {describe(r): json.dumps(r["invariant"])
                   for r in read_objects(out / trace.name / f"{kind}.log")}
            for kind in ("failed", "not_triggered", "passed")}


def param_values(trace: Path) -> dict[tuple[str, int], int]:
    """Recorded parameter value (hash) per (name, step)."""
    values = {}
    for path in glob.glob(str(trace / "trace_VAR_*.log")):
        for line in Path(path).read_text().splitlines():
            rec = json.loads(line)
            values[(rec["var_name"], rec["meta_vars"]["step"])] = rec["attributes"]["data"]
    return values


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="gap09_"))
    src = work / "src"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    base_env = dict(os.environ, GAP_CKPT=str(work / "checkpoint.pt"))
    rc_a, _ = run([sys.executable, str(src / "train.py")], work, dict(base_env, GAP_MODE="save"))
    print(f"[A] plain run, 2 steps, saves checkpoint -> exit {rc_a}")
    traces = {}
    for mode in ("resume", "skip"):
        out = work / f"trace_{mode}"
        rc, _ = run(["traincheck-collect", "-p", str(src / "train.py"), "--output-dir", str(out),
                     "--models-to-track", "model", "--model-tracker-style", "sampler"],
                    work, dict(base_env, GAP_MODE=mode))
        traces[mode] = out
        print(f"[{mode}] traced resume ({'with' if mode == 'resume' else 'WITHOUT'} "
              f"optimizer.load_state_dict) -> exit {rc}")

    invariants = work / "invariants.json"
    run(["traincheck-infer", "-f", str(traces["resume"]), "-o", str(invariants)], work)
    n_inv = len(invariants.read_text().splitlines()) if invariants.exists() else 0
    print(f"[infer] {n_inv} invariants learned from the correct resume (all relations)")
    clean = check(work, traces["resume"], invariants)
    fault = check(work, traces["skip"], invariants)
    new_failures = sorted(set(fault["failed"]) - set(clean["failed"]))
    mentions = {kind: sorted(d for d, full in fault[kind].items() if "load_state_dict" in full)
                for kind in fault}
    for name, res in (("correct resume", clean), ("skipped optimizer load", fault)):
        print(f"[check] {name}: " + ", ".join(f"{len(v)} {k}" for k, v in res.items()))
    print(f"[check] failed on the skipped load but not on the correct resume: "
          f"{len(new_failures)}")
    for descr in new_failures[:5]:
        print(f"[check]   new failure: {descr[:150]}")
    for kind, descrs in mentions.items():
        print(f"[check] skipped-load run, invariants mentioning load_state_dict {kind}: "
              f"{len(descrs)}")
        for descr in descrs[:4]:
            print(f"[check]   {descr[:150]}")

    good, bad = param_values(traces["resume"]), param_values(traces["skip"])
    same_at = sorted({step for (name, step), v in good.items() if bad.get((name, step)) == v})
    differ_at = sorted({step for (name, step), v in good.items() if bad.get((name, step)) != v})
    later = [key for key in good if key[1] > 0]
    n_differ = sum(good[key] != bad.get(key) for key in later)
    print(f"[values] parameter records equal in both runs at steps {same_at}, "
          f"different at steps {differ_at} ({n_differ}/{len(later)} records after step 0)")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"[cpu] runs, infer, check: {usage.ru_utime + usage.ru_stime:.0f} s")

    diverged = bool(differ_at)
    load_failed = mentions["failed"]
    if n_inv and diverged and not new_failures:
        print(
            f"GAP resume_cross_run: skipping optimizer.load_state_dict changes "
            f"{n_differ}/{len(later)} parameter records after the resume, yet 0 new failures "
            f"({len(fault['failed'])} failed vs {len(clean['failed'])} on the correct resume, "
            f"of {n_inv}); "
            f"invariants on load_state_dict: {len(mentions['not_triggered'])} not triggered, "
            f"{len(mentions['failed'])} failed"
        )
    else:
        print(
            f"NO GAP resume_cross_run: {len(new_failures)} new failures "
            f"({len(load_failed)} mention load_state_dict); diverged={diverged}; "
            f"{n_inv} invariants"
        )


if __name__ == "__main__":
    main()
