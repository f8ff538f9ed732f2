"""Hidden checks for the tiny-regression warmup feature.

HARNESS-CANARY-cb4cf97d-ab89-49ac-b08e-dffff2484716
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

These run in the judge's pytest, which never imports candidate code: the candidate's API is
called through ``probes/warmup_probe.py`` in a sealed process (``grading.probe``), and its CLI
runs as the candidate uid in a job folder; results come back as data. Expected values are
computed here, from the task statement, not taken from the candidate: the learning rate of
step s (0-based) under warmup N is lr * min(1, (s + 1) / N), and the parameter trajectory is
recomputed with a hand-written SGD-with-momentum loop over the pristine baseline's model, data
and sampler (GRADING_BASELINE, root-owned: trusted code, never the candidate's).
"""

# HARNESS-CANARY-cb4cf97d-ab89-49ac-b08e-dffff2484716

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from grading import probe, sealed
from grading.compare import max_abs_diff, max_abs_diff_states, within, worst
from grading.run import run_command

LR = 0.05
MOMENTUM = 0.9  # the baseline's SGD momentum, unchanged by the task
# Same arithmetic in a different code path: fp32 agreement to ~1e-7 is expected; 1e-6 leaves
# room for a legitimately different but equivalent way of setting the learning rate.
PARAM_ATOL = 1e-6
LR_TOL = 1e-12
SUBPROCESS_TIMEOUT_S = 120
PROBE = "warmup_probe"


def workdir() -> Path:
    return Path(os.environ["GRADING_WORKDIR"])


def baseline_dir() -> Path | None:
    value = os.environ.get("GRADING_BASELINE")
    return Path(value) if value else None


def pristine() -> ModuleType:
    """The pristine baseline's tinytrain package (the judge's own read-only copy)."""
    root = baseline_dir()
    assert root is not None, "GRADING_BASELINE is not set"
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module("tinytrain")


def expected_lr(step: int, lr: float, warmup: int) -> float:
    return lr if warmup == 0 else lr * min(1.0, (step + 1) / warmup)


def reference_run(steps: int, warmup: int, lr: float = LR, seed: int = 0) -> dict[str, Any]:
    """Independent re-implementation of the training loop with the specified schedule.

    Uses only the baseline's model, data and sampler (which the task does not touch), and the
    same RNG order as the baseline trainer: seed, data, model init, then dropout draws.
    """
    tt = pristine()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    x, y = tt.make_dataset(256, 8, seed=seed)
    model = tt.MLP(8, 32)
    model.train()
    params = list(model.parameters())
    bufs: list[torch.Tensor | None] = [None] * len(params)
    sampler = tt.BatchSampler(256, 32, seed=seed + 1)
    losses = []
    for step in range(steps):
        idx = sampler.next_indices()
        loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
        grads = torch.autograd.grad(loss, params)
        step_lr = expected_lr(step, lr, warmup)
        with torch.no_grad():
            for i, (p, g) in enumerate(zip(params, grads, strict=True)):
                b = bufs[i]
                b = g.clone() if b is None else b.mul_(MOMENTUM).add_(g)
                bufs[i] = b
                p.add_(b, alpha=-step_lr)
        losses.append(loss.item())
    return {"state": model.state_dict(), "losses": losses}


def train(**config: Any) -> dict[str, Any]:
    """The candidate's ``train(TrainConfig(**config))``: its history and final state."""
    return probe.call(PROBE, "train", **config)


def cli_run(name: str, root: Path, args: list[str]) -> Path:
    """``python train.py ARGS --out OUT`` as the candidate uid on ``root``; the sealed OUT."""
    job = sealed.job_dir(name)
    log = Path(tempfile.mkdtemp(prefix=f"{name}-")) / "run.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(root)
    res = run_command([sys.executable, "train.py", *args, "--out", str(job / "out")],
                      cwd=root, env=env, timeout_s=SUBPROCESS_TIMEOUT_S, log_path=log)
    sealed.seal(job)
    if res.timed_out:
        raise probe.CandidateRunFailed("hang", f"{name} run still running after "
                                       f"{SUBPROCESS_TIMEOUT_S} s\n{log.read_text()[-2000:]}")
    assert res.exit_code == 0, f"{name} run failed:\n{log.read_text()[-3000:]}"
    return job / "out"


