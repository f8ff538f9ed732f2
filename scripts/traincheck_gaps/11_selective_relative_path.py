"""Gap: selective collection is silently lost when the program changes directory first.

``traincheck-collect --invariants FILE`` writes the selection (``instr_opts.json``) into
its output folder and starts the instrumented program there; the instrumentor, inserted
after the program's ``import torch``, then opens ``instr_opts.json`` by a path relative to
the working directory. A program that changes directory before it imports torch (an entry
script that moves to its project folder, as launchers do) finds no selection, and every
torch call is recorded as in a full collection, with no warning.

The same one-layer SGD program is traced twice with the same one-invariant selection
(naming ``Optimizer.zero_grad`` and ``SGD.step``): as it is, and with ``os.chdir`` to
another folder before ``import torch``. The script counts the distinct functions each
trace records.

Run inside the TrainCheck image: ``python 11_selective_relative_path.py`` (about 15 s of
CPU).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import tempfile
from pathlib import Path

TRAIN = """
import os
{chdir}
import torch

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randn(8, 4)
for step in range(2):
    optimizer.zero_grad()
    model(data).pow(2).sum().backward()
    optimizer.step()
"""

INVARIANT = {
    "num_negative_examples": 0, "num_positive_examples": 2,
    "params": [{"api_full_name": "torch.optim.optimizer.Optimizer.zero_grad",
                "param_type": "APIParam"},
               {"api_full_name": "torch.optim.sgd.SGD.step", "param_type": "APIParam"}],
    "precondition": {"func_lead": {"inverted": False,
                                   "preconditions": [{"clauses": "Unconditional"}]}},
    "relation": "FunctionLeadRelation",
    "text_description": "Optimizer.zero_grad() always precedes SGD.step()"}


def recorded_functions(work: Path, name: str, chdir: str) -> set[str]:
    """Trace the program with the one-invariant selection; the functions it recorded."""
    src = work / name
    src.mkdir()
    (src / "train.py").write_text(TRAIN.format(chdir=chdir))
    invariants = work / "one.json"
    invariants.write_text(json.dumps(INVARIANT) + "\n")
    out = work / f"{name}-trace"
    proc = subprocess.run(
        ["traincheck-collect", "-p", str(src / "train.py"), "--output-dir", str(out),
         "--invariants", str(invariants), "--sampling-interval", "1", "--warm-up-steps", "1"],
        capture_output=True, text=True, timeout=300)
    names = {json.loads(line)["function"]
             for path in glob.glob(str(out / "trace_API_*"))
             for line in Path(path).read_text().splitlines() if line.strip()}
    print(f"[{name}] traincheck-collect -> exit {proc.returncode}; instr_opts.json in the "
          f"output folder: {(out / 'instr_opts.json').exists()}; {len(names)} distinct "
          f"functions recorded: {sorted(names)[:4]}{' ...' if len(names) > 4 else ''}")
    return names


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        elsewhere = work / "elsewhere"
        elsewhere.mkdir()
        selected = {"torch.optim.optimizer.Optimizer.zero_grad", "torch.optim.sgd.SGD.step"}
        control = recorded_functions(work, "as-is", "")
        moved = recorded_functions(work, "chdir-first", f"os.chdir({str(elsewhere)!r})")
    if control <= selected and len(moved - selected) > 0:
        print(f"GAP selective_relative_path: with the same selection of 2 functions, a program "
              f"that changes directory before importing torch records {len(moved)} distinct "
              f"functions ({len(control)} without the chdir)")
    else:
        print(f"NO GAP selective_relative_path: {len(control)} functions recorded as is, "
              f"{len(moved)} with the chdir")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
