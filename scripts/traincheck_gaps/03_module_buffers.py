"""Gap: no TrainCheck tracker records module buffers (``register_buffer`` tensors).

A one-process SGD run of ``Linear(4, 4) -> BatchNorm1d(4)`` for 3 steps is traced with
each model tracker (``sampler``, ``proxy``, ``subclass``) on ``model``. The program saves
the real BatchNorm ``running_mean`` / ``running_var`` / ``num_batches_tracked`` buffers
after every step; this script hashes them with TrainCheck's own ``dump_tensor``, looks
for those values in every record of each trace, and lists the variable names recorded.
As a control it looks for the parameter hashes the same way.

Run inside the TrainCheck image: ``python 03_module_buffers.py`` (about 25 s of CPU).
"""

from __future__ import annotations

import glob
import json
import os
import re
import resource
import subprocess
import tempfile
from pathlib import Path

import torch
from traincheck.instrumentor.dumper import dump_tensor

TRAIN = """
import os
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randn(8, 4)
snapshots = []
for step in range(3):
    optimizer.zero_grad()
    model(data).pow(2).sum().backward()
    optimizer.step()
    snapshots.append(
        {
            "params": {n: p.detach().clone() for n, p in model.named_parameters()},
            "buffers": {n: b.clone() for n, b in model.named_buffers()},
        }
    )
torch.save(snapshots, os.environ["GAP_SNAPSHOTS"])
"""


def collect(work: Path, name: str, tracker_args: list[str]) -> tuple[int, Path]:
    """Trace ``TRAIN`` with ``traincheck-collect``; return its exit code and output folder."""
    src = work / f"{name}_src"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    out = work / f"{name}_trace"
    env = dict(os.environ, GAP_SNAPSHOTS=str(work / f"{name}_snapshots.pt"))
    cmd = ["traincheck-collect", "-p", str(src / "train.py"), "--output-dir", str(out)]
    proc = subprocess.run(
        cmd + tracker_args, env=env, capture_output=True, text=True, timeout=600
    )
    print(f"[{name}] traincheck-collect {' '.join(tracker_args)} -> exit {proc.returncode}")
    return proc.returncode, out


def recorded_integers(out: Path) -> set[int]:
    """Every integer that appears in any trace file of ``out``."""
    found: set[int] = set()
    for path in glob.glob(str(out / "trace_*.log")) + glob.glob(str(out / "proxy_log.json")):
        found.update(int(m) for m in re.findall(r"-?\d{5,}", Path(path).read_text()))
    return found


def variable_names(out: Path) -> list[str]:
    """Distinct ``var_name`` of the variable records (sampler and proxy/subclass logs)."""
    names: set[str] = set()
    for path in glob.glob(str(out / "trace_VAR_*.log")) + glob.glob(str(out / "proxy_log.json")):
        for line in Path(path).read_text().splitlines():
            names.add(json.loads(line)["var_name"])
    return sorted(names)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="gap03_"))
    results = {}
    for style in ["sampler", "proxy", "subclass"]:
        args = ["--models-to-track", "model", "--model-tracker-style", style]
        rc, out = collect(work, style, args)
        snapshots = torch.load(work / f"{style}_snapshots.pt")
        buffer_hashes = {dump_tensor(t) for snap in snapshots for t in snap["buffers"].values()}
        param_hashes = {dump_tensor(t) for snap in snapshots for t in snap["params"].values()}
        ints = recorded_integers(out)
        names = variable_names(out)
        buffer_names = [n for n in names if "running" in n or "num_batches" in n]
        results[style] = (rc, len(buffer_hashes & ints), len(buffer_hashes),
                          len(param_hashes & ints), len(param_hashes), buffer_names)
        print(f"[{style}] variable names recorded: {names}")
        print(
            f"[{style}] buffer values found in trace: {results[style][1]}/{len(buffer_hashes)}; "
            f"parameter values found (control): {results[style][3]}/{len(param_hashes)}"
        )
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"[cpu] traced runs: {usage.ru_utime + usage.ru_stime:.0f} s")

    ok = all(r[0] == 0 and r[3] > 0 for r in results.values())
    missing = all(r[1] == 0 and not r[5] for r in results.values())
    summary = "; ".join(
        f"{n}: buffers {r[1]}/{r[2]}, params {r[3]}/{r[4]}" for n, r in results.items()
    )
    if ok and missing:
        print(
            "GAP module_buffers: no BatchNorm running_mean/running_var/num_batches_tracked "
            f"name or value in any record ({summary} values found)"
        )
    else:
        print(f"NO GAP module_buffers: {summary} values found; exit codes "
              f"{[r[0] for r in results.values()]}")


if __name__ == "__main__":
    main()
