"""Gap: trace records do not say which rank wrote them (only process and thread ids).

Two processes (``torch.multiprocessing.spawn``, gloo on 127.0.0.1) train a DDP
``Linear(4, 4)`` for 2 steps, traced with ``--models-to-track model
--model-tracker-style sampler``. The script reads every API and variable record and
counts the records whose ``meta_vars`` (the per-record context TrainCheck's relations
and preconditions can use) carry a rank, the top-level fields of the records, and the
only place a rank does appear: values returned by torch's own ``get_rank`` calls.

Run inside the TrainCheck image: ``python 07_rank_not_recorded.py`` (about 20 s of CPU).
"""

from __future__ import annotations

import glob
import json
import os
import resource
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

TRAIN = """
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(rank)
    data = torch.randn(8, 4)
    for step in range(2):
        optimizer.zero_grad()
        model(data).pow(2).sum().backward()
        optimizer.step()
    print(f"rank {rank}: pid {os.getpid()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, int(os.environ["GAP_PORT"])), nprocs=2)
"""


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def collect(work: Path) -> tuple[int, Path]:
    """Trace ``TRAIN`` with the sampler tracker; return exit code and output folder."""
    src = work / "src"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    out = work / "trace"
    env = dict(os.environ, GAP_PORT=str(free_port()))
    cmd = ["traincheck-collect", "-p", str(src / "train.py"), "--output-dir", str(out),
           "--models-to-track", "model", "--model-tracker-style", "sampler"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    print(f"[collect] traincheck-collect (sampler, 2 ranks) -> exit {proc.returncode}")
    return proc.returncode, out


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="gap07_"))
    rc, out = collect(work)
    total = with_rank = 0
    pids: set[int] = set()
    fields: set[str] = set()
    meta_keys: set[str] = set()
    get_rank_returns: dict[int, set[int]] = {}
    for path in glob.glob(str(out / "trace_*.log")):
        for line in Path(path).read_text().splitlines():
            rec = json.loads(line)
            total += 1
            fields.update(rec)
            meta_keys.update(rec.get("meta_vars") or {})
            with_rank += "rank" in (rec.get("meta_vars") or {})
            pids.add(rec["process_id"])
            if str(rec.get("function", "")).endswith(".get_rank") and rec.get("return_values"):
                returned = rec["return_values"].get("int")
                get_rank_returns.setdefault(rec["process_id"], set()).add(returned)
    print(f"[trace] {total} records from {len(pids)} processes (pids {sorted(pids)})")
    print(f"[trace] record fields: {sorted(fields)}")
    print(f"[trace] meta_vars keys: {sorted(meta_keys)}")
    print(f"[trace] records whose meta_vars carry a rank: {with_rank}/{total}")
    print(f"[trace] get_rank return values per pid: "
          f"{ {p: sorted(v) for p, v in get_rank_returns.items()} }")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"[cpu] traced run: {usage.ru_utime + usage.ru_stime:.0f} s")

    rank_fields = sorted(f for f in fields if "rank" in f.lower())
    if rc == 0 and total > 0 and with_rank == 0 and not rank_fields:
        print(
            f"GAP rank_not_recorded: 0/{total} records carry a rank (fields: process_id, "
            f"thread_id; meta_vars: {', '.join(sorted(meta_keys))}); the rank appears only as "
            f"a return value of torch's get_rank calls"
        )
    else:
        print(f"NO GAP rank_not_recorded: {with_rank}/{total} records carry a rank; rank "
              f"fields {rank_fields}; exit {rc}")


if __name__ == "__main__":
    main()
