# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""Hidden checks of train.py with --layer-pattern: the pattern used, and the quality objective.

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

Every train.py process runs as the candidate uid (``grading.run``/``grading.launch``); the
judge reads the sealed outputs as data. What a run reports about itself (summary.json) is
never the evidence on its own: the CLI run's weights and logged losses must be the judge's
replay of its two steps with the pattern's model, and the held-out loss of the quality run is
computed by the judge from the run's final weights (``judge_replay``), whose 200 steps are
also replayed by the judge.
"""

from __future__ import annotations

from typing import Any

import judge_replay
import torch
from oracle_lib import PATTERN, check_key_schema, cli_exit_code

from grading.compare import as_float, within
from grading.observation import CANDIDATE_REPORT, JUDGE, OUTSIDE, observed_in

# Quality band for the held-out loss of `train.py --config cpu-1 --layer-pattern AMAM --seed 0`
# (200 steps). Measured (QUALIFICATION.md): reference 0.639 (seed 0; seeds 0-2 mean 0.636, std
# 0.004), all-attention baseline 0.721. Upper bound: the reference + 0.04, i.e. half of the
# hybrid's measured gain over all attention and ~10 seed standard deviations above the
# reference, so a working mixer of another design passes while a stack that gains nothing
# from its mixers (>= 0.72) fails. Lower bound: the data source's floor (0.55, QUALIFICATION.md):
# a held-out loss below it means the model sees tokens it must predict (a non-causal mixer).
QUALITY_REFERENCE = 0.639
QUALITY_LOW, QUALITY_HIGH = 0.55, 0.68
CLI_STEPS, QUALITY_STEPS = 2, 200
# The judge's replay (the candidate's seeded model, exported; same ops, one process) vs a cpu-1
# fp32 run: measured 0 after 2 steps (AMM) and after 200 steps (AMAM) for the reference. Two
# steps move the weights by 9e-4 from their initial values, so 1e-5 tells a trained CLI run
# from an untrained one. Over 200 fp32 AdamW steps a legitimately different summation order
# can grow to ~1e-3, while a model trained on another seed or for another length is >= 0.1
# away (the initial weights 0.26): 1e-2.
CLI_REPLAY_TOL, QUALITY_REPLAY_TOL = 1e-5, 1e-2
# Logged losses vs the judge's (measured 0; 200 steps get ten times the 2-step allowance);
# the run's own held-out figure vs the judge's computation from its final weights (measured
# 2e-9: the judge evaluates in batches of 16).
LOSS_TOL, QUALITY_LOSS_TOL, LR_TOL, HELDOUT_AGREE_TOL = 1e-4, 1e-3, 1e-12, 1e-4


def _replay_errors(run: Any, traj: judge_replay.Trajectory) -> dict[str, float]:
    final = run.final()
    loss_err, lr_err = judge_replay.metrics_errors(run.metrics(), traj)
    return {"param": judge_replay.state_error(final.get("model"), traj),
            "optim": judge_replay.optim_error(final.get("optim"), traj),
            "loss": loss_err, "lr": lr_err}


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports='the model summary.json records (pattern and layer count)',
             corroborated_by="the final weights the judge reads are an AMM stack that is the "
                             "judge's replay of two steps, and the invalid patterns' runs exit "
                             "non-zero")
def test_cli_layer_pattern_is_used_and_recorded(cli_run: Any, candidate_default_cpu1: Any,
                                                cli_two_layers: Any, programs: Any,
                                                record_property: Any) -> None:
    """train.py --layer-pattern AMM (no --n-layers) builds 3 layers with that pattern, records
    it in summary.json, and a pattern with other characters, or with another length than an
    explicit --n-layers (--n-layers 6 --layer-pattern AMAM), is rejected; the run trains that
    model: its final weights, optimizer state and logged losses are the judge's replay of the
    two steps with the candidate's seeded AMM model (1e-5). The CLI's defaults are TASK.md's:
    without --layer-pattern summary.json records the pattern used, "AAAA" (4 layers), or "AA"
    with --n-layers 2, and without --dtype the weights are fp32."""
    record_property("oracle", "reference")
    record_property("configurations", "cpu-1")
    record_property("tolerance", "exact (strings, key sets, dtypes)")
    record_property("why", "TASK.md: --n-layers defaults to the pattern's length (4 without a "
                    "pattern); summary['model']['layer_pattern'] is the pattern used, a string "
                    "of length n_layers; the fixed settings train in fp32")
    _require_recorded_model(cli_run, "--layer-pattern AMM", "AMM", "summary_model",
                            record_property)
    assert len(cli_run.metrics()) == CLI_STEPS
    final = cli_run.final()
    assert isinstance(final.get("model"), dict), "final_state.pt holds no model state dict"
    problems = check_key_schema(final["model"], "AMM")
    assert problems == [], problems
    _require_fp32(final["model"], "train.py --layer-pattern AMM (no --dtype)")
    # No --layer-pattern: the pattern used is all attention, recorded as such.
    _require_recorded_model(candidate_default_cpu1, "without --layer-pattern", "AAAA",
                            "summary_model_without_pattern", record_property)
    errors = _replay_errors(cli_run, programs.trajectory("AMM-float32", CLI_STEPS))
    for what, err in errors.items():
        record_property(f"vs_judge_{what}_max_abs_diff", err)
    record_property("replay_tolerance", CLI_REPLAY_TOL)
    assert within(errors["param"], CLI_REPLAY_TOL), (
        f"the final weights differ from the judge's replay of {CLI_STEPS} steps with the AMM "
        f"model by {errors['param']}")
    assert within(errors["optim"], CLI_REPLAY_TOL), f"optimizer state: {errors['optim']}"
    assert within(errors["loss"], LOSS_TOL), f"logged losses differ by {errors['loss']}"
    assert within(errors["lr"], LR_TOL), f"logged LRs differ by {errors['lr']}"

    _require_recorded_model(cli_two_layers, "--n-layers 2 without --layer-pattern", "AA",
                            "summary_model_n_layers_2", record_property)

    for name, flags in (("bad_pattern", ["--layer-pattern", "AXA"]),
                        ("pattern_length_mismatch", ["--n-layers", "6", "--layer-pattern",
                                                     "AMAM"])):
        returncode = cli_exit_code(flags, name)
        record_property(f"{name}_exit_code", returncode)
        assert returncode != 0, f"train.py {' '.join(flags)} was accepted"


def _require_recorded_model(run: Any, how: str, pattern: str, name: str,
                            record_property: Any) -> None:
    """``run`` (started ``how``) finished and its summary.json records ``pattern`` as the
    pattern used, with as many layers."""
    run.require(record_property)
    model = run.summary().get("model", {})
    record_property(name, str(model))
    assert model.get("layer_pattern") == pattern and model.get("n_layers") == len(pattern), (
        f"{how}: summary.json records {model}, not the pattern used ({pattern!r}, "
        f"{len(pattern)} layers)")


def _require_fp32(state: dict[str, Any], run: str) -> None:
    """Every floating tensor of a final model state is fp32 (TASK.md's default dtype)."""
    odd = {k: str(v.dtype) for k, v in state.items()
           if type(v) is torch.Tensor and v.is_floating_point() and v.dtype != torch.float32}
    assert not odd, f"{run}: weights not in the default fp32: {dict(list(odd.items())[:4])}"


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports='the pattern, steps and seed summary.json records',
             corroborated_by="the judge's held-out loss of the final weights (an AMAM stack by "
                             "their keys) with the candidate's exported program, and the weights "
                             "are the judge's replay of the 200 steps")
