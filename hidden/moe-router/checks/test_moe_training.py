"""Hidden checks of the moe-router feature that train: the candidate's train.py, 1 and 2 ranks.

HARNESS-CANARY-8a0e5fe7-3b11-4c19-b138-53348751b84e
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

The runs are the session fixtures of conftest.py (each launched once, as the candidate uid,
into a job folder sealed before it is read); this process never imports candidate code. The
checks read the runs' outputs as data (``weights_only`` tensors, JSON), and call the
candidate's API (export schema, ``load_export``) through ``probes/moe_probe.py`` in a sealed
process (``grading.probe``); a run or probe that reads an earlier run's output (the resumed
launch's checkpoint, the export) is handed a copy (``grading.sealed.give``), the earlier run's
own folder being closed. Expected values are computed here; every comparison is NaN-safe
(``grading.compare``). Tolerances are the declared ones of QUALIFICATION.md (measured on the
reference solution and the dense baseline): (a) cpu-1 vs gloo-ddp-2 in fp64 1e-10, (b) resume
bitwise, (c) gloo-fsdp-2 vs gloo-ddp-2 bitwise, (d) held-out loss within 0.07 above the
reference's. A regime whose code path differs between the configurations (DDP and FSDP2 do not
synchronise, checkpoint or gather the same things) is checked on each CPU configuration where
it differs: starved experts (gloo-ddp-2, gloo-fsdp-2), resume (gloo-ddp-2, gloo-fsdp-2; the
fp64 FSDP equivalence run doubles as the uninterrupted run), export (gloo-ddp-2, gloo-fsdp-2).

No contract rests only on what a run says about itself or on two runs agreeing (a run that
writes the same file under every configuration agrees with itself): each is anchored to the
judge's own measurement of the weights a run left, with ``moe_reference.py`` on the pristine
baseline's data (``oracle_util``). The differential checks' anchor is that the run they compare
trained (its held-out loss, measured by the judge, is well below a uniform predictor's; for the
4-step starvation runs, the cpu-1 run's update agrees with the judge's own replay of those steps
from the run's initial model); quality is the judge's held-out loss of the run's final weights,
never summary.json's. These anchors do not judge the routing details (renormalised gates,
capacity groups): that is the forward reference check's business, and a model with such a
departure still trains.
"""

# HARNESS-CANARY-8a0e5fe7-3b11-4c19-b138-53348751b84e

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import moe_reference as R
import probe_balance_spec as P
import pytest
import torch
from conftest import (
    DENSE_OPTIONS_RESUME_AT,
    EQ_STEPS,
    OBJECTIVE_CFG,
    OBJECTIVE_CONFIGS,
    OBJECTIVE_DROPOUT,
    OBJECTIVE_STEPS,
    OPTIONS_CFG,
    REFUSED_FLAGS,
    RESUME_AT,
    RESUME_STEPS,
    STARVE_CFG,
    STARVE_STEPS,
    DenseOptionRuns,
    DensePair,
    ResumeRuns,
    Run,
    baseline_dir,
    dense_option_args,
    run_log,
    train,
)
from oracle_util import (
    ALL_EXPERTS_ATOL,
    UNIFORM_LOSS,
    all_experts_case,
    all_experts_error,
    baseline_data,
    compare_states,
    heldout_loss,
    learned,
    reference_loss,
    replay_training,
    replay_training_with_dropout,
    scalar_diff,
    schema_params,
    series,
    tensor_diff,
    training_batches,
    update_error,
)

from grading import probe, sealed
from grading.compare import as_float, as_tensor, bitwise_equal, within, worst
from grading.observation import CANDIDATE_REPORT, JUDGE, OUTSIDE, observed_in

PROBE = "moe_probe"
PROBE_TIMEOUT_S = 120.0

DDP_VS_ONE_FP64_TOL = 1e-10
REFERENCE_HELDOUT = 2.8218724727630615  # reference, cpu-1 fp32 seed 0, 200 steps
QUALITY_BAND = 0.07
# A trained run's held-out loss, measured by the judge, is at least this far below a uniform
# predictor's ln(64) = 4.159. Measured (reference solution): the trainer's initial model 4.30;
# after the 30 fp64 steps 3.643 (renormalised gates 3.653, capacity over the local batch 3.643);
# after the 20 fp32 steps with dropout 3.840 (renormalised gates 3.844).
LEARNED_MARGIN = 0.1
# The 4-step starvation run is replayed by the judge (reference forward, the trainer's AdamW
# and schedule) from the initial model the same command leaves with --steps 0; the run's update
# (all parameters) must be within this fraction of the replayed one's norm. Measured: reference
# solution 1e-14; renormalised gates 0.449 (with top-1 the renormalised gate is 1, so the router
# gets no gradient and the experts' updates differ; that departure is the forward reference
# check's to judge); a run that does not train 1; an initial model that is not the one the run
# started from moves it further.
STARVE_UPDATE_RTOL = 0.75
# The objective replay (3 fp64 steps, W 1.0, from the run's initial model): the run's update vs
# the judge's replay of cross-entropy + W * mean balance loss, relative to the replayed update's
# norm. Measured (reference solution): 5.1e-15 on cpu-1, 5.8e-15 on gloo-ddp-2 and gloo-fsdp-2;
# the aux term alone moves the update by 0.25 of its norm, so an objective without it (or with
# its gradient cut) is 1e5 times the tolerance away, while another summation order (~1e-12) is
# well inside it.
OBJECTIVE_UPDATE_RTOL = 1e-6
# A run whose update is within this of a known departure's replay (the aux term left out, an
# option at its default) is named by it; each departure moves the replayed update by >= 0.1.
# Measured at the other options (E 3, top-1, F 0.5, W 0.1), reference solution: update error
# 5.1e-15 (cpu-1), 4.8e-15 (gloo-fsdp-2); the aux term alone 0.126, top-k 2 0.69, F 1.25 0.637,
# W 0.01 0.118 of the replayed update's norm.
OBJECTIVE_EXPLAINS = 1e-3
# Logged per-step losses vs the judge's: the cross-entropy is logged in fp64, the aux loss
# rounded to fp32 by the trainer (about 1e-7 relative at W 1.0).
OBJECTIVE_LOSS_TOL, OBJECTIVE_AUX_TOL = 1e-8, 1e-5


def _record(record_property: Any, **props: Any) -> None:
    for key, value in props.items():
        record_property(key, value)


def _assert_trained(run: Run, record_property: Any, what: str) -> float:
    """The judge's anchor for a run that trains for tens of steps: the held-out loss of its
    final weights, measured with the reference implementation, shows it learned."""
    params, source = run.weights(R.Cfg())
    value = heldout_loss(params, R.Cfg())
    record_property(f"judge_heldout_{run.name}", f"{value:.6g} (weights from {source}; its "
                    f"summary.json says {run.reported_heldout():.6g})")
    assert learned(value, LEARNED_MARGIN), (
        f"{what}: the judge's held-out loss of the run's final weights is {value:.6g} "
        f"({source}), not {LEARNED_MARGIN} below a uniform predictor's {UNIFORM_LOSS:.4f}: "
        "the run did not train the model")
    return value


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports='the per-step losses the two runs log',
             corroborated_by="the final model and optimizer states the judge reads agree within "
                             "1e-10, and the judge's held-out loss of the cpu-1 weights shows it "
                             "trained")
