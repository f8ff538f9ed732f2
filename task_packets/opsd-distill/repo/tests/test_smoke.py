"""Smoke runs: cpu-1 in process and through the CLI, gloo-ddp-2 under torchrun."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from conftest import load_final, max_param_diff, run_cli
from tinylm.config import TrainConfig
from tinylm.trainer import read_metrics, train


def test_cpu1_loss_decreases_and_is_deterministic(tmp_path: Path) -> None:
    a = train(TrainConfig(steps=60, out=tmp_path / "a"))
    losses = [r["loss"] for r in read_metrics(tmp_path / "a")]
    assert len(losses) == 60 and sum(losses[-10:]) < 0.7 * sum(losses[:10])
    assert 0.0 <= a["heldout"]["exact_match"] <= 1.0 and a["heldout"]["loss"] > 0
    train(TrainConfig(steps=60, out=tmp_path / "b", no_eval=True))
    assert max_param_diff(load_final(tmp_path / "a")["model"], load_final(tmp_path / "b")["model"]) == 0.0


def test_cpu1_resume_equals_uninterrupted(tmp_path: Path) -> None:
    train(TrainConfig(steps=12, out=tmp_path / "full", no_eval=True))
    train(TrainConfig(steps=12, out=tmp_path / "first", ckpt=tmp_path / "ck", save_every=5, no_eval=True))
    train(TrainConfig(steps=12, out=tmp_path / "second", resume=tmp_path / "ck" / "step-5", no_eval=True))
    full, resumed = load_final(tmp_path / "full"), load_final(tmp_path / "second")
    assert max_param_diff(full["model"], resumed["model"]) == 0.0
    assert [r["step"] for r in read_metrics(tmp_path / "second")] == list(range(5, 12))
    assert [r["loss"] for r in read_metrics(tmp_path / "second")] == [
        r["loss"] for r in read_metrics(tmp_path / "full")
    ][5:]


def test_cpu1_cli_writes_outputs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_cli(["--config", "cpu-1", "--steps", "4", "--out", str(out), "--export", str(out / "model.pt")])
    assert [r["step"] for r in read_metrics(out)] == [0, 1, 2, 3]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_step"] == 4 and "exact_match" in summary["heldout"]
    assert (out / "model.pt").is_file() and (out / "final_state.pt").is_file()


def test_gloo_ddp2_matches_one_process_and_resumes(tmp_path: Path) -> None:
    common = ["--steps", "8", "--global-batch", "16", "--dtype", "fp64", "--no-eval"]
    train(TrainConfig(steps=8, global_batch=16, dtype="fp64", out=tmp_path / "one", no_eval=True))
    run_cli(["--config", "gloo-ddp-2", *common, "--out", str(tmp_path / "ddp"),
             "--ckpt", str(tmp_path / "ck"), "--save-every", "4"], nproc=2)
    one, ddp = load_final(tmp_path / "one"), load_final(tmp_path / "ddp")
    # Two ranks never match one process bit for bit (different reduction order); fp64 is close.
    assert max_param_diff(one["model"], ddp["model"]) < 1e-10
    run_cli(["--config", "gloo-ddp-2", *common, "--out", str(tmp_path / "resumed"),
             "--resume", str(tmp_path / "ck" / "step-4")], nproc=2)
    resumed = load_final(tmp_path / "resumed")
    assert max_param_diff(ddp["model"], resumed["model"]) == 0.0
    assert torch.equal(ddp["optimizer"]["state"]["lm_head.weight"]["exp_avg"],
                       resumed["optimizer"]["state"]["lm_head.weight"]["exp_avg"])
