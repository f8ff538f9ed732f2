"""Smoke runs of train.py: cpu-1 (with checkpoint resume and export) and gloo-ddp-2.

Each run is a fresh process (as in production); the distributed one uses torchrun with a
static loopback rendezvous on a free port.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_train(config: str, *args: str) -> None:
    cmd = [sys.executable, "train.py", "--config", config, *args]
    if config != "cpu-1":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
               "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", str(free_port()), *cmd[1:]]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"


def load_final(out: Path) -> dict:
    return torch.load(out / "final_state.pt", weights_only=True)


def max_diff(a: dict, b: dict) -> float:
    """Largest absolute difference over two nested state dicts with the same structure."""
    if isinstance(a, torch.Tensor):
        return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    if isinstance(a, dict):
        assert set(a) == set(b), sorted(set(a) ^ set(b))
        return max((max_diff(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, (list, tuple)):
        return max((max_diff(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    assert a == b
    return 0.0


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 fp64 steps in one process, checkpointing at step 10, with an export."""
    out = tmp_path_factory.mktemp("cpu")
    run_train("cpu-1", "--steps", "20", "--dtype", "fp64", "--out", str(out / "run"),
              "--save-every", "10", "--ckpt", str(out / "ckpt"),
              "--export", str(out / "model.pt2"))
    return out


def test_cpu1_smoke(cpu_run: Path) -> None:
    lines = (cpu_run / "run" / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(line)["loss"] for line in lines]
    assert len(losses) == 20
    assert losses[-1] < losses[0] - 0.5
    summary = json.loads((cpu_run / "run" / "summary.json").read_text())
    assert summary["world_size"] == 1 and summary["heldout_loss"] < losses[0]
    assert (cpu_run / "model.pt2").is_file()
    program = torch.export.load(str(cpu_run / "model.pt2"))
    final = load_final(cpu_run / "run")
    assert set(program.state_dict) == set(final["model"])


def test_cpu1_resume_matches_uninterrupted(cpu_run: Path, tmp_path: Path) -> None:
    run_train("cpu-1", "--steps", "20", "--dtype", "fp64", "--out", str(tmp_path),
              "--resume", str(cpu_run / "ckpt" / "step-10"))
    # Model, optimizer, scheduler, data position and RNG all restored: bitwise equal.
    assert max_diff(load_final(tmp_path), load_final(cpu_run / "run")) == 0.0


def test_gloo_ddp2_matches_one_process(cpu_run: Path, tmp_path: Path) -> None:
    run_train("gloo-ddp-2", "--steps", "20", "--dtype", "fp64", "--out", str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["world_size"] == 2
    # Same global batch, so only reduction order differs: fp64 keeps that far below 1e-10.
    assert max_diff(load_final(tmp_path)["model"], load_final(cpu_run / "run")["model"]) < 1e-10
