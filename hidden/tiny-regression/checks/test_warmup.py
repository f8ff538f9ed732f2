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

What a probe returns is written in the candidate's process, and a candidate can make it say
anything (``grading.observation``): each check declares where its observations are made, and
none rests on a probe's word alone. Whatever only the candidate's process can see (the class of
an exception, the default of a field, an in-process resume) is corroborated by the command line
run as the candidate in a sealed job folder: how it exits, and parameters the judge reads from
its checkpoint and holds to its own loop. A tree without the option cannot pass any check by
reporting it.
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
from grading.observation import CANDIDATE_REPORT, JUDGE, OUTSIDE, observed_in
from grading.run import RunResult, run_command

LR = 0.05
MOMENTUM = 0.9  # the baseline's SGD momentum, unchanged by the task
# Same arithmetic in a different code path: fp32 agreement to ~1e-7 is expected; 1e-6 leaves
# room for a legitimately different but equivalent way of setting the learning rate.
PARAM_ATOL = 1e-6
LR_TOL = 1e-12
SUBPROCESS_TIMEOUT_S = 120
PROBE = "warmup_probe"
# A checkpoint of this MLP is a few KiB: anything near this is not one (read as data, bounded).
MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024
# The judge's perturbation of a checkpoint's weights before a resume (the parameters are O(0.1)):
# a run that ignores the checkpoint and recomputes its steps ends ~1e-2 away, 1e4 x PARAM_ATOL.
PERTURBATION_STD = 1e-2
PERTURBATION_SEED = 20240
# Five steps with --warmup-steps 3 move the parameters ~1e-2 from the constant-rate run's (the
# first steps use a third and two thirds of the rate); the same run without the ramp moves them
# by 0 (fp32 determinism), so 1e-4 tells an option that reaches training from one that is
# swallowed.
OPTION_EFFECT_MIN = 1e-4


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


def perturbation(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The judge's fixed noise for each parameter (its own generator, never the global RNG)."""
    gen = torch.Generator().manual_seed(PERTURBATION_SEED)
    return {k: torch.randn(v.shape, generator=gen, dtype=v.dtype) * PERTURBATION_STD
            for k, v in sorted(state.items())}


def reference_run(steps: int, warmup: int, lr: float = LR, seed: int = 0,
                  perturb_at: int | None = None) -> dict[str, Any]:
    """Independent re-implementation of the training loop with the specified schedule.

    Uses only the baseline's model, data and sampler (which the task does not touch), and the
    same RNG order as the baseline trainer: seed, data, model init, then dropout draws. With
    ``perturb_at``, the parameters after that many steps get :func:`perturbation` added (what a
    resume from the judge's perturbed checkpoint must continue from); the perturbed state is
    returned as ``perturbed``.
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
    perturbed = None
    for step in range(steps):
        if step == perturb_at:
            with torch.no_grad():
                noise = perturbation(dict(model.named_parameters()))
                for name, p in model.named_parameters():
                    p.add_(noise[name])
            perturbed = {k: v.detach().clone() for k, v in model.state_dict().items()}
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
    return {"state": model.state_dict(), "losses": losses, "perturbed": perturbed}


def train(**config: Any) -> dict[str, Any]:
    """The candidate's ``train(TrainConfig(**config))``: its history and final state."""
    return probe.call(PROBE, "train", **config)


def cli_attempt(name: str, root: Path, args: list[str]) -> tuple[RunResult, Path]:
    """``python train.py ARGS --out OUT`` as the candidate uid on ``root``, however it ends: how
    it exited, and the sealed OUT (which may hold nothing). A hang fails the check as one."""
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
    return res, job / "out"


def cli_run(name: str, root: Path, args: list[str]) -> Path:
    """``python train.py ARGS --out OUT`` as the candidate uid on ``root``; the sealed OUT."""
    res, out = cli_attempt(name, root, args)
    assert res.exit_code == 0, f"{name} run failed:\n{res.log_path.read_text()[-3000:]}"
    return out


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A run's checkpoint as data: bounded, tensors and plain containers only (``probe.load``:
    ``weights_only``, never a pickle that runs code)."""
    assert path.is_file(), f"the run left no {path.name}"
    state = probe.load(path, max_bytes=MAX_CHECKPOINT_BYTES)
    assert isinstance(state, dict), f"{path.name} holds a {type(state).__name__}, not a dict"
    return state


def checkpoint_model(path: Path) -> dict[str, Any]:
    model = read_checkpoint(path).get("model")
    assert isinstance(model, dict), f"{path.name} holds no model state dict"
    return model


def trained_lines(out: Path) -> int:
    """How many records a run's metrics.jsonl holds (0 when it wrote none)."""
    metrics = out / "metrics.jsonl"
    return len(metrics.read_text().splitlines()) if metrics.is_file() else 0