def assert_same_params(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs: max {(a[key] - b[key]).abs().max()}"


def assert_follows_reference(state: Any, steps: int, warmup: int) -> float:
    """The candidate's parameters after ``steps`` steps are the judge's SGD loop's with the
    ramp: a schedule that is only reported, not applied, cannot pass."""
    err = max_abs_diff_states(state, reference_run(steps=steps, warmup=warmup)["state"])
    assert within(err, PARAM_ATOL), f"parameters differ from the reference loop by {err:g}"
    return err


def lr_error(lrs: Any, warmup: int, first_step: int = 0) -> float:
    if not isinstance(lrs, list) or not lrs:
        return float("inf")
    return worst(abs(float(lr) - expected_lr(first_step + s, LR, warmup)) if
                 isinstance(lr, int | float) and not isinstance(lr, bool) else float("nan")
                 for s, lr in enumerate(lrs))


@pytest.mark.parametrize(("warmup", "steps"), [(1, 4), (5, 12)])
def test_lr_follows_linear_warmup(warmup: int, steps: int, record_property: Any) -> None:
    """Under --warmup-steps N the LR of step s is lr * min(1, (s + 1) / N), within 1e-12, and the parameters follow that schedule (a hand-written SGD loop, atol 1e-6)."""
    result = train(steps=steps, lr=LR, warmup_steps=warmup)
    got = [h["lr"] for h in result["history"]]
    want = [expected_lr(s, LR, warmup) for s in range(steps)]
    assert len(got) == steps
    err = lr_error(got, warmup)
    record_property("max_abs_lr_error", err)
    assert within(err, LR_TOL), f"learning rates {got} != expected {want}"
    record_property("max_abs_param_diff", assert_follows_reference(result["state"], steps, warmup))


def test_training_matches_independent_reference(record_property: Any) -> None:
    """A 10-step run with warmup 4 matches a hand-written SGD loop with the ramp (atol 1e-6)."""
    result = train(steps=10, lr=LR, warmup_steps=4)
    ref = reference_run(steps=10, warmup=4)
    err = max_abs_diff_states(result["state"], ref["state"])
    record_property("max_abs_param_diff", err)
    assert within(err, PARAM_ATOL)
    losses = torch.tensor([float(h["loss"]) for h in result["history"]], dtype=torch.float64)
    want = torch.tensor(ref["losses"], dtype=torch.float64)
    assert within(max_abs_diff(losses, want), 1e-7 + 1e-5 * float(want.abs().max())), \
        f"losses {losses.tolist()} != reference {want.tolist()}"


def test_warmup_zero_is_bitwise_baseline() -> None:
    """--warmup-steps 0 gives bit-for-bit the pristine baseline's run (CLI, 8 steps)."""
    baseline = baseline_dir()
    if baseline is None:
        pytest.skip("GRADING_BASELINE is not set: no pristine baseline to compare with")
    outs = {"baseline": cli_run("baseline", baseline, ["--steps", "8"]),
            "candidate": cli_run("candidate", workdir(), ["--steps", "8", "--warmup-steps", "0"])}
    states = {name: torch.load(out / "checkpoint.pt", weights_only=True)["model"]
              for name, out in outs.items()}
    assert_same_params(states["baseline"], states["candidate"])
    metrics = {name: (out / "metrics.jsonl").read_text() for name, out in outs.items()}
    assert metrics["candidate"] == metrics["baseline"]


def test_default_config_is_baseline_behaviour() -> None:
    """Not passing warmup_steps equals warmup_steps=0 bitwise and matches the constant-LR loop."""
    runs = probe.call(PROBE, "default_and_zero", steps=6)
    default, zero = runs["default"], runs["zero"]
    assert_same_params(default["state"], zero["state"])
    assert [h["lr"] for h in zero["history"]] == [LR] * 6
    assert_follows_reference(zero["state"], steps=6, warmup=0)


def test_resume_mid_warmup_equals_uninterrupted() -> None:
    """Stopping at step 3 of a 6-step warmup and resuming gives the uninterrupted run, bitwise, and both follow the ramp (a hand-written SGD loop, atol 1e-6)."""
    runs = probe.call(PROBE, "resume_mid_warmup", steps=10, warmup=6, stop_at=3)
    full, resumed = runs["full"], runs["resumed"]
    assert [h["step"] for h in resumed["history"]] == list(range(3, 10))
    assert [h["lr"] for h in resumed["history"]] == [h["lr"] for h in full["history"][3:]]
    assert within(lr_error([h["lr"] for h in resumed["history"]], 6, first_step=3), LR_TOL)
    assert_same_params(full["state"], resumed["state"])
    assert_follows_reference(full["state"], steps=10, warmup=6)


def test_cli_warmup_flag() -> None:
    """python train.py --warmup-steps 3 logs the linear ramp in metrics.jsonl and trains with it (its checkpoint is the hand-written SGD loop's, atol 1e-6)."""
    out = cli_run("cli", workdir(), ["--steps", "5", "--warmup-steps", "3"])
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 5
    assert [rec.get("step") for rec in lines] == list(range(5))
    assert within(lr_error([rec.get("lr") for rec in lines], 3), LR_TOL)
    state = torch.load(out / "checkpoint.pt", weights_only=True)["model"]
    assert_follows_reference(state, steps=5, warmup=3)


def test_negative_warmup_is_rejected() -> None:
    """warmup_steps < 0 raises ValueError instead of training."""
    raised = probe.call(PROBE, "raised_by", steps=2, warmup_steps=-1)
    assert raised is not None, "train() accepted warmup_steps=-1"
    assert "ValueError" in raised, f"train() raised {raised[0]}, not a ValueError"