def test_quality_heldout_loss(quality_run: Any, programs: Any, record_property: Any) -> None:
    """Held-out loss after the default 200 cpu-1 fp32 steps with --layer-pattern AMAM (seed 0) lies
    in [0.55, 0.68] (reference 0.639, all-attention 0.721), computed by the judge from the run's
    final weights with the candidate's exported AMAM model; the weights are the judge's replay
    of the 200 steps (1e-2) and summary.json reports that loss (1e-4)."""
    record_property("oracle", "reference")
    record_property("configurations", "cpu-1")
    record_property("tolerance", f"[{QUALITY_LOW}, {QUALITY_HIGH}]")
    record_property("why", "reference 0.639 (seed std 0.004), all-attention baseline 0.721; the "
                    "upper bound is half the hybrid's measured gain, the lower bound the "
                    "source's entropy floor 0.55 (lower means the model sees the future)")
    record_property("reference_value", QUALITY_REFERENCE)
    quality_run.require(record_property)
    summary = quality_run.summary()
    assert summary.get("model", {}).get("layer_pattern") == PATTERN, summary.get("model")
    assert summary.get("steps") == QUALITY_STEPS and summary.get("seed") == 0
    record_property("train_s", summary.get("train_s"))
    # The judge's held-out loss of the weights the run wrote, and the judge's own 200 steps.
    final = quality_run.final()
    assert isinstance(final.get("model"), dict), "final_state.pt holds no model state dict"
    # The weights are an AMAM stack's (an all-attention model reported as AMAM would be
    # replayed as itself and pass the replay).
    problems = check_key_schema(final["model"], PATTERN, stack_only=True)
    assert problems == [], f"the final weights are not an {PATTERN} stack: {problems}"
    _require_fp32(final["model"], "the quality run (no --dtype)")
    traj = programs.trajectory("AMAM-float32", QUALITY_STEPS)
    errors = _replay_errors(quality_run, traj)
    for what, err in errors.items():
        record_property(f"vs_judge_{what}_max_abs_diff", err)
    record_property("replay_tolerance", QUALITY_REPLAY_TOL)
    assert within(errors["param"], QUALITY_REPLAY_TOL), (
        f"the final weights differ from the judge's replay of the {QUALITY_STEPS} steps by "
        f"{errors['param']}")
    assert within(errors["optim"], QUALITY_REPLAY_TOL), f"optimizer state: {errors['optim']}"
    assert within(errors["loss"], QUALITY_LOSS_TOL), f"logged losses differ by {errors['loss']}"
    loss = judge_replay.heldout_loss(programs.get("AMAM-float32"), judge_replay.GLOBAL_BATCH,
                                     final["model"])
    reported = as_float(summary.get("heldout_loss"))
    record_property("heldout_loss", loss)
    record_property("reported_heldout_loss", reported)
    assert within(abs(reported - loss), HELDOUT_AGREE_TOL), (
        f"summary.json reports held-out loss {reported}, the judge computes {loss:.6f} from "
        f"the final weights")
    assert within(QUALITY_LOW - loss, 0.0) and within(loss - QUALITY_HIGH, 0.0), (
        f"held-out loss {loss:.4f} outside [{QUALITY_LOW}, {QUALITY_HIGH}] "
        f"(reference {QUALITY_REFERENCE})")