def test_ddp_matches_one_process_fp64(cpu1_fp64: Run, ddp_fp64: Run,
                                      record_property: Any) -> None:
    """With MoE (E 4, top-2, F 1.25, W 0.01) in fp64, gloo-ddp-2 and cpu-1 at the same global batch
    (16) end with the same model and optimizer state after 30 steps (max abs diff <= 1e-10) and log
    the same per-step loss; the cpu-1 run trained (the judge's held-out loss of its final weights,
    reference forward, is at least 0.1 below ln 64)."""
    _record(record_property, oracle="differential", configurations="cpu-1,gloo-ddp-2",
            tolerance=f"{DDP_VS_ONE_FP64_TOL:g} max abs (model and optimizer, fp64); anchor: "
                      f"judge's held-out loss <= ln 64 - {LEARNED_MARGIN:g}",
            why="QUALIFICATION (a): cpu-1 vs gloo-ddp-2 fp64 after 200 steps measured 1.25e-15 "
                "(MoE) and 5.35e-15 (dense), never bitwise (reduction order); declared 100x the "
                "worst, at least 1e-10; a per-rank balance statistic moves it by >= 1e-6. "
                "Anchor: the reference solution's cpu-1 run measures 3.643 after 30 steps, its "
                "initial model 4.30",
            runs=f"{cpu1_fp64.evidence()}; {ddp_fp64.evidence()}")
    one, ddp = cpu1_fp64.final_state(), ddp_fp64.final_state()
    cmp = compare_states(one, ddp)
    m_one, m_ddp = cpu1_fp64.metrics(), ddp_fp64.metrics()
    # The logged loss is the fp64 cross-entropy; the logged aux loss is rounded to fp32 by the
    # trainer (reported, not graded).
    worst_log = tensor_diff(series(m_one, "loss"), series(m_ddp, "loss"))
    worst_aux = tensor_diff(series(m_one, "aux_loss"), series(m_ddp, "aux_loss"))
    record_property("measured", f"model {cmp['model_max_abs_diff']:.3g}, optimizer "
                    f"{cmp['optim_max_abs_diff']:.3g}, logged loss {worst_log:.3g}, logged aux "
                    f"(fp32) {worst_aux:.3g}")
    assert len(m_one) == len(m_ddp) == EQ_STEPS, (len(m_one), len(m_ddp))
    assert within(cmp["max_abs_diff"], DDP_VS_ONE_FP64_TOL), f"gloo-ddp-2 vs cpu-1: {cmp}"
    assert within(worst_log, DDP_VS_ONE_FP64_TOL), f"logged losses differ by {worst_log:g}"
    _assert_trained(cpu1_fp64, record_property, "cpu-1")


@observed_in(JUDGE, OUTSIDE)
def test_fsdp_matches_ddp_bitwise(ddp_fp64: Run, fsdp_fp64: Run, record_property: Any) -> None:
    """With MoE in fp64, gloo-fsdp-2's reconstructed full model and optimizer state after 30 steps
    is bit-for-bit gloo-ddp-2's, and it trained (the judge's held-out loss of its final weights,
    reference forward, is at least 0.1 below ln 64)."""
    _record(record_property, oracle="differential", configurations="gloo-ddp-2,gloo-fsdp-2",
            tolerance=f"bitwise; anchor: judge's held-out loss <= ln 64 - {LEARNED_MARGIN:g}",
            why="QUALIFICATION (c): measured bitwise (0) in fp32 and fp64 for the dense baseline "
                "and the MoE reference (no clipping: reduce-scatter and all-reduce average the "
                "same two gradients). Anchor: the reference solution measures 3.643 after 30 "
                "steps, its initial model 4.30",
            runs=f"{ddp_fp64.evidence()}; {fsdp_fp64.evidence()}")
    cmp = compare_states(ddp_fp64.final_state(), fsdp_fp64.final_state())
    record_property("measured", f"bitwise {cmp['bitwise_equal']}, max abs "
                    f"{cmp['max_abs_diff']:.3g}")
    assert cmp["bitwise_equal"] is True, f"gloo-fsdp-2 vs gloo-ddp-2: {cmp}"
    _assert_trained(fsdp_fp64, record_property, "gloo-fsdp-2")


def _logged_steps(run: Run) -> dict[Any, dict[str, Any]]:
    return {m.get("step"): m for m in run.metrics() if isinstance(m, dict)}


def _judge_resume(runs: ResumeRuns, total: int, record_property: Any) -> None:
    """The resumed launch ends bit-for-bit like the uninterrupted run (model, optimizer, logged
    loss, aux and lr of steps RESUME_AT..total-1, which are the only steps it logs), and the
    uninterrupted run trained."""
    full, first, resumed = runs.full, runs.first, runs.resumed
    full.require()
    if first is None:
        pytest.fail("the checkpoint's launch did not run", pytrace=False)
    first.require()
    if resumed is None:
        pytest.fail(f"the launch that stops at step {RESUME_AT} left no checkpoint "
                    f"step_{RESUME_AT}", pytrace=False)
    resumed.require()
    cmp = compare_states(full.final_state(), resumed.final_state())
    m_full, m_res = _logged_steps(full), _logged_steps(resumed)
    later = list(range(RESUME_AT, total))
    # Bit-for-bit: the same fp64 values, NaN never equal (a missing step or field fails too).
    log_same = all(bitwise_equal(series([m_res.get(s) for s in later], key),
                                 series([m_full.get(s) for s in later], key))
                   for key in ("loss", "aux_loss", "lr"))
    resumed_steps = sorted(s for s in m_res if isinstance(s, int))
    record_property("measured", f"bitwise {cmp['bitwise_equal']}, model "
                    f"{cmp['model_max_abs_diff']:.3g}, optimizer {cmp['optim_max_abs_diff']:.3g},"
                    f" logged steps {RESUME_AT}-{total - 1} equal {log_same}, resumed "
                    f"launch logged {len(resumed_steps)} steps")
    assert cmp["bitwise_equal"] is True, f"resumed vs uninterrupted: {cmp}"
    assert log_same, "the resumed run logged other losses or learning rates for steps " \
        f"{RESUME_AT}..{total - 1}"
    assert resumed_steps == later and len(m_res) == len(later), \
        f"the resumed launch logged steps {resumed_steps[:4]}...: it must train steps " \
        f"{RESUME_AT}..{total - 1} only, from the checkpoint"
    _assert_trained(full, record_property, "the uninterrupted run")


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="the losses, aux losses and learning rates the resumed launch logs, and "
                     "which steps",
             corroborated_by="the resumed launch's final model and optimizer state, read by the "
                             "judge, are the uninterrupted run's bit for bit, and the judge's "
                             "held-out loss shows that run trained")
def test_resume_ddp_bitwise(resume_runs: ResumeRuns, record_property: Any) -> None:
    """With MoE and dropout 0.1 under gloo-ddp-2 (fp32), a fresh launch resumed from the step-10
    checkpoint ends at step 20 bit-for-bit like the uninterrupted run (model, optimizer, scheduler
    lr, per-rank RNG via the dropout masks, logged losses). The checkpoint comes from a separate
    launch that stops at step 10 (so the resumed launch cannot copy the end state), the resumed
    launch logs steps 10-19 only, and the uninterrupted run trained (the judge's held-out loss of
    its final weights, reference forward, is at least 0.1 below ln 64)."""
    full, first, resumed = resume_runs.full, resume_runs.first, resume_runs.resumed
    _record(record_property, oracle="differential", configurations="gloo-ddp-2",
            tolerance=f"bitwise; anchor: judge's held-out loss <= ln 64 - {LEARNED_MARGIN:g}",
            why="QUALIFICATION (b): resume vs uninterrupted measured bitwise on every "
                "configuration, fp32 and fp64 (same launch shape and ops, restored RNG, "
                "scheduler and data position). The checkpoint's launch runs the same command "
                f"with --steps {RESUME_AT}: during the {RESUME_AT}-step warmup the schedule does "
                "not depend on the total, so its checkpoint is the uninterrupted run's at step "
                f"{RESUME_AT}. Anchor: the reference solution measures 3.840 after 20 steps, its "
                "initial model 4.30",
            runs="; ".join(r.evidence() if r else "not run" for r in (full, first, resumed)))
    _judge_resume(resume_runs, RESUME_STEPS, record_property)


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="the losses, aux losses and learning rates the resumed launch logs, and "
                     "which steps",
             corroborated_by="the resumed launch's final model and optimizer state, read by the "
                             "judge, are the uninterrupted run's bit for bit, and the judge's "
                             "held-out loss shows that run trained")
