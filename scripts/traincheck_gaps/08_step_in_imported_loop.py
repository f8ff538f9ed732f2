"""Gap: steps are counted only in loops of the main script, not in an imported module.

The same one-process SGD run (``Linear(4, 4)``, 3 steps) is traced twice with
``--models-to-track model --model-tracker-style sampler``: once with the training loop
in the traced main script, once with the identical loop in a function of a module
(``trainlib.py``, next to the main script) that the main script imports and calls. The
script lists the ``meta_vars.step`` and ``meta_vars.stage`` values of the variable
records (the sampler writes one record per parameter after every optimizer step) and
the step values seen on ``optimizer.step`` API records.

Run inside the TrainCheck image: ``python 08_step_in_imported_loop.py`` (about 15 s of CPU).
"""

from __future__ import annotations

import glob
import json
import os
import resource
import subprocess
import tempfile
from pathlib import Path

LOOP = """
def train_loop(model, optimizer, data, steps):
    for step in range(steps):
        optimizer.zero_grad()
        model(data).pow(2).sum().backward()
        optimizer.step()
"""

MAIN_IMPORTED = """
import torch
from trainlib import train_loop

torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loop(model, optimizer, torch.randn(8, 4), steps=3)
"""

MAIN_INLINE = """
import torch
""" + LOOP + """
torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loop(model, optimizer, torch.randn(8, 4), steps=3)
"""


def collect(work: Path, name: str, main: str) -> tuple[int, Path]:
    """Trace ``main`` (with ``trainlib.py`` beside it); return exit code and output folder."""
    src = work / f"{name}_src"
    src.mkdir()
    (src / "train.py").write_text(main)
    (src / "trainlib.py").write_text(LOOP)
    out = work / f"{name}_trace"
    cmd = ["traincheck-collect", "-p", str(src / "train.py"), "--output-dir", str(out),
           "--models-to-track", "model", "--model-tracker-style", "sampler"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    print(f"[{name}] traincheck-collect (sampler) -> exit {proc.returncode}")
    return proc.returncode, out


def observed(out: Path) -> tuple[list[tuple[int, str]], list[int]]:
    """(step, stage) of variable records, and steps of ``optimizer.step`` API records."""
    var_steps: list[tuple[int, str]] = []
    for path in glob.glob(str(out / "trace_VAR_*.log")):
        for line in Path(path).read_text().splitlines():
            meta = json.loads(line)["meta_vars"]
            var_steps.append((int(meta.get("step", -1)), str(meta.get("stage"))))
    api_steps: set[int] = set()
    for path in glob.glob(str(out / "trace_API_*.log")):
        for line in Path(path).read_text().splitlines():
            if '.SGD.step"' in line:
                api_steps.add(int(json.loads(line)["meta_vars"].get("step", -1)))
    return var_steps, sorted(api_steps)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="gap08_"))
    results = {}
    for name, source in [("imported", MAIN_IMPORTED), ("inline", MAIN_INLINE)]:
        rc, out = collect(work, name, source)
        var_steps, api_steps = observed(out)
        distinct = sorted({s for s, _ in var_steps})
        stages = sorted({st for _, st in var_steps})
        results[name] = (rc, len(var_steps), distinct, stages)
        print(f"[{name}] {len(var_steps)} variable records; steps {distinct}; stages {stages}; "
              f"SGD.step API records at steps {api_steps}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"[cpu] traced runs: {usage.ru_utime + usage.ru_stime:.0f} s")

    imp, inl = results["imported"], results["inline"]
    if imp[0] == 0 and inl[0] == 0 and imp[2] == [0] and inl[2] == [0, 1, 2, 3]:
        print(
            f"GAP step_in_imported_loop: loop in an imported module: all {imp[1]} parameter "
            f"records at step 0, stages {imp[3]}; same loop in the main script: steps "
            f"{inl[2]}, stages {inl[3]}"
        )
    else:
        print(f"NO GAP step_in_imported_loop: imported loop steps {imp[2]}, "
              f"inline loop steps {inl[2]}; exits {imp[0]}/{inl[0]}")


if __name__ == "__main__":
    main()
