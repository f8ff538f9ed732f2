"""What a forked candidate process of a warm server costs, two ideas side by side (grader image).

Each child does what a hidden check's training run does first: builds a small model and takes
AdamW steps (the first optimizer step imports ``torch._dynamo``: 214 modules), then exits as
the interpreter makes it. Reported: the child's CPU time (``wait4``'s rusage, so the shared
machine's load matters less than for wall time), median per side, sides alternating.

- **preload**: the server imports ``grading.warm_start.PRELOAD`` (today's), or that and
  ``torch._dynamo``. Not adopted whatever it saves: the import records the run's ``TMPDIR``,
  user and working folder in the process's environment and module state (see
  docs/oracle-strength.md, "What bounds it now").
- **teardown**: the child exits as ever, or keeps the server's preloaded modules alive past the
  exit (one reference leaked, so Python's finalization never clears them).

Usage: .venv/bin/python scripts/bench/bench_warm_child.py [--reps 6]
"""

from __future__ import annotations

import argparse
import json
import statistics

from harness import images
from harness.grade import JUDGE_USER, grader_sandbox
from harness.sandbox import Sandbox

CHILD = r'''
import ctypes, gc, json, os, sys
from grading.warm_start import PRELOAD
EXTRA = sys.argv[1:]
for name in (*PRELOAD, *EXTRA):
    __import__(name)
import torch
gc.collect()
gc.freeze()
preloaded = set(sys.modules) - {"__main__"}

def child_cpu(keep: bool) -> float:
    pid = os.fork()
    if pid == 0:
        model = torch.nn.Linear(64, 64)
        opt = torch.optim.AdamW(model.parameters())
        for _ in range(5):
            model(torch.randn(8, 64)).sum().backward()
            opt.step()
        if keep:
            kept = [sys.modules[n] for n in preloaded]
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))
            for n in preloaded:
                sys.modules.pop(n, None)
        sys.exit(0)
    _, status, usage = os.wait4(pid, 0)
    assert status == 0, status
    return usage.ru_utime + usage.ru_stime

SIDES = json.loads(os.environ["SIDES"])
times = {side: [] for side in SIDES}
for _ in range(int(os.environ["REPS"])):
    for side in SIDES:
        times[side].append(child_cpu(keep=side == "kept"))
print(json.dumps(times))
'''


def _run(box: Sandbox, sides: list[str], *extra: str, reps: int) -> dict[str, list[float]]:
    result = box.exec(["env", f"SIDES={json.dumps(sides)}", f"REPS={reps}", "python", "-c",
                       CHILD, *extra], timeout_s=1200, user=JUDGE_USER)
    assert result.exit_code == 0, result.output[-2000:]
    return json.loads(result.output.strip().splitlines()[-1])


def _table(title: str, times: dict[str, list[float]]) -> None:
    (a, at), (b, bt) = times.items()
    ma, mb = statistics.median(at), statistics.median(bt)
    print(f"{title}: median {a} {ma:.3f} s, {b} {mb:.3f} s, {b}/{a} {mb / ma:.2f} "
          f"({len(at)} each; {a} {min(at):.3f}-{max(at):.3f}, {b} {min(bt):.3f}-{max(bt):.3f})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=6)
    args = parser.parse_args()
    client = images.docker_client()
    with grader_sandbox(client, images.image_id(client, "grader"), labels={},
                        name_hint="bench-child") as box:
        # Two servers (one per import list), their children alternating rep by rep.
        preload: dict[str, list[float]] = {"today": [], "with_dynamo": []}
        for _ in range(args.reps):
            preload["today"] += _run(box, ["today"], reps=1)["today"]
            preload["with_dynamo"] += _run(box, ["with_dynamo"], "torch._dynamo",
                                           reps=1)["with_dynamo"]
        _table("preload, child CPU", preload)
        _table("teardown, child CPU", _run(box, ["exit", "kept"], reps=args.reps))


if __name__ == "__main__":
    main()