def test_resume_fsdp_bitwise(fsdp_resume_runs: ResumeRuns, record_property: Any) -> None:
    """With MoE in fp64 under gloo-fsdp-2, a fresh launch resumed from the step-10 sharded
    checkpoint ends at step 30 bit-for-bit like the uninterrupted fp64 FSDP run (model and
    optimizer state, logged loss, aux and lr of steps 10-29, the only steps it logs). The
    checkpoint comes from a separate launch of the same command that stops at step 10; the
    uninterrupted run trained (the judge's held-out loss of its final weights, reference
    forward, is at least 0.1 below ln 64)."""
    runs = fsdp_resume_runs
    _record(record_property, oracle="differential", configurations="gloo-fsdp-2",
            tolerance=f"bitwise; anchor: judge's held-out loss <= ln 64 - {LEARNED_MARGIN:g}",
            why="TASK.md: resume holds on every configuration; FSDP2 saves and restores sharded "
                "parameters and Adam state (DTensors), a path DDP never takes. QUALIFICATION "
                "(b) measured resume bitwise on every configuration; the reference solution "
                f"measures bitwise here. The warmup ({RESUME_AT} steps) makes the {RESUME_AT}-"
                "step launch's checkpoint the uninterrupted run's own. Anchor: the reference "
                "solution measures 3.643 after 30 steps, its initial model 4.30",
            runs="; ".join(r.evidence() if r else "not run"
                           for r in (runs.full, runs.first, runs.resumed)))
    _judge_resume(runs, EQ_STEPS, record_property)


def _exception_repr(exc: Exception) -> str:
    """How the evidence names an exception: the candidate's own, as it raised it."""
    if isinstance(exc, probe.CandidateRaised):
        name, _, message = exc.error.partition(": ")
        return f"{name}({message!r})"
    return repr(exc)


def _idle_expert_slots(init: Run | None) -> str:
    """Evidence: (rank, layer, expert) slots with no token at step 0 under the trainer's initial
    model (the ``--steps 0`` run) and the first global batch (the baseline's data stream)."""
    if init is None or init.outcome != "ok":
        return "could not compute: the trainer's initial model is not available " + \
            (f"({init.outcome}: {init.detail})" if init else "(the cpu-1 run failed)")
    params, why = init.weights(STARVE_CFG)
    if params is None:
        return f"unknown (initial model: {why})"
    data = baseline_data()
    batch = training_batches(2, 0, 1)
    idle = []
    with torch.no_grad():
        for rank in range(2):
            ref = R.forward(params, data.local_slice(batch, rank, 2)[:, :-1], STARVE_CFG)
            idle.append([int((s.counts == 0).sum()) for s in ref.layers])
    return f"idle experts per rank and layer at step 0: {idle} (total {sum(map(sum, idle))})"


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports='how many steps the gloo-ddp-2 run logged',
             corroborated_by="the runs' final states agree within 1e-10 and the cpu-1 update is "
                             "the judge's replay of the 4 steps")
def test_starved_expert_stays_synchronised(starvation_runs: tuple[Run, Run, Run | None],
                                           record_property: Any) -> None:
    """With 16 experts, top-1, one sequence per rank (so experts get no token on a rank) and aux
    weight 0, gloo-ddp-2 runs 4 steps and ends with the cpu-1 model and optimizer state (fp64,
    1e-10): every expert takes part in gradient synchronisation. The cpu-1 run trained: its update
    from the trainer's initial model (the same command with --steps 0) is within 0.75 (relative
    norm) of the judge's own replay of those 4 steps (reference forward, the trainer's AdamW and
    schedule, the baseline's data)."""
    one, ddp, init = starvation_runs
    _record(record_property, oracle="differential", configurations="cpu-1,gloo-ddp-2",
            tolerance=f"{DDP_VS_ONE_FP64_TOL:g} max abs (fp64); anchor: update within "
                      f"{STARVE_UPDATE_RTOL:g} (relative norm) of the judge's replay",
            why="QUALIFICATION starvation probe (8 experts, top-1, 1 sequence per rank): "
                "gloo-ddp-2 vs cpu-1 3.77e-15 with an idle expert; same rule as (a). Capacity "
                "factor 16 drops nothing and aux weight 0 removes the balance statistics, so "
                "only expert synchronisation is tested. Anchor: the judge's replay reproduces the "
                "reference solution's update to 1e-14 (relative); renormalised gates 0.449, no "
                "training 1",
            runs="; ".join(r.evidence() for r in (one, ddp, init) if r is not None))
    try:
        record_property("starvation", _idle_expert_slots(init))
    except Exception as exc:  # evidence only
        record_property("starvation", f"could not compute: {_exception_repr(exc)}")
    one.require()
    ddp.require()
    cmp = compare_states(one.final_state(), ddp.final_state())
    record_property("measured", f"model {cmp['model_max_abs_diff']:.3g}, optimizer "
                    f"{cmp['optim_max_abs_diff']:.3g}")
    assert len(ddp.metrics()) == STARVE_STEPS
    assert within(cmp["max_abs_diff"], DDP_VS_ONE_FP64_TOL), f"gloo-ddp-2 vs cpu-1: {cmp}"
    _assert_starve_replay(one, init, record_property)


def _assert_starve_replay(one: Run, init: Run | None, record_property: Any) -> None:
    """The anchor of the starvation checks: the runs compared trained the MoE, as the judge's
    own replay of the cpu-1 run's 4 steps from its initial weights does. The initial weights
    come from the candidate, but the replay fixes what 4 steps from them must give, so no choice
    of them lets a run that did not train pass."""
    assert init is not None
    init.require()
    start, why_start = init.weights(STARVE_CFG)
    end, why_end = one.weights(STARVE_CFG)
    assert start is not None, f"the trainer's initial model is not readable: {why_start}"
    batches = training_batches(2, 0, STARVE_STEPS)
    replayed = replay_training(start, batches, STARVE_CFG, STARVE_STEPS)
    err = update_error(start, end, replayed)
    before = reference_loss(start, batches, STARVE_CFG)
    after = reference_loss(end, batches, STARVE_CFG)
    record_property("judge_replay", f"update error {err:.3g} (relative); training-batch loss "
                    f"{before:.6g} -> {after:.6g}, replay "
                    f"{reference_loss(replayed, batches, STARVE_CFG):.6g} (initial model: "
                    f"{why_start}; final: {why_end})")
    assert within(err, STARVE_UPDATE_RTOL), (
        f"the cpu-1 run's update differs from the judge's replay of its {STARVE_STEPS} steps by "
        f"{err:.3g} of the replayed update's norm: it did not train the MoE from the initial "
        f"model its command starts from (the judge's loss on the training batches went "
        f"{before:.6g} -> {after:.6g})")


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports='how many steps the gloo-fsdp-2 run logged',
             corroborated_by="the runs' final states agree within 1e-10 and the cpu-1 update is "
                             "the judge's replay of the 4 steps")