RAMP_CLI = ("cli", ["--steps", "5", "--warmup-steps", "3"])
_CLI_RUNS: dict[str, tuple[RunResult, Path]] = {}


def ramp_cli_run() -> Path:
    """``train.py --steps 5 --warmup-steps 3``, run once and shared by the checks that need the
    option to exist outside the candidate's word; the check fails unless it exited 0."""
    name, args = RAMP_CLI
    if name not in _CLI_RUNS:
        _CLI_RUNS[name] = cli_attempt(name, workdir(), args)
    res, out = _CLI_RUNS[name]
    assert res.exit_code == 0, \
        f"train.py {' '.join(args)} failed:\n{res.log_path.read_text()[-3000:]}"
    return out


def assert_cli_option_reaches_training() -> float:
    """The anchor of the checks whose own observation only the candidate's process makes:
    ``train.py --warmup-steps 3`` exits 0 and trains other parameters than the judge's
    constant-rate loop, so a tree without the option fails however its processes report.
    Whether it trains exactly the ramp is test_cli_warmup_flag's to judge, not counted twice."""
    state = checkpoint_model(ramp_cli_run() / "checkpoint.pt")
    moved = max_abs_diff_states(state, reference_run(steps=5, warmup=0)["state"])
    assert not within(moved, OPTION_EFFECT_MIN), (
        f"train.py --warmup-steps 3 trains the constant-rate loop (parameters within {moved:g} "
        "of it): the option does not reach training")
    return moved


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


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="that train() accepted warmup_steps, and the learning rates it records in "
                     "its history",
             corroborated_by="the parameters train() returns equal the judge's SGD loop with "
                             "the ramp (atol 1e-6): a schedule only reported is not applied; and "
                             "train.py --warmup-steps 3 trains other parameters than the judge's "
                             "constant-rate loop (warmup 1 is the constant rate, so its "
                             "parameters alone pass a tree without the option)")
@pytest.mark.parametrize(("warmup", "steps"), [(1, 4), (5, 12)])
def test_lr_follows_linear_warmup(warmup: int, steps: int, record_property: Any) -> None:
    """Under --warmup-steps N the LR of step s is lr * min(1, (s + 1) / N), within 1e-12, and the parameters follow that schedule (a hand-written SGD loop, atol 1e-6); train.py --warmup-steps 3 trains other parameters than the constant rate."""
    result = train(steps=steps, lr=LR, warmup_steps=warmup)
    got = [h["lr"] for h in result["history"]]
    want = [expected_lr(s, LR, warmup) for s in range(steps)]
    assert len(got) == steps
    err = lr_error(got, warmup)
    record_property("max_abs_lr_error", err)
    assert within(err, LR_TOL), f"learning rates {got} != expected {want}"
    record_property("max_abs_param_diff", assert_follows_reference(result["state"], steps, warmup))
    # Under warmup 1 the ramp is the constant rate: the parameters above are the baseline's, and
    # only the probe says train() took the option. The command line, observed from outside,
    # says whether the tree has it at all.
    record_property("cli_ramp_vs_constant_max_abs_param_diff",
                    assert_cli_option_reaches_training())


@observed_in(JUDGE)
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


