"""Gap: the default ``proxy`` model tracker crashes inside the DDP constructor.

Two processes (``torch.multiprocessing.spawn``, gloo on 127.0.0.1) each wrap a
``Linear(4, 4)`` in ``DistributedDataParallel`` and train 2 steps. The program prints
a marker before and after the ``DistributedDataParallel(...)`` call. It is traced with
``--models-to-track model`` and the default tracker (``proxy``), then, as a control,
with ``--model-tracker-style sampler``. The script reports the exit code, the signal
``torch.multiprocessing`` reports for the dead worker, the innermost frames of the
crashed thread (Python's fault handler), and which markers each run printed.

Run inside the TrainCheck image: ``python 04_proxy_ddp_segfault.py`` (about 35 s of CPU).
"""

from __future__ import annotations

import os
import re
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
    print(f"rank {rank}: before DDP", flush=True)
    model = DDP(model)
    print(f"rank {rank}: after DDP", flush=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(8, 4)
    for step in range(2):
        optimizer.zero_grad()
        model(data).pow(2).sum().backward()
        optimizer.step()
    print(f"rank {rank}: trained", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, int(os.environ["GAP_PORT"])), nprocs=2)
"""


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def collect(work: Path, name: str, tracker_args: list[str]) -> tuple[int, str]:
    """Trace ``TRAIN``; return the exit code and everything the run printed."""
    src = work / f"{name}_src"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    out = work / f"{name}_trace"
    env = dict(os.environ, GAP_PORT=str(free_port()), PYTHONFAULTHANDLER="1")
    cmd = ["traincheck-collect", "-p", str(src / "train.py"), "--output-dir", str(out)]
    proc = subprocess.Popen(cmd + tracker_args, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        text, _ = proc.communicate()
        text += "\n[gap] killed after 300 s"
    program_output = out / "program_output.txt"
    if program_output.exists():
        text += "\n" + program_output.read_text()
    print(f"[{name}] traincheck-collect {' '.join(tracker_args)} -> exit {proc.returncode}")
    return proc.returncode, text


def markers(text: str, what: str) -> list[int]:
    """Ranks that printed ``rank R: <what>``."""
    return sorted({int(r) for r in re.findall(rf"rank (\d): {what}", text)})


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="gap04_"))
    rc, text = collect(work, "proxy", ["--models-to-track", "model"])
    signals = sorted(set(re.findall(r"terminated with signal (\w+)", text)))
    before, after = markers(text, "before DDP"), markers(text, "after DDP")
    print(f"[proxy] ranks before DDP: {before}; after DDP: {after}; signals: {signals}")
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in text.splitlines()]
    for i, line in enumerate(lines):
        if line.startswith("Current thread"):  # fault handler: the thread that crashed
            for frame in lines[i : i + 7]:
                print(f"[proxy] | {frame[:150]}")
            break
    print(f"[proxy] | {next((x for x in lines if 'terminated with signal' in x), '')}")

    ctl_rc, ctl_text = collect(
        work, "sampler", ["--models-to-track", "model", "--model-tracker-style", "sampler"]
    )
    ctl_after, ctl_trained = markers(ctl_text, "after DDP"), markers(ctl_text, "trained")
    print(f"[sampler] ranks after DDP: {ctl_after}; trained: {ctl_trained}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"[cpu] traced runs: {usage.ru_utime + usage.ru_stime:.0f} s")

    crashed_in_ctor = rc != 0 and before == [0, 1] and len(after) < 2
    control_ok = ctl_rc == 0 and ctl_trained == [0, 1]
    if crashed_in_ctor and control_ok:
        print(
            f"GAP proxy_ddp_segfault: proxy tracker run exits {rc}, worker killed by "
            f"{'/'.join(signals) or 'no reported signal'} between 'before DDP' (ranks {before}) "
            f"and 'after DDP' (ranks {after}); sampler control trains on both ranks"
        )
    else:
        print(
            f"NO GAP proxy_ddp_segfault: proxy exit {rc}, after DDP on ranks {after}; "
            f"sampler control exit {ctl_rc}, trained ranks {ctl_trained}"
        )


if __name__ == "__main__":
    main()
