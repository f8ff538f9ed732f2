"""Shared helpers for the public tests; run them with ``python -m pytest -q tests``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_train(config: str, args: list[str], timeout: float = 120) -> None:
    """Run train.py as a fresh process (two under torchrun for the distributed configs)."""
    if config == "cpu-1":
        cmd = [sys.executable, "train.py", "--config", config, *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
               "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", str(free_port()), "train.py", "--config", config, *args]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts/lists -> {path: leaf}, to compare whole model + optimizer states."""
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items()
                for k, v in flatten(val, f"{prefix}/{key}").items()}
    if isinstance(obj, (list, tuple)):
        return {k: v for i, val in enumerate(obj) for k, v in flatten(val, f"{prefix}/{i}").items()}
    return {prefix: obj}


def max_abs_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    fa, fb = flatten(a), flatten(b)
    assert fa.keys() == fb.keys(), sorted(set(fa) ^ set(fb))
    worst = 0.0
    for key, x in fa.items():
        y = fb[key]
        if isinstance(x, torch.Tensor):
            worst = max(worst, (x.double() - y.double()).abs().max().item() if x.numel() else 0.0)
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            worst = max(worst, abs(float(x) - float(y)))
        else:
            assert x == y, key
    return worst


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)