@observed_in(JUDGE, OUTSIDE)
def test_warmup_zero_is_bitwise_baseline() -> None:
    """--warmup-steps 0 gives bit-for-bit the pristine baseline's run (CLI, 8 steps)."""
    baseline = baseline_dir()
    if baseline is None:
        pytest.skip("GRADING_BASELINE is not set: no pristine baseline to compare with")
    outs = {"baseline": cli_run("baseline", baseline, ["--steps", "8"]),
            "candidate": cli_run("candidate", workdir(), ["--steps", "8", "--warmup-steps", "0"])}
    states = {name: checkpoint_model(out / "checkpoint.pt") for name, out in outs.items()}
    assert_same_params(states["baseline"], states["candidate"])
    metrics = {name: (out / "metrics.jsonl").read_text() for name, out in outs.items()}
    assert metrics["candidate"] == metrics["baseline"]


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="that train() with the default config and with warmup_steps=0 ran as two "
                     "runs and ended alike, and their recorded learning rates",
             corroborated_by="train.py --warmup-steps 0 trains the judge's constant-LR loop and "
                             "train.py --warmup-steps 3 trains other parameters (checkpoints "
                             "read by the judge): a tree without the option fails")
def test_default_config_is_baseline_behaviour(record_property: Any) -> None:
    """Not passing warmup_steps equals warmup_steps=0 bitwise and matches the constant-LR loop; on the command line --warmup-steps 0 trains the constant-LR loop (a hand-written SGD loop, atol 1e-6) and --warmup-steps 3 trains other parameters."""
    runs = probe.call(PROBE, "default_and_zero", steps=6)
    default, zero = runs["default"], runs["zero"]
    assert_same_params(default["state"], zero["state"])
    assert [h["lr"] for h in zero["history"]] == [LR] * 6
    assert_follows_reference(zero["state"], steps=6, warmup=0)
    # Outside the candidate's process: the option is real, and 0 is the constant rate.
    out = cli_run("cli-zero", workdir(), ["--steps", "6", "--warmup-steps", "0"])
    record_property("cli_zero_max_abs_param_diff", assert_follows_reference(
        checkpoint_model(out / "checkpoint.pt"), steps=6, warmup=0))
    record_property("cli_ramp_vs_constant_max_abs_param_diff",
                    assert_cli_option_reaches_training())


RESUME_STEPS, RESUME_WARMUP, RESUME_AT = 10, 6, 3


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="that the in-process resumed run ended like the uninterrupted one, and "
                     "the learning rates both recorded",
             corroborated_by="a fresh train.py resumed from a copy of another run's step-3 "
                             "checkpoint whose weights the judge perturbed ends where the "
                             "judge's SGD loop from those weights ends (atol 1e-6)")
def test_resume_mid_warmup_equals_uninterrupted(record_property: Any) -> None:
    """Stopping at step 3 of a 6-step warmup and resuming gives the uninterrupted run, bitwise, and both follow the ramp (a hand-written SGD loop, atol 1e-6); on the command line a run resumed from the step-3 checkpoint, its weights perturbed by the judge, continues the ramp from them (the judge's loop from the same weights, atol 1e-6)."""
    runs = probe.call(PROBE, "resume_mid_warmup", steps=RESUME_STEPS, warmup=RESUME_WARMUP,
                      stop_at=RESUME_AT)
    full, resumed = runs["full"], runs["resumed"]
    assert [h["step"] for h in resumed["history"]] == list(range(RESUME_AT, RESUME_STEPS))
    assert [h["lr"] for h in resumed["history"]] == [h["lr"] for h in full["history"][3:]]
    assert within(lr_error([h["lr"] for h in resumed["history"]], RESUME_WARMUP,
                           first_step=RESUME_AT), LR_TOL)
    assert_same_params(full["state"], resumed["state"])
    assert_follows_reference(full["state"], steps=RESUME_STEPS, warmup=RESUME_WARMUP)
    record_property("cli_resume_max_abs_param_diff", assert_cli_resume_continues_the_ramp())