def test_starved_expert_fsdp_matches_one_process(
        starvation_runs: tuple[Run, Run, Run | None], starve_fsdp: Run,
        record_property: Any) -> None:
    """The starvation setting (16 experts, top-1, one sequence per rank, so experts get no token on
    a rank; aux weight 0) under gloo-fsdp-2: 4 steps end with the cpu-1 model and optimizer state
    (fp64, 1e-10, the reconstructed full state): every expert's gradient takes part in FSDP2's
    reduce-scatter, idle or not. The cpu-1 run trained: its update is within 0.75 (relative norm)
    of the judge's own replay of those 4 steps, as in the gloo-ddp-2 starvation check."""
    one, _, init = starvation_runs
    _record(record_property, oracle="differential", configurations="cpu-1,gloo-fsdp-2",
            tolerance=f"{DDP_VS_ONE_FP64_TOL:g} max abs (fp64); anchor: update within "
                      f"{STARVE_UPDATE_RTOL:g} (relative norm) of the judge's replay",
            why="TASK.md: the MoE contracts hold on every configuration, and FSDP2 synchronises "
                "gradients otherwise than DDP (one reduce-scatter per sharded block, no unused-"
                "parameter detection). gloo-fsdp-2 matches gloo-ddp-2 bitwise (QUALIFICATION "
                "(c)) and gloo-ddp-2 matches cpu-1 to ~1e-15 here; same rule as (a). Anchor as "
                "test_starved_expert_stays_synchronised",
            runs="; ".join(r.evidence() for r in (one, starve_fsdp, init) if r is not None))
    try:
        record_property("starvation", _idle_expert_slots(init))
    except Exception as exc:  # evidence only
        record_property("starvation", f"could not compute: {_exception_repr(exc)}")
    one.require()
    starve_fsdp.require()
    cmp = compare_states(one.final_state(), starve_fsdp.final_state())
    record_property("measured", f"model {cmp['model_max_abs_diff']:.3g}, optimizer "
                    f"{cmp['optim_max_abs_diff']:.3g}")
    assert len(starve_fsdp.metrics()) == STARVE_STEPS
    assert within(cmp["max_abs_diff"], DDP_VS_ONE_FP64_TOL), f"gloo-fsdp-2 vs cpu-1: {cmp}"
    _assert_starve_replay(one, init, record_property)


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="the per-step cross-entropy and aux loss each run logs",
             corroborated_by="the final weights the judge reads are its own replay of the 3 "
                             "steps of TASK.md's objective from the run's initial model")
def test_objective_replay(objective_runs: tuple[dict[str, Run], Run | None],
                          record_property: Any) -> None:
    """TASK.md's training objective, replayed by the judge: from the trainer's initial model (the
    cpu-1 command with --steps 0), 3 fp64 steps with MoE E 4, top-2, F 1.25 and aux weight 1.0 on
    the global batch of 16 minimise cross-entropy + W * (mean over the MoE layers of the balance
    loss). On cpu-1, gloo-ddp-2 and gloo-fsdp-2 the run's update is within 1e-6 (relative norm)
    of the judge's replay with the reference forward, the trainer's AdamW and schedule, and each
    step's logged cross-entropy and aux loss are the judge's. A trainer or layer whose aux loss
    does not reach the loss (dropped, detached, computed without gradient) moves the update by
    the aux term's whole effect, which the failure names."""
    _judge_objective(objective_runs, OBJECTIVE_CFG, {}, record_property)


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="the per-step cross-entropy and aux loss each run logs",
             corroborated_by="the final weights the judge reads are its own replay of the 3 "
                             "steps of TASK.md's objective from the run's initial model")
def test_objective_replay_at_other_options(option_runs: tuple[dict[str, Run], Run | None],
                                           record_property: Any) -> None:
    """Every MoE option away from its default at once, judged as test_objective_replay: E 3,
    top-1, capacity factor 0.5 (about half the assignments dropped) and aux weight 0.1, 3 fp64
    steps on cpu-1, gloo-ddp-2 and gloo-fsdp-2 from the trainer's initial model, within 1e-6
    (relative norm) of the judge's replay. A path taken (or a random number drawn) only when an
    option is set moves the update; a run that trains as if one option were at its default is
    named by that option (each default moves the replayed update by far more than the
    tolerance, checked here)."""
    _judge_objective(option_runs, OPTIONS_CFG, {
        "--moe-top-k 2 (its default) instead of 1": replace(OPTIONS_CFG, top_k=2),
        "--moe-capacity-factor 1.25 (its default) instead of 0.5":
            replace(OPTIONS_CFG, capacity_factor=1.25),
        "--moe-aux-weight 0.01 (its default) instead of 0.1": replace(OPTIONS_CFG, aux_weight=0.01),
    }, record_property)


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="the per-step cross-entropy and aux loss each run logs",
             corroborated_by="the final weights the judge reads are its own replay of the 3 "
                             "steps, masks included, from the run's initial model")
def test_objective_replay_with_dropout(dropout_runs: tuple[dict[str, Run], Run | None],
                                       record_property: Any) -> None:
    """test_objective_replay with dropout 0.1: the judge's replay draws each rank's dropout
    masks as the baseline's model does (its dropout sites, in its order, from the rank's stream
    that the trainer seeds with seed + 1 + rank), rank by rank on its slice of the global batch,
    with the balance loss's counts summed over the ranks and the ranks' gradients averaged. On
    cpu-1, gloo-ddp-2 and gloo-fsdp-2 the run's update is within 1e-6 (relative norm) of that
    replay. TASK.md: no new sources of randomness in training; a random number the MoE layer or
    the trainer draws in training (or a rank's stream seeded otherwise) shifts every later
    mask, which moves the update by about as much as ignoring the masks."""
    _judge_objective(dropout_runs, OBJECTIVE_CFG, {}, record_property, dropout=OBJECTIVE_DROPOUT)


