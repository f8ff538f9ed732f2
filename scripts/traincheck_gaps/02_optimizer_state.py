"""Gap: no TrainCheck tracker records optimizer state (Adam moments, step counts).

A one-process Adam run of a ``Linear(4, 4)`` for 3 steps is traced twice: with the
``sampler`` tracker on ``model``, and with the ``proxy`` tracker on both ``model`` and
``optimizer`` (the optimizer named explicitly). The program also saves the real
``exp_avg``, ``exp_avg_sq`` and ``step`` tensors after every step; this script hashes
them with TrainCheck's own ``dump_tensor`` and looks for those values in every record
of both traces (variable records and API-call arguments), and prints how the arguments of
``torch.optim.adam.adam`` (the lists of state tensors) are recorded. As a control it looks
for the parameter hashes the same way.

Run inside the TrainCheck image: ``python 02_optimizer_state.py`` (about 20 s of CPU).
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
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
data = torch.randn(8, 4)
snapshots = []
for step in range(3):
    optimizer.zero_grad()
    model(data).pow(2).sum().backward()
    optimizer.step()
    snapshots.append(
        {
            "params": {n: p.detach().clone() for n, p in model.named_parameters()},
            "state": [{k: v.clone() for k, v in s.items()} for s in optimizer.state.values()],
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


def variable_types(out: Path) -> dict[str, int]:
    """Count of variable records per ``var_type`` (sampler and proxy/subclass logs)."""
    counts: dict[str, int] = {}
    for path in glob.glob(str(out / "trace_VAR_*.log")) + glob.glob(str(out / "proxy_log.json")):
        for line in Path(path).read_text().splitlines():
            rec = json.loads(line)
            counts[rec["var_type"]] = counts.get(rec["var_type"], 0) + 1
    return counts


def adam_call_arguments(out: Path) -> str:
    """The positional arguments (lists of parameters, grads, moments, steps) of the first
    recorded call of ``torch.optim.adam.adam``, as TrainCheck serialised them."""
    for path in glob.glob(str(out / "trace_API_*.log")):
        for line in Path(path).read_text().splitlines():
            if '"torch.optim.adam.adam"' in line:
                rec = json.loads(line)
                if rec.get("args"):
                    return json.dumps(rec["args"])
    return "no call recorded"


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="gap02_"))
    runs = {
        "sampler": ["--models-to-track", "model", "--model-tracker-style", "sampler"],
        "proxy": ["--models-to-track", "model", "optimizer", "--model-tracker-style", "proxy"],
    }
    results = {}
    for name, args in runs.items():
        rc, out = collect(work, name, args)
        snapshots = torch.load(work / f"{name}_snapshots.pt")
        state_hashes = {
            dump_tensor(t) for snap in snapshots for s in snap["state"] for t in s.values()
        }
        param_hashes = {dump_tensor(t) for snap in snapshots for t in snap["params"].values()}
        ints = recorded_integers(out)
        results[name] = (
            rc,
            len(state_hashes & ints),
            len(state_hashes),
            len(param_hashes & ints),
            len(param_hashes),
        )
        print(f"[{name}] variable records by type: {variable_types(out)}")
        if name == "sampler":
            print(f"[{name}] args of torch.optim.adam.adam as recorded: {adam_call_arguments(out)}")
        print(
            f"[{name}] optimizer-state values found in trace: "
            f"{results[name][1]}/{len(state_hashes)}; "
            f"parameter values found (control): {results[name][3]}/{len(param_hashes)}"
        )
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"[cpu] traced runs: {usage.ru_utime + usage.ru_stime:.0f} s")

    ok = all(r[0] == 0 and r[3] > 0 for r in results.values())
    missing = all(r[1] == 0 for r in results.values())
    summary = "; ".join(
        f"{n}: state {r[1]}/{r[2]}, params {r[3]}/{r[4]}" for n, r in results.items()
    )
    if ok and missing:
        print(
            "GAP optimizer_state: no Adam exp_avg/exp_avg_sq/step value appears in any record "
            f"({summary} values found)"
        )
    else:
        print(f"NO GAP optimizer_state: {summary} values found; exit codes "
              f"{[r[0] for r in results.values()]}")


if __name__ == "__main__":
    main()
