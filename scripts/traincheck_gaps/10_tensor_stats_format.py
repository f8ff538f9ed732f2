"""Gap: ``--tensor-dump-format stats`` is no way around the row-0 hash: the ``sampler``
tracker ignores it, and with the ``subclass`` tracker a gradient that is updated in
place keeps the statistics of its first record.

A one-process SGD run of a ``Linear(4, 4)`` for 3 steps, with
``optimizer.zero_grad(set_to_none=False)`` (gradients zeroed in place, as with gradient
accumulation or DDP's bucket views), prints the true mean of ``model.weight.grad`` after
every step. It is traced with ``--tensor-dump-format stats`` and the ``sampler``
tracker, then with the ``subclass`` tracker. The script reports the type of the
recorded ``data`` value and compares the recorded gradient means with the true ones.

Run inside the TrainCheck image: ``python 10_tensor_stats_format.py`` (about 15 s of CPU).
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

TRAIN = """
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randn(8, 4)
for step in range(3):
    optimizer.zero_grad(set_to_none=False)
    model(data).pow(2).sum().backward()
    optimizer.step()
    print(f"true grad mean after step {step + 1}: {float(model.weight.grad.mean())!r}")
"""


def collect(work: Path, style: str) -> tuple[int, Path, str]:
    """Trace ``TRAIN`` with ``--tensor-dump-format stats``; return exit code, folder, output."""
    src = work / f"{style}_src"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    out = work / f"{style}_trace"
    cmd = ["traincheck-collect", "-p", str(src / "train.py"), "--output-dir", str(out),
           "--models-to-track", "model", "--model-tracker-style", style,
           "--tensor-dump-format", "stats"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    print(f"[{style}] traincheck-collect --tensor-dump-format stats -> exit {proc.returncode}")
    return proc.returncode, out, proc.stdout + proc.stderr


def weight_records(out: Path) -> list[dict]:
    """Variable records of ``model.weight`` (sampler and subclass logs)."""
    recs = []
    for path in glob.glob(str(out / "trace_VAR_*.log")) + glob.glob(str(out / "proxy_log.json")):
        for line in Path(path).read_text().splitlines():
            rec = json.loads(line)
            if rec["var_name"] == "model.weight":
                recs.append(rec)
    return recs


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="gap10_"))
    rc_s, out_s, _ = collect(work, "sampler")
    sampler_types = sorted({type(r["attributes"]["data"]).__name__ for r in weight_records(out_s)})
    print(f"[sampler] recorded data value types: {sampler_types} (int = hash, dict = stats)")

    rc_c, out_c, text = collect(work, "subclass")
    program_file = out_c / "program_output.txt"
    program = program_file.read_text() if program_file.exists() else text
    true_means = {int(s): float(v) for s, v in
                  re.findall(r"true grad mean after step (\d): (-?[\d.e+-]+)", program)}
    recorded: dict[int, set[float]] = {}
    for rec in weight_records(out_c):
        grad = rec["attributes"].get("grad")
        if isinstance(grad, dict):
            recorded.setdefault(int(rec["meta_vars"]["step"]), set()).add(grad["mean"])
    print(f"[subclass] true weight.grad mean per step: {true_means}")
    print(f"[subclass] recorded weight.grad mean per step: "
          f"{ {s: sorted(v) for s, v in sorted(recorded.items())} }")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"[cpu] traced runs: {usage.ru_utime + usage.ru_stime:.0f} s")

    stale = sorted(s for s, means in recorded.items()
                   if s in true_means and s > 1 and true_means[s] not in means)
    ignored = sampler_types == ["int"]
    steps = sorted(true_means)
    shown_rec = [round(min(recorded.get(s, {float("nan")})), 4) for s in steps]
    shown_true = [round(true_means[s], 4) for s in steps]
    sampler_part = ("sampler ignores the stats format (records integer hashes)" if ignored
                    else f"sampler records {'/'.join(sampler_types)} values")
    if rc_s == 0 and rc_c == 0 and (ignored or stale):
        print(
            f"GAP tensor_stats_format: {sampler_part}; subclass records weight.grad mean "
            f"{shown_rec} at steps {steps}, true {shown_true} (stale at steps {stale})"
        )
    else:
        print(f"NO GAP tensor_stats_format: sampler value types {sampler_types}; stale "
              f"gradient steps {stale}; exits {rc_s}/{rc_c}")


if __name__ == "__main__":
    main()