def _judge_objective(runs_and_init: tuple[dict[str, Run], Run | None], cfg: R.Cfg,
                     at_default: dict[str, R.Cfg], record_property: Any,
                     dropout: float = 0.0) -> None:
    """Each run's update against the judge's replay of TASK.md's objective under ``cfg``.
    ``at_default``: the same settings with one option at its default, by what differs; a run
    whose update is one of those replays (and not ``cfg``'s) fails naming it. With ``dropout``
    the replay draws the masks rank by rank, so each world size has its own replay."""
    runs, init = runs_and_init
    settings = (f"E {cfg.experts}, top-{cfg.top_k}, F {cfg.capacity_factor:g}, "
                f"W {cfg.aux_weight:g}" + (f", dropout {dropout:g}" if dropout else ""))
    _record(record_property, oracle="reference", configurations=",".join(OBJECTIVE_CONFIGS),
            tolerance=f"update {OBJECTIVE_UPDATE_RTOL:g} (relative norm); logged cross-entropy "
                      f"{OBJECTIVE_LOSS_TOL:g}, aux {OBJECTIVE_AUX_TOL:g} (abs)",
            why="TASK.md: the trainer adds aux_loss = W * mean over MoE layers of the balance "
                "loss to the cross-entropy; every other training check compares candidate runs "
                "with each other, so only a replay of the specified objective judges it"
                + ("; with dropout the replay draws the masks as the baseline's dropout sites "
                   "do, and TASK.md allows no new source of randomness in training (measured "
                   "on the reference: 8.1e-15 on cpu-1, 8.7e-15 on 2 ranks; masks ignored "
                   "0.40, the aux term alone 0.24)" if dropout else ""),
            settings=settings,
            runs="; ".join(r.evidence() for r in [*runs.values(), init] if r is not None))
    runs["cpu-1"].require()
    assert init is not None
    init.require()
    start, why_start = init.weights(cfg)
    assert start is not None, f"the trainer's initial model is not readable: {why_start}"
    batches = training_batches(16, 0, OBJECTIVE_STEPS)

    def replay(c: R.Cfg, world: int, losses: list[tuple[float, float]] | None = None
               ) -> dict[str, torch.Tensor]:
        if dropout:
            return replay_training_with_dropout(start, batches, c, OBJECTIVE_STEPS, dropout,
                                                seed=0, world_size=world, losses=losses)
        return replay_training(start, batches, c, OBJECTIVE_STEPS, losses)

    # Without dropout the ranks' split does not change the objective: one replay serves all.
    worlds = {config: (1 if config == "cpu-1" else 2) if dropout else 1 for config in runs}
    # The replays the failure can name: the objective without its aux term, and each option at
    # its default (with dropout also the masks ignored). Each must move the update far beyond
    # the tolerance, or this check could not tell the run from it.
    others = {f"cross-entropy alone rather than cross-entropy + {cfg.aux_weight:g} * aux (the "
              "aux loss does not reach the training objective)": replace(cfg, aux_weight=0.0),
              **at_default}
    replayed, judge_losses, other_updates = {}, {}, {}
    for world in sorted(set(worlds.values())):
        judge_losses[world] = []
        replayed[world] = replay(cfg, world, judge_losses[world])
        other_updates[world] = {what: replay(other, world) for what, other in others.items()}
        if dropout:
            other_updates[world]["no dropout masks (training as if dropout were 0)"] = \
                replay_training(start, batches, cfg, OBJECTIVE_STEPS)
        effects = {what: update_error(start, update, replayed[world])
                   for what, update in other_updates[world].items()}
        record_property(f"other_replays_world{world}", "; ".join(
            f"{what}: moves the update by {effect:.3g}" for what, effect in effects.items()))
        record_property(f"judge_losses_world{world}", str(
            [(f"{ce:.10g}", f"{aux:.8g}") for ce, aux in judge_losses[world]]))
        weak = [what for what, effect in effects.items()
                if not within(10 * OBJECTIVE_UPDATE_RTOL, effect)]
        if weak:
            raise AssertionError(
                f"from this run's initial model the replay cannot tell {settings} from: "
                f"{'; '.join(weak)} ({why_start})")
    for config, run in runs.items():
        run.require()
        end, why_end = run.weights(cfg)
        world = worlds[config]
        err = update_error(start, end, replayed[world])
        errs = {what: update_error(start, end, update)
                for what, update in other_updates[world].items()}
        judge_ce, judge_aux = torch.tensor(judge_losses[world], dtype=torch.float64).unbind(1)
        metrics = run.metrics()
        ce_err = tensor_diff(series(metrics, "loss"), judge_ce)
        aux_err = tensor_diff(series(metrics, "aux_loss"), judge_aux)
        record_property(f"{config}_measured", f"update error {err:.3g} (" + ", ".join(
            f"{what.split(' (')[0]}: {e:.3g}" for what, e in errs.items())
            + f"); logged cross-entropy {ce_err:.3g}, aux {aux_err:.3g} (weights: {why_end})")
        assert len(metrics) == OBJECTIVE_STEPS, f"{config}: {len(metrics)} steps logged"
        if not within(err, OBJECTIVE_UPDATE_RTOL):
            # The closest known departure names the failure when it explains the update
            # (within OBJECTIVE_EXPLAINS, far below the departures' own effects) better than
            # the specified objective does.
            named = sorted((e, what) for what, e in errs.items()
                           if within(e, OBJECTIVE_EXPLAINS) and within(e, err))
            if named:
                e, what = named[0]
                raise AssertionError(
                    f"{config}: the update is the judge's replay with {what} (error {e:.3g}), "
                    f"not of the objective under {settings} (error {err:.3g})")
            raise AssertionError(
                f"{config}: the update differs from the judge's replay of the objective "
                f"(cross-entropy + {cfg.aux_weight:g} * mean balance loss, {settings}) by "
                f"{err:.3g} of its norm; no single departure the check knows explains it ("
                + ", ".join(f"{what.split(' (')[0]}: {e:.3g}" for what, e in errs.items()) + ")"
                + ("; with dropout, a random number drawn in training (or a rank's stream seeded "
                   "otherwise) shifts every later mask and moves the update so" if dropout
                   else ""))
        assert within(ce_err, OBJECTIVE_LOSS_TOL), (
            f"{config}: the logged cross-entropy differs from the judge's by {ce_err:.3g}")
        assert within(aux_err, OBJECTIVE_AUX_TOL), (
            f"{config}: the logged aux loss differs from the judge's {cfg.aux_weight:g} * mean "
            f"balance loss by {aux_err:.3g}")

@observed_in(JUDGE, CANDIDATE_REPORT,
             reports="the type and dimension of each rank's aux loss",
             corroborated_by="each rank's aux loss value equals the judge's computation from "
                             "global counts (rel 1e-6)")
def test_balance_statistics_global(balance_probe: Run, record_property: Any) -> None:
    """Under gloo-ddp-2 in training mode (one-layer MoE model, fp64, fixed weights), each rank's
    aux loss is W * E * sum_e f_e * P_e with f_e from the all-reduced (global) assignment counts
    and P_e over the rank's own tokens, with autograd on and under no_grad (the mode is the
    module's, not autograd's); in eval mode, run on rank 0 alone, under no_grad and with autograd
    on, it runs no collective and uses local counts (rel 1e-6)."""
    _record(record_property, oracle="reference", configurations="gloo-ddp-2",
            tolerance=f"relative {P.AUX_RTOL:g} per rank",
            why="fp64 with fixed parameters: the reference solution measured 1.6e-16 relative, "
                "fp32 routing (allowed) ~2e-8; the per-rank-statistics alternative differs by "
                "1.8e-2 and 1.6e-2 (recorded as per_rank_alternative). One layer, so gating and "
                "capacity cannot move the router input")
    balance_probe.require()
    ranks = [P.read_rank(balance_probe.out, r) for r in range(2)]
    ranks = [r if isinstance(r, dict) else {} for r in ranks]
    expected = P.expected_aux()
    lines, bad = [], []
    for r, got in enumerate(ranks):
        want, local = expected["train_global"][r], expected["train_local"][r]
        aux = as_float(got.get("train_aux"))
        rel = abs(aux - want) / abs(want)
        lines.append(f"rank {r}: train aux {aux:.12g} vs {want:.12g} "
                     f"(rel {rel:.3g}; per-rank statistics would give {local:.12g}, rel "
                     f"{abs(local - want) / abs(want):.3g})")
        if not (within(rel, P.AUX_RTOL) and got.get("train_aux_type") == "Tensor"
                and type(got.get("train_aux_dim")) is int and got.get("train_aux_dim") == 0):
            bad.append(lines[-1] + f", type {got.get('train_aux_type')} dim "
                       f"{got.get('train_aux_dim')}")
        nograd = as_float(got.get("train_nograd_aux"))
        rel_nograd = abs(nograd - want) / abs(want)
        lines.append(f"rank {r}: training-mode aux under no_grad {nograd:.12g} (rel "
                     f"{rel_nograd:.3g})")
        if not within(rel_nograd, P.AUX_RTOL):
            bad.append(lines[-1])
    want_eval = expected["train_local"][0]
    for key, how in (("eval_aux", "under no_grad"), ("eval_grad_aux", "with autograd on")):
        eval_aux = as_float(ranks[0].get(key))
        rel_eval = abs(eval_aux - want_eval) / abs(want_eval)
        lines.append(f"rank 0 eval aux {how} {eval_aux:.12g} vs local {want_eval:.12g} "
                     f"(rel {rel_eval:.3g})")
        if not within(rel_eval, P.AUX_RTOL):
            bad.append(lines[-1])
    record_property("measured", " | ".join(lines))
    record_property("per_rank_alternative", " ".join(
        f"{abs(expected['train_local'][r] - expected['train_global'][r]) / expected['train_global'][r]:.3g}"  # noqa: E501
        for r in range(2)))
    assert not bad, " | ".join(bad)


def _schema_pairs(value: Any) -> dict[str, Any]:
    """export_schema as a probe returned it ([key, shape] pairs) as {key: shape tuple}."""
    out: dict[str, Any] = {}
    for pair in value if isinstance(value, list) else []:
        if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and \
                isinstance(pair[1], list):
            out[pair[0]] = tuple(pair[1])
    return out


