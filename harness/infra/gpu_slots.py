"""Exclusive GPU slots across every harness process on this host.

Each GPU is one lock file under the runs folder; a session holds ``flock`` on the files of
the GPUs it was given for its whole life. The kernel drops the lock when the process dies,
so a SIGKILLed harness never leaves a GPU taken. Containers get the held IDs as explicit
device requests, so two concurrent sessions can never see the same GPU.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from harness.errors import HarnessError


def detect_gpus() -> list[str]:
    """GPU indices from ``HARNESS_GPU_IDS`` (comma list, may be empty) or ``nvidia-smi``."""
    configured = os.environ.get("HARNESS_GPU_IDS")
    if configured is not None:
        return [g.strip() for g in configured.split(",") if g.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    result = subprocess.run(
        ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=30,
    )
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def require_gpus(count: int) -> None:
    """Refuse, before anything starts, a GPU count this host can never satisfy."""
    if count < 0:
        raise HarnessError(f"{count} GPUs asked for", "ask for 0 or more GPUs")
    have = len(detect_gpus()) if count else 0
    if count > have:
        raise HarnessError(f"the session needs {count} GPU(s) but this host has {have}",
                           "run it on a GPU host (see `harness doctor`), or with --gpus 0 "
                           "outside the frozen study")


class GpuLease:
    """GPUs held by one session; release (or process death) frees them."""

    def __init__(self, gpu_ids: list[str], fds: list[int], waited_s: float) -> None:
        self.gpu_ids = gpu_ids
        self.waited_s = waited_s  # queue time: reported, never charged to a budget
        self._fds = fds

    def release(self) -> None:
        for fd in self._fds:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        self._fds = []

    def __enter__(self) -> GpuLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class GpuSlots:
    def __init__(self, lock_dir: Path, gpu_ids: list[str] | None = None) -> None:
        self.lock_dir = lock_dir
        self.gpu_ids = detect_gpus() if gpu_ids is None else list(gpu_ids)

    def acquire(self, count: int, *, timeout_s: float = 0.0, poll_s: float = 0.2,
                on_wait: Callable[[str], None] | None = None) -> GpuLease:
        """Take ``count`` free GPUs, waiting up to ``timeout_s``; all or nothing.
        ``on_wait`` hears once what is waited for, when the first try finds too few free."""
        if count == 0:
            return GpuLease([], [], 0.0)
        if count < 0 or count > len(self.gpu_ids):
            raise HarnessError(
                f"the session needs {count} GPU(s) but this host has {len(self.gpu_ids)}",
                "run it on a GPU host, or declare a CPU configuration",
            )
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        while True:
            held: list[tuple[str, int]] = []
            for gpu in self.gpu_ids:
                fd = os.open(self.lock_dir / f"gpu-{gpu}.lock", os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                held.append((gpu, fd))
                if len(held) == count:
                    return GpuLease([g for g, _ in held], [f for _, f in held],
                                    time.monotonic() - started)
            for _gpu, fd in held:  # not enough free: give back what we took, then wait
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            if on_wait is not None:
                on_wait(f"waiting for {count} free GPU(s) of {len(self.gpu_ids)} on this host "
                        f"({len(held)} free now; other sessions hold the rest), up to "
                        f"{timeout_s:.0f} s")
                on_wait = None
            if time.monotonic() - started >= timeout_s:
                raise HarnessError(
                    f"no {count} free GPU(s) within {timeout_s:.0f} s "
                    f"({len(self.gpu_ids)} on this host, all busy)",
                    "wait for running sessions, or raise the queue timeout",
                )
            time.sleep(poll_s)
