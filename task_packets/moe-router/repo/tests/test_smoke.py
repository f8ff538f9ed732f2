"""Smoke runs through train.py: cpu-1, and gloo-ddp-2 against one process."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from conftest import max_abs_diff, run_train


def test_cpu1_smoke(tmp_path: Path) -> None:
    run_train("cpu-1", ["--steps", "30", "--out", str(tmp_path)])
    losses = [json.loads(line)["loss"] for line in (tmp_path / "metrics.jsonl").open()]
    assert len(losses) == 30 and losses[-1] < losses[0] - 0.3
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 30 and summary["heldout_loss"] < 4.0


def test_ddp2_matches_one_process_and_resumes_in_one_process(tmp_path: Path) -> None:
    """Same global batch: DDP over 2 ranks equals one process in fp64; its checkpoint loads in
    one process and continues the same trajectory."""
    common = ["--steps", "10", "--dtype", "fp64", "--global-batch", "8"]
    run_train("gloo-ddp-2", [*common, "--out", str(tmp_path / "ddp"),
                             "--ckpt", str(tmp_path / "ckpt"), "--save-every", "5"])
    run_train("cpu-1", [*common, "--out", str(tmp_path / "one")])
    run_train("cpu-1", [*common, "--out", str(tmp_path / "resumed"),
                        "--resume", str(tmp_path / "ckpt" / "step_5")])
    ddp = torch.load(tmp_path / "ddp" / "final_state.pt", weights_only=True)
    one = torch.load(tmp_path / "one" / "final_state.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed" / "final_state.pt", weights_only=True)
    assert max_abs_diff(ddp, one) < 1e-10
    assert max_abs_diff(ddp, resumed) < 1e-10
    ddp_losses = [json.loads(line)["loss"] for line in (tmp_path / "ddp" / "metrics.jsonl").open()]
    one_losses = [json.loads(line)["loss"] for line in (tmp_path / "one" / "metrics.jsonl").open()]
    assert max(abs(a - b) for a, b in zip(ddp_losses, one_losses, strict=True)) < 1e-10
