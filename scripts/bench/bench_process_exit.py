"""How long processes take to end, side by side, in the grader image.

Two measurements, each alternating its two sides within one container so the shared
machine's noise lands on both:

- **Forked children** (``grading.warm_start``'s servers): a server process imports what the
  warm server preloads, then forks children that run one small torch op and exit as the
  interpreter makes them (``sys.exit``: Python's finalization). Once as the servers did before
  2026-12-02, once after ``gc.freeze()`` (what ``_freeze_heap`` does before a server forks).
  Reported: fork to reaped, per child.
- **Judges**: the same passing check run by ``python -m pytest`` and by ``python -m
  grading.judge_main`` (pytest, then exit handlers, a flush and ``os._exit`` without Python's
  finalization), fresh interpreters both. Reported: start to exit.

Usage: .venv/bin/python scripts/bench/bench_process_exit.py [--reps 6]
"""

from __future__ import annotations

import argparse
import json
import statistics

from harness.infra import images
from harness.infra.sandbox import Sandbox
from harness.oracle.grade import JUDGE_USER, grader_sandbox

FORKS = r'''
import gc, json, os, sys, time
from grading.warm_start import PRELOAD
for name in PRELOAD:
    __import__(name)
import torch
gc.collect()
times = {"plain": [], "frozen": []}
for rep in range(REPS):
    for side in ("plain", "frozen"):
        if side == "frozen":
            gc.freeze()
        t = time.monotonic()
        pid = os.fork()
        if pid == 0:
            (torch.ones(8, 8) @ torch.ones(8, 8)).sum().item()
            sys.exit(0)
        os.waitpid(pid, 0)
        times[side].append(time.monotonic() - t)
        gc.unfreeze()
print(json.dumps(times))
'''

JUDGES = r'''
import json, os, subprocess, sys, time
os.makedirs("/tmp/judge", exist_ok=True)
with open("/tmp/judge/test_check.py", "w") as fh:
    fh.write("import torch\n\ndef test_check():\n    assert torch.ones(2).sum() == 2\n")
times = {"pytest": [], "judge_main": []}
for rep in range(REPS):
    for side, module in (("pytest", "pytest"), ("judge_main", "grading.judge_main")):
        t = time.monotonic()
        done = subprocess.run([sys.executable, "-m", module, "-q", "-p", "no:cacheprovider",
                               "/tmp/judge/test_check.py"], cwd="/tmp/judge",
                              capture_output=True)
        assert done.returncode == 0, done.stdout + done.stderr
        times[side].append(time.monotonic() - t)
print(json.dumps(times))
'''


def run_json(box: Sandbox, script: str, *args: str,
             env: dict[str, str] | None = None) -> dict[str, list[float]]:
    """``python -c script args`` in ``box`` as the judge; the JSON its last line prints."""
    command = ["env", *(f"{k}={v}" for k, v in (env or {}).items()), "python", "-c", script,
               *args]
    result = box.exec(command, timeout_s=1200, user=JUDGE_USER)
    assert result.exit_code == 0, result.output[-2000:]
    return json.loads(result.output.strip().splitlines()[-1])


def _run(box: Sandbox, script: str, reps: int) -> dict[str, list[float]]:
    return run_json(box, script.replace("REPS", str(reps)))


def print_ratio(title: str, times: dict[str, list[float]], digits: int = 2) -> None:
    """Two sides' medians, their ratio and ranges, on one line."""
    (a, at), (b, bt) = times.items()
    ma, mb = statistics.median(at), statistics.median(bt)

    def s(x: float) -> str:
        return f"{x:.{digits}f}"
    print(f"{title}: median {a} {s(ma)} s, {b} {s(mb)} s, {b}/{a} {mb / ma:.2f} "
          f"({len(at)} each; {a} {s(min(at))}-{s(max(at))}, {b} {s(min(bt))}-{s(max(bt))})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=6)
    args = parser.parse_args()
    client = images.docker_client()
    with grader_sandbox(client, images.image_id(client, "grader"), labels={},
                        name_hint="bench-exit") as box:
        print_ratio("forked child, fork to reaped", _run(box, FORKS, args.reps))
        print_ratio("judge, start to exit", _run(box, JUDGES, args.reps))


if __name__ == "__main__":
    main()