def _check_export_file(run: Run, cfg: R.Cfg, record_property: Any,
                       more: str = "") -> dict[str, Any]:
    """The run's ``--export`` file holds exactly the schema's keys as plain contiguous float32 CPU
    tensors of the schema's shapes, each the run's final model (``final_state.pt``) cast to fp32
    when that model is keyed by the schema, and (the anchor) weights that learned: the judge's
    held-out loss of them is LEARNED_MARGIN below a uniform predictor's. Its state dict."""
    want = R.schema(cfg)
    run.require()
    path = run.out / "model.pt"
    assert path.exists(), f"--export wrote no {path.name}"
    blob = torch.load(path, map_location="cpu", weights_only=True)
    sd = blob.get("state_dict", {}) if isinstance(blob, dict) else {}
    sd = sd if isinstance(sd, dict) else {}
    missing, extra = sorted(set(want) - set(sd)), sorted(set(map(str, sd)) - set(want))
    wrong = [k for k in want if k in sd and (type(sd[k]) is not torch.Tensor
                                             or tuple(sd[k].shape) != want[k]
                                             or sd[k].dtype != torch.float32
                                             or sd[k].device.type != "cpu"
                                             or not sd[k].is_contiguous())]
    record_property("measured", f"missing {missing[:6]}, unexpected {extra[:6]}, wrong "
                    f"shape/dtype/layout {wrong[:6]}" + (f", {more}" if more else ""))
    assert not (missing or extra or wrong), \
        f"export keys: missing {missing[:8]}, unexpected {extra[:8]}, wrong {wrong[:8]}"
    state = run.final_state()
    final = state.get("model") if isinstance(state, dict) else None
    if isinstance(final, dict) and set(final) == set(sd):
        cast = [k for k in sd if as_tensor(final[k]) is None
                or not bitwise_equal(sd[k], final[k].to(torch.float32))]
        assert not cast, f"exported tensors are not the final model cast to fp32 ({cast[:4]})"
    # The anchor on the content: the exported weights are the trained model.
    params, _ = schema_params(sd, cfg)
    value = heldout_loss(params, cfg)
    record_property("judge_heldout_export", f"{value:.6g}")
    assert learned(value, LEARNED_MARGIN), (
        f"the judge's held-out loss of the exported weights is {value:.6g}, not "
        f"{LEARNED_MARGIN} below a uniform predictor's {UNIFORM_LOSS:.4f}: the export does not "
        "hold a trained model")
    return sd


@observed_in(JUDGE, OUTSIDE)
def test_export_from_fsdp(fsdp_fp64: Run, record_property: Any) -> None:
    """--export from a gloo-fsdp-2 MoE run (parameters sharded as DTensors) holds exactly the
    documented keys (router.weight (E,d), experts.{e}.w1.weight (H,d), experts.{e}.w2.weight (d,H)
    per layer, no dense ffn.w1/w2) as plain contiguous float32 CPU tensors, each the run's
    reconstructed final model cast to fp32. Anchor: the judge's held-out loss of the exported
    weights (reference forward) is at least 0.1 below ln 64."""
    _record(record_property, oracle="reference", configurations="gloo-fsdp-2",
            tolerance="exact keys/shapes/dtype/layout; bitwise the final model cast to fp32; "
                      f"judge's held-out loss <= ln 64 - {LEARNED_MARGIN:g}",
            why="TASK.md: --export keeps the schema on every configuration; under FSDP2 the "
                "export must gather the sharded experts and router into full plain tensors, "
                "which DDP never does. The reference solution's FSDP export is its final model "
                "cast to fp32 bit for bit, held-out 3.643",
            runs=fsdp_fp64.evidence())
    _check_export_file(fsdp_fp64, R.Cfg(), record_property)


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="export_schema's keys and shapes, and load_export's outputs against the same"
                     " process's TinyLM",
             corroborated_by="the export file's keys, dtypes and weights (the final model cast to"
                             " fp32, with the judge's held-out loss of a trained model), and "
                             "load_export of a fixed all-experts file computing the judge's "
                             "reference")
def test_export_schema_and_reload(ddp_fp64: Run, record_property: Any) -> None:
    """--export from a gloo-ddp-2 MoE run holds exactly the documented keys (router.weight (E,d),
    experts.{e}.w1.weight (H,d), experts.{e}.w2.weight (d,H) per layer, no dense ffn.w1/w2), as
    plain contiguous float32 CPU tensors; export_schema(cfg) says the same and load_export rebuilds
    the MoE model (same outputs as TinyLM(cfg) with those weights, 1e-6). Anchors: the export holds
    the trained model (the judge's held-out loss of the exported weights is at least 0.1 below ln
    64), and load_export of a documented-format file with fixed weights under the all-experts
    setting (K = E, nothing dropped) computes the reference's outputs (1e-6)."""
    _record(record_property, oracle="reference", configurations="gloo-ddp-2",
            tolerance="exact keys/shapes/dtype; reloaded model's logits and aux within 1e-6 of "
                      "TinyLM(cfg) holding the exported weights and, for a fixed all-experts "
                      f"export, of the reference; judge's held-out loss <= ln 64 - "
                      f"{LEARNED_MARGIN:g}",
            why="the schema is fixed by TASK.md; the reload runs the same fp32 code on the same "
                "weights (measured 0), 1e-6 leaves room for a loader that casts differently; the "
                "all-experts setting leaves routing details no room to move the output "
                "(reference solution ~1e-15)",
            runs=ddp_fp64.evidence())
    cfg = R.Cfg()
    want = R.schema(cfg)
    got_schema = _schema_pairs(probe.call(PROBE, "export_schema", timeout_s=PROBE_TIMEOUT_S,
                                          model_config=cfg.model_config_kwargs()))
    schema_diff = sorted(set(want) ^ set(got_schema)) + [
        k for k in want if k in got_schema and got_schema[k] != want[k]]
    sd = _check_export_file(ddp_fp64, cfg, record_property,
                            f"export_schema differences {schema_diff[:6]}")
    assert not schema_diff, f"export_schema(cfg) differs from TASK.md: {schema_diff[:8]}"
    # load_export must rebuild the MoE model: the same outputs as the candidate's own TinyLM
    # holding the exported weights (the routing itself is checked by the forward reference
    # check, so a routing defect is not counted twice here), and, on a file of fixed weights in
    # the all-experts setting, the reference's outputs.
    tokens = R.fixed_tokens(4, 31)[:, :-1]
    anchor = all_experts_case(43)
    # The run's folder is closed: the probe reads a copy of the export in a job folder of its own.
    given = sealed.give(ddp_fp64.out / "model.pt", "export-reload")
    seen = probe.call(PROBE, "reload_export", timeout_s=PROBE_TIMEOUT_S, path=str(given),
                      model_config=cfg.model_config_kwargs(), params=dict(sd), tokens=tokens,
                      anchor=anchor)
    seen = seen if isinstance(seen, dict) else {}
    d = worst([tensor_diff(seen.get("logits"), seen.get("direct_logits")),
               scalar_diff(seen.get("aux"), seen.get("direct_aux"))])
    d_anchor = worst(all_experts_error(anchor, seen.get("anchor")))
    record_property("reload_max_abs_diff", d)
    record_property("all_experts_reload_max_abs_diff", d_anchor)
    assert seen.get("is_module") is True and within(d, 1e-6), \
        f"load_export's model differs from TinyLM(cfg) with the exported weights by {d:g}"
    assert within(d_anchor, ALL_EXPERTS_ATOL), (
        f"load_export of a documented export (E 4, top-4, fixed weights) differs from the "
        f"reference MoE by {d_anchor:g}: it does not rebuild the MoE model")



@observed_in(OUTSIDE, CANDIDATE_REPORT,
             reports="that load_export's model gives the outputs of TinyLM with the starvation "
                     "settings holding the exported weights (both computed in the same candidate "
                     "process)",
             corroborated_by="the export file holds exactly the starvation settings' schema (16 "
                             "experts' keys), read by the judge")