def assert_cli_resume_continues_the_ramp() -> float:
    """What the in-process resume says, observed from outside: one run stops at RESUME_AT;
    the judge checks its checkpoint is the ramp's, perturbs its weights (the rest of the
    checkpoint is the run's own, in its own layout) and hands a copy to a fresh run, which must
    end where the judge's loop from the perturbed weights ends. Recomputing the first steps
    instead of loading them cannot pass, and neither can restarting the ramp."""
    first = cli_run("resume-first", workdir(), ["--steps", str(RESUME_AT), "--warmup-steps",
                                                str(RESUME_WARMUP)])
    ckpt = read_checkpoint(first / "checkpoint.pt")
    model = ckpt.get("model")
    assert isinstance(model, dict), "the step-3 checkpoint holds no model state dict"
    ref = reference_run(steps=RESUME_STEPS, warmup=RESUME_WARMUP, perturb_at=RESUME_AT)
    at_stop = reference_run(steps=RESUME_AT, warmup=RESUME_WARMUP)["state"]
    err = max_abs_diff_states(model, at_stop)
    assert within(err, PARAM_ATOL), \
        f"the step-{RESUME_AT} checkpoint differs from the judge's loop by {err:g}"
    moved = max_abs_diff_states(ref["state"],
                                reference_run(steps=RESUME_STEPS, warmup=RESUME_WARMUP)["state"])
    assert not within(moved, 100 * PARAM_ATOL), \
        f"fixture problem: the perturbation moves the end by only {moved:g}"
    judged = Path(tempfile.mkdtemp(prefix="resume-ckpt-")) / "checkpoint.pt"
    torch.save({**ckpt, "model": ref["perturbed"]}, judged)
    given = sealed.give(judged, "resume-ckpt")
    resumed = cli_run("resume-second", workdir(), [
        "--steps", str(RESUME_STEPS), "--warmup-steps", str(RESUME_WARMUP),
        "--resume", str(given)])
    lines = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert [rec.get("step") for rec in lines] == list(range(RESUME_AT, RESUME_STEPS)), \
        f"the resumed run logged steps {[rec.get('step') for rec in lines]}"
    end = checkpoint_model(resumed / "checkpoint.pt")
    err = max_abs_diff_states(end, ref["state"])
    assert within(err, PARAM_ATOL), (
        f"resumed from the judge's perturbed step-{RESUME_AT} checkpoint, the parameters differ "
        f"from the judge's loop from the same weights by {err:g}: the resume does not continue "
        "the ramp from the checkpoint")
    return err


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="the learning rates the run logs in metrics.jsonl",
             corroborated_by="the run's checkpoint is the judge's SGD loop with the ramp")
def test_cli_warmup_flag() -> None:
    """python train.py --warmup-steps 3 logs the linear ramp in metrics.jsonl and trains with it (its checkpoint is the hand-written SGD loop's, atol 1e-6)."""
    out = ramp_cli_run()
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 5
    assert [rec.get("step") for rec in lines] == list(range(5))
    assert within(lr_error([rec.get("lr") for rec in lines], 3), LR_TOL)
    assert_follows_reference(checkpoint_model(out / "checkpoint.pt"), steps=5, warmup=3)


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="the class of what train() raised for warmup_steps=-1",
             corroborated_by="train.py --warmup-steps -1 exits non-zero having trained nothing, "
                             "and train.py --warmup-steps 3 trains other parameters than the "
                             "judge's constant-rate loop: a tree without the option fails")
def test_negative_warmup_is_rejected(record_property: Any) -> None:
    """warmup_steps < 0 raises ValueError instead of training; train.py --warmup-steps -1 exits with an error status having written no checkpoint and no metrics, while --warmup-steps 3 trains."""
    raised = probe.call(PROBE, "raised_by", steps=2, warmup_steps=-1)
    assert raised is not None, "train() accepted warmup_steps=-1"
    assert "ValueError" in raised, f"train() raised {raised[0]}, not a ValueError"
    res, out = cli_attempt("cli-negative", workdir(), ["--steps", "2", "--warmup-steps", "-1"])
    record_property("cli_negative_exit", f"exit code {res.exit_code}, signal {res.signal}")
    assert res.exit_code not in (0, None), \
        f"train.py --warmup-steps -1 exited with code {res.exit_code}, signal {res.signal}"
    assert not (out / "checkpoint.pt").exists() and trained_lines(out) == 0, \
        "train.py --warmup-steps -1 trained before refusing"
    record_property("cli_ramp_vs_constant_max_abs_param_diff",
                    assert_cli_option_reaches_training())
