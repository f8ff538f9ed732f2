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

from bench_process_exit import print_ratio, run_json  # this folder (run as a script)

from harness.infra import images
from harness.infra.sandbox import Sandbox
from harness.oracle.grade import grader_sandbox

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
    return run_json(box, CHILD, *extra, env={"SIDES": json.dumps(sides), "REPS": str(reps)})


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
        print_ratio("preload, child CPU", preload, digits=3)
        print_ratio("teardown, child CPU", _run(box, ["exit", "kept"], reps=args.reps),
                    digits=3)


if __name__ == "__main__":
    main()