def test_export_keeps_the_moe_settings(starvation_runs: tuple[Run, Run, Run | None],
                                       record_property: Any) -> None:
    """The cpu-1 export of a run with other MoE settings than the defaults (the starvation
    command: E 16, top-1, F 16, W 0, ffn_hidden 32, fp64) reloads with those settings:
    load_export's model gives the outputs of TinyLM(those settings) holding the exported weights
    (logits and aux within 1e-6). W = 0 gives a zero aux loss and F = 16 drops nothing; a
    reload that falls back to the default W 0.01 gives a non-zero aux, and the default F 1.25
    (capacity 3 per expert and sequence) drops every assignment past an expert's third."""
    one = starvation_runs[0]
    _record(record_property, oracle="differential", configurations="cpu-1",
            tolerance="logits and aux within 1e-6 of TinyLM(cfg) with the exported weights",
            why="the same fp32 code on the same weights (reference solution: 0); a reload with "
                "the default capacity factor or aux weight moves the logits by dropped "
                "assignments and the aux by W * balance loss",
            runs=one.evidence())
    one.require()
    path = one.out / "model.pt"
    assert path.exists(), f"--export wrote no {path.name}"
    blob = torch.load(path, map_location="cpu", weights_only=True)
    sd = blob.get("state_dict") if isinstance(blob, dict) else None
    assert isinstance(sd, dict) and set(sd) == set(R.schema(STARVE_CFG)), \
        "the export's keys are not the schema's (test_export_schema_and_reload says which)"
    given = sealed.give(path, "export-settings-reload")
    seen = probe.call(PROBE, "reload_export", timeout_s=PROBE_TIMEOUT_S, path=str(given),
                      model_config=STARVE_CFG.model_config_kwargs(), params=dict(sd),
                      tokens=R.fixed_tokens(4, 31)[:, :-1], anchor=all_experts_case(43))
    seen = seen if isinstance(seen, dict) else {}
    d_logits = tensor_diff(seen.get("logits"), seen.get("direct_logits"))
    d_aux = scalar_diff(seen.get("aux"), seen.get("direct_aux"))
    record_property("measured", f"reloaded vs direct: logits {d_logits:g}, aux {d_aux:g}")
    assert seen.get("is_module") is True and within(worst([d_logits, d_aux]), 1e-6), (
        f"load_export's model differs from TinyLM(E 16, top-1, F 16, W 0) with the exported "
        f"weights (logits {d_logits:g}, aux {d_aux:g}): the export does not keep the MoE settings")

@observed_in(JUDGE, OUTSIDE)
def test_dense_path_unchanged(dense_default_runs: dict[str, DensePair], runs_dir: Path,
                              record_property: Any) -> None:
    """At every default (E = 0), cpu-1, both trees: ``train.py --export FILE`` with no other
    flag (no --config, no --out) exports bit for bit the pristine baseline's model and prints a
    summary line with every key of the baseline's and its value (but the wall time);
    ``train(TrainConfig(out=DIR))`` through the Python API writes bit for bit the baseline's
    final model and optimizer state and metrics.jsonl, and a summary.json that keeps every key
    of the baseline's with its value (but the wall time). The defaults of train.py's
    flags and of the config dataclasses are what the runs stand on."""
    _record(record_property, oracle="differential", configurations="cpu-1",
            tolerance="bitwise",
            why="QUALIFICATION: reference with --moe-experts 0 vs baseline after 200 steps "
                "measured 0 [0] (bitwise); TASK.md requires bit-for-bit with E = 0 and keeps "
                "every existing flag and the public API working")
    if baseline_dir() is None:
        pytest.skip("GRADING_BASELINE is not set: no pristine baseline to compare with")
    cli, api = dense_default_runs["cli"], dense_default_runs["api"]
    assert cli.baseline is not None and api.baseline is not None
    record_property("runs", "; ".join(r.evidence() for r in (cli.baseline, cli.candidate,
                                                             api.baseline, api.candidate)))
    cli.baseline.require()
    api.baseline.require()
    problems = []
    # train.py at its defaults: the export and the printed summary are all it leaves.
    cli.candidate.require()
    export_diff = _export_difference(cli.baseline.out / "model.pt",
                                     cli.candidate.out / "model.pt")
    if export_diff:
        problems.append(f"train.py at its defaults: {export_diff}")
    printed_b = _printed_summary(run_log(cli.baseline, runs_dir))
    printed_c = _printed_summary(run_log(cli.candidate, runs_dir))
    assert printed_b is not None, "the baseline printed no summary line (the check is broken)"
    printed = _summary_departure(printed_b, printed_c)
    if printed:
        problems.append(f"train.py at its defaults prints a summary line that {printed}")
    # The Python API at its defaults: everything the run folder holds.
    api.candidate.require()
    b, c = api.baseline, api.candidate
    cmp = compare_states(b.final_state(), c.final_state())
    if cmp["bitwise_equal"] is not True:
        problems.append(f"train(TrainConfig()) ends in another state than the baseline's: {cmp}")
    if (b.out / "metrics.jsonl").read_bytes() != (c.out / "metrics.jsonl").read_bytes():
        problems.append("train(TrainConfig()) logs other metrics.jsonl (losses, aux, LRs)")
    written = _summary_departure(b.summary(), _read_json(c.out / "summary.json"))
    if written:
        problems.append(f"train(TrainConfig()) writes a summary.json that {written}")
    record_property("measured", "; ".join(problems) or "bitwise the baseline's")
    assert not problems, "; ".join(problems)


@observed_in(JUDGE, OUTSIDE)
def test_dense_path_at_other_options(dense_option_runs: dict[str, DenseOptionRuns],
                                     record_property: Any) -> None:
    """With E = 0 and every other option away from its default at once (seed 3, global batch 8,
    lr 1e-3, weight decay 0.05, warmup 2, fp64, 3 layers, d_model 32, ffn_hidden 48, dropout
    0.1), 6 steps with a checkpoint at step 3 and an export, on cpu-1, gloo-ddp-2 and
    gloo-fsdp-2, and a fresh launch resumed from (a copy of) that checkpoint: the graded tree's
    final model and optimizer state, metrics.jsonl, export and the baseline's summary.json keys
    (but the wall time) are bit for bit the pristine baseline's, each tree resuming its own
    checkpoint. Dropout puts
    the per-rank RNG streams in play: a random draw the feature adds to training, or a rank's
    stream seeded otherwise, moves the masks."""
    _record(record_property, oracle="differential",
            configurations=",".join(dense_option_runs), tolerance="bitwise",
            why="TASK.md: with E = 0 the model, its state dict, its export, its losses and its "
                "parameters after training are bit-for-bit what the current code produces; "
                "the baseline runs in the same process layout, so any difference is the "
                "graded tree's")
    if baseline_dir() is None:
        pytest.skip("GRADING_BASELINE is not set: no pristine baseline to compare with")
    departed = {}
    for config, runs in dense_option_runs.items():
        for stage, pair in (("full", runs.full), ("resumed", runs.resumed)):
            if pair is None:
                # The full runs did not both finish, or one wrote no checkpoint: say which.
                runs.full.candidate.require()
                assert runs.full.baseline is not None
                runs.full.baseline.require()
                missing = [side for side, p in runs.checkpoints.items() if not p.is_dir()]
                pytest.fail(f"{config}: no checkpoint at step {DENSE_OPTIONS_RESUME_AT} from "
                            f"the {' and '.join(missing)} run")
            assert pair.baseline is not None
            record_property(f"runs_{config}_{stage}",
                            f"{pair.baseline.evidence()}; {pair.candidate.evidence()}")
            pair.baseline.require()
            pair.candidate.require()
            differs = _dense_departure(pair.baseline, pair.candidate)
            record_property(f"{config}_{stage}", differs or "bitwise the baseline's")
            if differs:
                departed[f"{config} ({stage})"] = differs
    assert not departed, ("with E = 0 at non-default options the graded tree is not the "
                          "baseline: " + "; ".join(f"{k}: {v}" for k, v in departed.items()))


@observed_in(JUDGE, OUTSIDE)
def test_guards_refuse_as_the_baseline_does(dense_option_runs: dict[str, DenseOptionRuns],
                                           runs_dir: Path, record_property: Any) -> None:
    """What the baseline refuses stays refused (the launch fails, no final state), each
    condition of a guard alone: --steps -1; --global-batch 0; --save-every -1; --save-every
    without --ckpt; --dropout 1.0; and resuming the cpu-1 other-options run's checkpoint with
    another --seed, or with another --global-batch (the checkpoint's data stream belongs to
    another run). Each case is run on both trees; a case the baseline does not refuse is a
    broken check, not the candidate's failure."""
    _record(record_property, oracle="differential", configurations="cpu-1", tolerance="exact",
            why="TASK.md: without breaking anything that works today; the baseline's "
                "validate() and its data stream's resume guard raise ValueError")
    base_root = baseline_dir()
    if base_root is None:
        pytest.skip("GRADING_BASELINE is not set: no pristine baseline to compare with")
    cases: dict[str, Callable[[str, Path | None], Run]] = {}
    for what, flags in REFUSED_FLAGS.items():
        def refused(name: str, root: Path | None, flags: list[str] = flags) -> Run:
            out = sealed.job_dir(name)
            args = ["--steps", "2", *(f.format(out=out) for f in flags)]
            return train(name, "cpu-1", args, runs_dir, root=root, out=out)
        cases[what] = refused
    cpu1 = dense_option_runs["cpu-1"]
    cpu1.full.candidate.require()
    for what, other in (("another --seed", ["--seed", "4"]),
                        ("another --global-batch", ["--global-batch", "16"])):
        def mismatched(name: str, root: Path | None, other: list[str] = other) -> Run:
            side = "baseline" if root is not None else "candidate"
            given = sealed.give(cpu1.checkpoints[side], f"{name}-ckpt")
            out = sealed.job_dir(name)
            args = [*dense_option_args(out), *other, "--resume", str(given)]
            return train(name, "cpu-1", args, runs_dir, root=root, out=out)
        cases[f"resume with {what}"] = mismatched
    accepted = []
    for i, (what, case) in enumerate(cases.items()):
        base = case(f"baseline-refused-{i}", base_root)
        cand = case(f"candidate-refused-{i}", None)
        record_property(f"case_{i}", f"{what}: {base.evidence()}; {cand.evidence()}")
        for run in (base, cand):
            if run.outcome == "hang":
                # A run past its wall limit is the hang outcome (run again by the grader), not
                # a refusal and not an acceptance.
                record_property("grading_outcome", "hang")
                pytest.fail(f"{what}: {run.name} {run.detail}", pytrace=False)
        assert base.outcome == "crash" and not (base.out / "final_state.pt").exists(), \
            f"the baseline does not refuse {what} ({base.outcome}): the check is broken"
        if cand.outcome == "ok" or (cand.out / "final_state.pt").exists():
            accepted.append(what)
    record_property("measured", f"accepted {accepted or 'none'}")
    assert not accepted, f"the graded tree accepts what the baseline refuses: {accepted}"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _summary_departure(base: Any, cand: Any) -> str:
    """'' when ``cand`` holds every key of the baseline's summary with the same value (its wall
    time aside, the one field that differs from run to run; a key the graded tree adds is not
    judged), else what departs first."""
    if not isinstance(cand, dict):
        return "is missing or not a JSON object"
    for key, value in base.items():
        if key == "wall_s":
            continue
        if key not in cand:
            return f"lacks the baseline's key {key!r}"
        if type(cand[key]) is not type(value) or cand[key] != value:
            return f"has {key} {cand[key]!r:.80}, the baseline {value!r:.80}"
    return ""


def _printed_summary(log: str) -> Any:
    """The last line of a run's output that is a JSON object with a held-out loss (train.py
    prints its summary so); None when there is none."""
    for line in reversed(log.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "heldout_loss" in value:
            return value
    return None


def _export_difference(want: Path, got: Path) -> str:
    """'' when two export files hold the same format and bitwise the same tensors."""
    eb = torch.load(want, weights_only=True)
    try:
        ec = torch.load(got, weights_only=True)
    except Exception as exc:  # a hostile file: any failure to load is a difference
        return f"the export does not load ({type(exc).__name__})"
    sb = eb.get("state_dict") if isinstance(eb, dict) else None
    sc = ec.get("state_dict") if isinstance(ec, dict) else None
    if not isinstance(sc, dict) or not isinstance(sb, dict) or list(sc) != list(sb):
        return "the export's keys differ"
    if not isinstance(ec, dict) or ec.get("format") != eb.get("format"):
        return "the export's format differs"
    worse = [k for k in sb if not bitwise_equal(sc[k], sb[k])]
    return f"the export's {worse[0]} differs" if worse else ""


def _dense_departure(base: Run, cand: Run) -> str:
    """'' when a run's outputs are bitwise the baseline's, else what differs first."""
    want = (base.out / "metrics.jsonl").read_bytes().splitlines()
    got = (cand.out / "metrics.jsonl").read_bytes().splitlines()
    if got != want:
        first = next((i for i, (g, w) in enumerate(zip(got, want, strict=False))
                      if g != w),
                     min(len(got), len(want)))
        return (f"metrics.jsonl differs from line {first + 1} ({len(got)} lines, the "
                f"baseline's {len(want)})")
    cmp = compare_states(base.final_state(), cand.final_state())
    if cmp["bitwise_equal"] is not True:
        return f"the final state differs ({cmp})"
    written = _summary_departure(base.summary(), _read_json(cand.out / "summary.json"))
    if written:
        return f"summary.json {written}"
    return _export_difference(base.out / "model.pt", cand.out / "model.pt")


@observed_in(JUDGE, OUTSIDE)
def test_quality_heldout_loss(quality_run: Run, record_property: Any) -> None:
    """The fixed cpu-1 MoE run (seed 0, global batch 16, 200 steps, E 4, top-2, F 1.25, W 0.01,
    fp32) reaches a held-out loss at most 0.07 above the reference's 2.8219, as the judge measures
    it: the reference implementation's cross-entropy of the run's final weights on the baseline's
    held-out set (summary.json's own figure is recorded, not trusted)."""
    _record(record_property, oracle="reference", configurations="cpu-1",
            tolerance=f"judge's heldout_loss <= {REFERENCE_HELDOUT:.4f} + {QUALITY_BAND}",
            why="QUALIFICATION (d): reference seed 0 2.8219 (seeds 0-2: 2.8219, 2.8238, 2.8350); "
                "band = twice the worst seed-to-seed spread (0.0352), at least 0.02. The judge's "
                "fp64 measurement of the reference's fp32 weights differs from its own summary "
                "by 1e-8",
            runs=quality_run.evidence())
    cfg = R.Cfg()
    params, source = quality_run.weights(cfg)
    value = heldout_loss(params, cfg)
    record_property("heldout_loss", value)
    record_property("reference_heldout_loss", REFERENCE_HELDOUT)
    record_property("reported_heldout_loss", quality_run.reported_heldout())
    record_property("weights", source)
    assert params is not None, f"the run left no final weights the judge can read: {source}"
    assert within(value, REFERENCE_HELDOUT + QUALITY_BAND), \
        f"held-out loss {value:.4f} (the judge's, on the run's final weights) is more than " \
        f"{QUALITY_BAND} above the reference's {REFERENCE_HELDOUT:.4f}"
