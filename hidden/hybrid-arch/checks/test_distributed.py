# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""Hidden checks of a hybrid (AMAM) stack under gloo-ddp-2 and gloo-fsdp-2, and its resume.

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

Every run is the candidate's own train.py, launched by grading.launch (static loopback
rendezvous, one log per rank, every rank as the candidate uid, outputs in a job folder sealed
before the judge reads them); a crash or hang fails the check with the rank and its log.
Fixed for every comparison: global batch 16, seed 0, 20 AdamW steps, one thread per rank.
The FSDP wrapping is observed by ``probes/fsdp_probe.py`` (run as both ranks), and a
checkpoint's DCP metadata (a pickle) is read by a probe process, never by the judge.

Two runs of the candidate agreeing proves nothing on its own (a train.py that writes the same
files under every configuration agrees with itself), so each run is also held to the judge's
own training (``conftest.Programs``: the candidate's seeded model, exported, run by the judge
in its own AdamW loop over the pristine data), and the resumed run must continue from a
checkpoint the judge perturbed to where the judge's replay from it ends.
"""

from __future__ import annotations

import json
from typing import Any

import judge_replay
import pytest
import torch
from oracle_lib import (
    CUDA_CONFIGURATIONS,
    EQ_STEPS,
    GLOBAL_KEYS,
    PATTERN,
    RESUME_AT,
    check_key_schema,
    gpus,
    read_checkpoint,
    tree_max_diff,
    worst_key,
)
from run_export import check_run_export

from grading.compare import as_float, as_tensor, within, worst
from grading.observation import CANDIDATE_REPORT, JUDGE, OUTSIDE, observed_in

# QUALIFICATION.md: cpu-1 vs gloo-ddp-2 fp64 final params 8.9e-16 (reference, AMAM); only the
# reduction order differs, a real bug moves params by > 1e-4.
DDP_VS_CPU_FP64_TOL = 1e-10
# The judge's replay (the same seeded model and ops, one process, the global batch at once) vs
# a run. Measured for the reference: fp64 0 (cpu-1) and 8.9e-16 (gloo-ddp-2), fp32 3.5e-7
# (gloo-ddp-2: two half-batch gradients averaged). fp32 gets 1e-3: AdamW can amplify fp32
# reassociation noise (QUALIFICATION.md, ~1e-4 on other models), while an untrained state is
# 3.4e-2 away and the perturbed checkpoint moves the resumed run's end by 4.9e-2.
REPLAY_TOL = {"fp64": 1e-10, "fp32": 1e-3}
# metrics.jsonl losses (fp32 values around 2-4) vs the judge's: measured <= 4.8e-7.
LOSS_TOL = 1e-4
LR_TOL = 1e-12
# summary.json's held-out loss vs the judge's evaluation of the run's final weights (fp32, the
# pristine held-out set): measured 7.5e-9 for the reference's cpu-1 fp64, gloo-ddp-2 and
# gloo-fsdp-2 fp32 runs (2e-9 on the cpu-1 quality run); a rank's slice of the set shifted,
# widened or emptied moves it by far more (the two halves are different sequences).
HELDOUT_TOL = 1e-4


def _check_pattern(run: Any) -> None:
    """The run trained the hybrid stack. summary.json's word for it is not enough (a run that
    trains the all-attention model and reports the pattern would compare equal to itself and to
    a replay of that same model), so the judge also reads the final weights' keys."""
    model = run.summary().get("model", {})
    assert model.get("layer_pattern") == PATTERN, f"{run.name} ran pattern {model}"
    state = run.final().get("model")
    assert isinstance(state, dict), f"{run.name}: final_state.pt holds no model state dict"
    problems = check_key_schema(state, PATTERN, stack_only=True)
    assert problems == [], f"{run.name}: the final weights are not an {PATTERN} stack: {problems}"


def _shard0(placements: list[dict[str, Any]] | None) -> bool:
    """A parameter's placements (None: a plain tensor) are exactly ``(Shard(0),)``."""
    return (placements is not None and len(placements) == 1
            and placements[0]["type"] == "Shard" and placements[0]["dim"] == 0)


def _eq_args_fp32() -> list[str]:
    return ["--config", "gloo-ddp-2", "--layer-pattern", PATTERN, "--steps", str(EQ_STEPS),
            "--dtype", "fp32"]


def _anchor(run: Any, traj: judge_replay.Trajectory, dtype: str, record_property: Any,
            first_step: int = 0) -> None:
    """``run``'s final model and optimizer state and its logged losses and LRs are the judge's
    trajectory ``traj``'s (REPLAY_TOL[dtype], LOSS_TOL, LR_TOL)."""
    final = run.final()
    tol = REPLAY_TOL[dtype]
    model_err = judge_replay.state_error(final.get("model"), traj)
    optim_err = judge_replay.optim_error(final.get("optim"), traj)
    loss_err, lr_err = judge_replay.metrics_errors(run.metrics(), traj, first_step)
    for what, err in (("param", model_err), ("optim", optim_err), ("loss", loss_err),
                      ("lr", lr_err)):
        record_property(f"{run.name}_vs_judge_{what}_max_abs_diff", err)
    assert within(model_err, tol), (
        f"{run.name}: final parameters differ from the judge's replay of the specified "
        f"training by {model_err} (tol {tol})")
    assert within(optim_err, tol), (
        f"{run.name}: optimizer state differs from the judge's replay by {optim_err}")
    assert within(loss_err, LOSS_TOL), (
        f"{run.name}: logged losses differ from the judge's by {loss_err}")
    assert within(lr_err, LR_TOL), f"{run.name}: logged LRs differ from the judge's by {lr_err}"


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports='the pattern summary.json records',
             corroborated_by="the final weights are an AMAM stack by their keys and both runs are"
                             " the judge's replay")
def test_gloo_ddp2_matches_cpu1_fp64(cpu1_fp64: Any, ddp_fp64: Any, programs: Any,
                                     record_property: Any) -> None:
    """A hybrid (AMAM) model after 20 fp64 AdamW steps at global batch 16: gloo-ddp-2 final
    parameters within 1e-10 of cpu-1, and both runs (parameters, optimizer state, logged losses
    and LRs) are the judge's own replay of the specified training of the candidate's seeded
    model (1e-10)."""
    record_property("oracle", "differential")
    record_property("configurations", "cpu-1,gloo-ddp-2")
    record_property("tolerance", DDP_VS_CPU_FP64_TOL)
    record_property("why", "measured 8.9e-16 (reference) / 5.6e-16 (baseline): only reduction "
                    "order differs; a wrong slice or missing average moves params by > 1e-4")
    cpu1_fp64.require(record_property)
    ddp_fp64.require(record_property)
    _check_pattern(cpu1_fp64)
    _check_pattern(ddp_fp64)
    cpu, ddp = cpu1_fp64.final()["model"], ddp_fp64.final()["model"]
    diff = tree_max_diff(ddp, cpu)
    key = worst_key(ddp, cpu)
    record_property("max_abs_param_diff", diff)
    record_property("worst_key", key)
    assert within(diff, DDP_VS_CPU_FP64_TOL), f"gloo-ddp-2 vs cpu-1: {diff} at {key}"
    # Both are the specified training, not merely equal to each other.
    traj = programs.trajectory("AMAM-float64", EQ_STEPS)
    record_property("replay_tolerance", REPLAY_TOL["fp64"])
    for run in (cpu1_fp64, ddp_fp64):
        _anchor(run, traj, "fp64", record_property)


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports='the pattern summary.json records',
             corroborated_by="the final weights are an AMAM stack by their keys and the "
                             "gloo-ddp-2 runs are the judge's replay")
def test_gloo_fsdp2_matches_gloo_ddp2_bitwise(
    ddp_fp64: Any, fsdp_fp64: Any, ddp_fp32_ckpt: Any, fsdp_fp32: Any, programs: Any,
    record_property: Any
) -> None:
    """A hybrid (AMAM) model after 20 steps: the gloo-fsdp-2 reconstructed full model and
    optimizer state are bitwise equal to gloo-ddp-2, in fp64 and fp32, and the gloo-ddp-2 runs
    are the judge's own replay of the specified training (fp64 1e-10, fp32 1e-3)."""
    record_property("oracle", "differential")
    record_property("configurations", "gloo-ddp-2,gloo-fsdp-2")
    record_property("tolerance", 0.0)
    record_property("why", "measured 0 (model and optimizer, fp32 and fp64, reference and "
                    "baseline): with two ranks and no clipping, FSDP2's reduce-scatter and DDP's "
                    "all-reduce add the same two numbers")
    for ddp, fsdp, dtype in ((ddp_fp64, fsdp_fp64, "fp64"), (ddp_fp32_ckpt, fsdp_fp32, "fp32")):
        ddp.require(record_property)
        fsdp.require(record_property)
        _check_pattern(ddp)
        _check_pattern(fsdp)
        a, b = ddp.final(), fsdp.final()
        for part in ("model", "optim"):
            diff = tree_max_diff(b.get(part), a.get(part))
            record_property(f"{dtype}_{part}_max_abs_diff", diff)
            assert within(diff, 0.0), f"{dtype} {part}: gloo-fsdp-2 vs gloo-ddp-2 differ by {diff}"
    record_property("replay_tolerance", json.dumps(REPLAY_TOL))
    _anchor(ddp_fp64, programs.trajectory("AMAM-float64", EQ_STEPS), "fp64", record_property)
    _anchor(ddp_fp32_ckpt, programs.trajectory("AMAM-float32", EQ_STEPS), "fp32",
            record_property)


# train.py --export under gloo-fsdp-2: the same tolerances as the cpu-1 export (test_mixer.py):
# weights from the gathered full model (fp32 rounding of fp64 weights ~1e-7), the program run by
# the judge against the judge's AMAM program with the same weights.
FSDP_EXPORT_WEIGHTS_TOL = 1e-6
FSDP_EXPORT_TOL = 1e-5


@observed_in(JUDGE, OUTSIDE)
def test_gloo_fsdp2_export(fsdp_fp64: Any, programs: Any, record_property: Any) -> None:
    """train.py --export under gloo-fsdp-2 (fp64, AMAM) keeps working: it writes the program of
    the run's final full model (keys follow the schema, only allow-listed operators, every
    weight the final model's within 1e-6) and the program computes what the judge's AMAM
    program does with those weights (1e-5, both run by the judge)."""
    record_property("oracle", "reference")
    record_property("configurations", "gloo-fsdp-2")
    record_property("tolerance", f"weights {FSDP_EXPORT_WEIGHTS_TOL}; logits {FSDP_EXPORT_TOL}")
    record_property("why", "TASK.md: train.py --export keeps working, on every configuration; "
                    "the export is the full model however it was sharded (the reference "
                    "exports the gathered state on rank 0), fp32 rounding of fp64 weights "
                    "~1e-7")
    fsdp_fp64.require(record_property)
    check_run_export(fsdp_fp64, PATTERN, programs, record_property, label="gloo_fsdp2_export",
                     weights_tol=FSDP_EXPORT_WEIGHTS_TOL, logits_tol=FSDP_EXPORT_TOL)


@observed_in(CANDIDATE_REPORT,
             reports="the FSDP structure the probe's ranks describe (units, managed parameters, "
                     "placements, block kinds)",
             uncorroborated="which modules are fully_shard units is visible only inside the "
                            "ranks' processes; the numbers are the same however the blocks are "
                            "wrapped")
def test_gloo_fsdp2_wraps_every_block(fsdp_probe: Any, record_property: Any) -> None:
    """Under gloo-fsdp-2 every block of a hybrid model, attention or mixer, is its own
    fully_shard unit with its parameters sharded on dim 0, and the root is a unit too."""
    record_property("oracle", "reference")
    record_property("configurations", "gloo-fsdp-2")
    record_property("tolerance", "exact (structure)")
    record_property("why", "TASK.md: one fully_shard unit per block, then the root; a block left "
                    "to the root's unit trains the same numbers but all-gathers its weights "
                    "for the whole forward, which only a structural probe can see")
    fsdp_probe.require(record_property)
    for rank in (0, 1):
        report = json.loads((fsdp_probe.out / f"probe-rank{rank}.json").read_text())
        assert report["world_size"] == 2
        assert report["root_is_fsdp_unit"], f"rank {rank}: the root is not a fully_shard unit"
        # None: the unit could not be introspected (no verdict on what it manages).
        root_managed = report["root_managed_param_ids"]
        root_manages_block_params = (None if root_managed is None else
                                     bool(set(root_managed) & set(report["block_param_ids"])))
        assert root_manages_block_params in (False, None), (
            f"rank {rank}: the root unit manages block parameters")
        blocks = report["blocks"]
        assert [b["kind"] for b in blocks] == list(PATTERN)
        for b in blocks:
            managed = b["managed_param_ids"]
            b["manages_exactly_its_params"] = (
                None if managed is None else sorted(managed) == sorted(b["param_ids"]))
        record_property(f"rank{rank}_blocks", json.dumps(
            [(b["index"], b["class"], b["is_fsdp_unit"], b["manages_exactly_its_params"])
             for b in blocks]))
        # The wrapped blocks are the pattern's: a mixer position holding an attention block
        # (the pattern accepted but ignored) is wrapped exactly like a real one.
        names = {f"layers.{b['index']}.{n}" for b in blocks for n in b["placements"]}
        problems = check_key_schema(names | GLOBAL_KEYS, PATTERN, stack_only=True)
        assert problems == [], f"rank {rank}: the wrapped blocks are not {PATTERN}'s: {problems}"
        for b in blocks:
            where = f"rank {rank} block {b['index']} ({b['kind']}, {b['class']})"
            assert b["is_fsdp_unit"], f"{where} is not its own fully_shard unit"
            assert b["manages_exactly_its_params"] in (True, None), (
                f"{where}: its unit does not manage exactly its parameters")
            assert b["n_params"] > 0, f"{where} has no parameters"
            unsharded = {n: p for n, p in b["placements"].items() if not _shard0(p)}
            assert not unsharded, f"{where}: parameters not sharded on dim 0: {unsharded}"


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="summary.json's resumed_from, and the checkpoint's top-level keys (read by a"
                     " probe: DCP metadata is a pickle)",
             corroborated_by="the resumed run's state is the uninterrupted run's bitwise, and a "
                             "launch resumed from the judge's perturbed checkpoint ends at the "
                             "judge's replay")
def test_resume_gloo_ddp2_bitwise(
    ddp_fp32_ckpt: Any, ddp_fp32_resumed: Any, programs: Any, launch_resume_perturbed: Any,
    record_property: Any
) -> None:
    """A hybrid (AMAM) gloo-ddp-2 run resumed in a fresh launch from its step-10 checkpoint ends
    bitwise equal (model, optimizer, losses, LRs) to the uninterrupted run; the checkpoint keeps
    per-rank RNG under rank-suffixed keys. Anchored to the judge's replay (fp32, 1e-3): the
    uninterrupted run and the checkpoint are the specified training, and a launch resumed from a
    checkpoint the judge perturbed ends where the judge's replay from it ends (so resuming must
    load the checkpoint; recomputing or copying cannot pass)."""
    record_property("oracle", "differential")
    record_property("configurations", "gloo-ddp-2")
    record_property("tolerance", 0.0)
    record_property("why", "measured 0 for model and optimizer on every configuration: same "
                    "process layout and thread count, every state restored")
    ddp_fp32_ckpt.require(record_property)
    _check_pattern(ddp_fp32_ckpt)
    ckpt = ddp_fp32_ckpt.out / "ckpt" / f"step-{RESUME_AT}"
    assert ckpt.is_dir(), f"no checkpoint at {ckpt}"
    contents = read_checkpoint(ckpt)
    top = sorted(str(k) for k in contents)
    record_property("checkpoint_top_level_keys", ",".join(top))
    for needed in ("model", "optim", "scheduler", "train", "rng_rank0", "rng_rank1"):
        assert needed in top, f"checkpoint lacks {needed!r} (has {top})"
    model = contents["model"]
    assert isinstance(model, dict), f"checkpoint model is a {type(model).__name__}"
    problems = check_key_schema(model, PATTERN, stack_only=True)
    assert problems == [], f"the checkpoint's model is not an {PATTERN} stack: {problems}"

    ddp_fp32_resumed.require(record_property)
    _check_pattern(ddp_fp32_resumed)
    assert ddp_fp32_resumed.summary().get("resumed_from") == RESUME_AT
    full, resumed = ddp_fp32_ckpt.final(), ddp_fp32_resumed.final()
    for part in ("model", "optim"):
        diff = tree_max_diff(resumed.get(part), full.get(part))
        record_property(f"{part}_max_abs_diff", diff)
        assert within(diff, 0.0), f"resumed vs uninterrupted {part} differ by {diff}"
    steps_full = {m.get("step"): m for m in ddp_fp32_ckpt.metrics()}
    steps_resumed = ddp_fp32_resumed.metrics()
    assert [m.get("step") for m in steps_resumed] == list(range(RESUME_AT, EQ_STEPS))
    got = [[m.get("loss"), m.get("lr")] for m in steps_resumed]
    want = [[steps_full.get(m["step"], {}).get("loss"), steps_full.get(m["step"], {}).get("lr")]
            for m in steps_resumed]
    assert within(tree_max_diff(got, want), 0.0), (got, want)

    # Anchors. The uninterrupted run (which the resumed one equals) and its checkpoint are the
    # specified training; then the resume must really load its checkpoint: the judge's own
    # step-10 state plus noise (checkpoint layout from the candidate's own), resumed in a fresh
    # launch, must end where the judge's replay from that state ends.
    tol = REPLAY_TOL["fp32"]
    record_property("replay_tolerance", tol)
    _anchor(ddp_fp32_ckpt, programs.trajectory("AMAM-float32", EQ_STEPS), "fp32",
            record_property)
    at10 = programs.trajectory("AMAM-float32", EQ_STEPS, stop=RESUME_AT)
    ckpt_err = judge_replay.state_error(model, at10)
    record_property("checkpoint_vs_judge_param_max_abs_diff", ckpt_err)
    assert within(ckpt_err, tol), (
        f"the step-{RESUME_AT} checkpoint differs from the judge's by {ckpt_err}")
    program = programs.get("AMAM-float32")
    start = judge_replay.perturbed(at10.state, program.parameter_keys)
    optim = contents.get("optim")
    assert isinstance(optim, dict), f"checkpoint optim is a {type(optim).__name__}"
    judge_ckpt = {**contents, "model": start, "optim": {**optim, "state": at10.optim}}
    expected = judge_replay.replay(program, judge_replay.GLOBAL_BATCH, start,
                                   dtype=torch.float32, total_steps=EQ_STEPS, start=RESUME_AT,
                                   optim=at10.optim)
    moved = judge_replay.state_error(expected.state, programs.trajectory("AMAM-float32",
                                                                         EQ_STEPS))
    record_property("perturbation_moves_end_by", moved)
    assert worst([moved]) > 10 * tol, f"the perturbation moved the judge's end by only {moved}"
    run = launch_resume_perturbed("ddp-fp32-resumed-perturbed", judge_ckpt,
                                  [*_eq_args_fp32()], nproc=2)
    run.require(record_property)
    _check_pattern(run)
    _anchor(run, expected, "fp32", record_property, first_step=RESUME_AT)


def _resume_matches(full: Any, resumed: Any, label: str, record_property: Any) -> None:
    """``resumed`` (a fresh launch from ``full``'s step-10 checkpoint) ends bitwise where
    ``full`` ends (model and optimizer), logging exactly ``full``'s steps 10-19."""
    full.require(record_property)
    resumed.require(record_property)
    _check_pattern(full)
    _check_pattern(resumed)
    assert resumed.summary().get("resumed_from") == RESUME_AT, (
        f"{label}: summary.json resumed_from is {resumed.summary().get('resumed_from')!r}")
    a, b = full.final(), resumed.final()
    for part in ("model", "optim"):
        diff = tree_max_diff(b.get(part), a.get(part))
        record_property(f"{label}_{part}_max_abs_diff", diff)
        assert within(diff, 0.0), f"{label}: resumed vs uninterrupted {part} differ by {diff}"
    steps_full = {m.get("step"): m for m in full.metrics()}
    steps_resumed = resumed.metrics()
    assert [m.get("step") for m in steps_resumed] == list(range(RESUME_AT, EQ_STEPS)), (
        f"{label}: the resumed run logged steps {[m.get('step') for m in steps_resumed]}")
    got = [[m.get("loss"), m.get("lr")] for m in steps_resumed]
    want = [[steps_full.get(m["step"], {}).get("loss"), steps_full.get(m["step"], {}).get("lr")]
            for m in steps_resumed]
    assert within(tree_max_diff(got, want), 0.0), (label, got, want)


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="summary.json's resumed_from and the pattern it records",
             corroborated_by="the resumed runs' final states are the uninterrupted runs' bitwise,"
                             " and those are the judge's replay")
def test_resume_cpu1_and_gloo_fsdp2_bitwise(
    cpu1_fp64: Any, cpu1_fp64_resumed: Any, fsdp_fp32: Any, fsdp_fp32_resumed: Any,
    programs: Any, record_property: Any
) -> None:
    """A hybrid (AMAM) run resumed in a fresh launch from its own step-10 checkpoint ends bitwise
    equal (model, optimizer, logged losses and LRs) to the uninterrupted run under cpu-1 (fp64,
    an unwrapped model) and gloo-fsdp-2 (fp32, sharded DTensor state), not only under gloo-ddp-2;
    both uninterrupted runs are the judge's replay of the specified training (fp64 1e-10,
    fp32 1e-3)."""
    record_property("oracle", "differential")
    record_property("configurations", "cpu-1,gloo-fsdp-2")
    record_property("tolerance", 0.0)
    record_property("why", "TASK.md: for every pattern and configuration a resumed run ends "
                    "bitwise equal; DCP saves and loads a plain state dict (cpu-1), a replicated "
                    "one (DDP) and sharded DTensors (FSDP2) by different paths, so a mixer state "
                    "that checkpoints under DDP can still be lost or misplaced under the others")
    _resume_matches(cpu1_fp64, cpu1_fp64_resumed, "cpu-1 fp64", record_property)
    _resume_matches(fsdp_fp32, fsdp_fp32_resumed, "gloo-fsdp-2 fp32", record_property)
    record_property("replay_tolerance", json.dumps(REPLAY_TOL))
    _anchor(cpu1_fp64, programs.trajectory("AMAM-float64", EQ_STEPS), "fp64", record_property)
    _anchor(fsdp_fp32, programs.trajectory("AMAM-float32", EQ_STEPS), "fp32", record_property)


# Every configuration, CUDA included where it can run: the same regime (a 20-step AMAM fp32 run)
# judged the same way on each.

# Logged training losses of a CUDA run (bf16 autocast) vs the judge's fp32 CPU replay. Not
# measured on a GPU host yet (the host these checks were validated on has none): bf16 autocast
# moves a loss of ~3-4 by ~1e-2 (measured 3e-2 on CPU logits with CPU bf16 autocast); a run
# that does not train, or trains another model or data, is off by more than 0.1 early on.
CUDA_LOSS_TOL = 0.1


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports='the pattern summary.json records',
             corroborated_by="the final weights are an AMAM stack by their keys, the logged "
                             "losses and LRs are the judge's replay, and the judge evaluates the "
                             "final weights on the held-out set")
def test_every_configuration_trains_the_pattern(
    request: pytest.FixtureRequest, cpu1_fp64: Any, ddp_fp32_ckpt: Any, fsdp_fp32: Any,
    programs: Any, record_property: Any
) -> None:
    """Every declared configuration trains the hybrid (AMAM) stack for 20 steps: each run
    finishes, records and holds the pattern, ends with finite weights, logs the losses and
    LRs of the judge's replay of the specified training, and reports in summary.json the
    held-out loss the judge computes from its final weights on the whole held-out set (cpu-1
    fp64, gloo-ddp-2 and gloo-fsdp-2 fp32: losses and held-out loss 1e-4; cuda-ddp-2 and
    cuda-fsdp-2, fp32 with bf16 autocast, only on a host with two GPUs: 0.1)."""
    record_property("oracle", "reference")
    record_property("configurations", ",".join(["cpu-1", "gloo-ddp-2", "gloo-fsdp-2",
                                                *CUDA_CONFIGURATIONS]))
    record_property("tolerance", f"logged losses: CPU {LOSS_TOL}, CUDA {CUDA_LOSS_TOL}; LRs "
                    f"{LR_TOL}; held-out loss: CPU {HELDOUT_TOL}, CUDA {CUDA_LOSS_TOL}")
    record_property("why", "TASK.md: every pattern trains under cpu-1, gloo-ddp-2, gloo-fsdp-2 "
                    "and the CUDA variants on a GPU host; the CPU runs measured <= 4.8e-7 from "
                    "the judge's losses. The CUDA tolerance is not measured (no GPU here): "
                    "bf16 autocast moves a loss of ~3-4 by ~1e-2")
    runs = [(cpu1_fp64, programs.trajectory("AMAM-float64", EQ_STEPS), LOSS_TOL),
            (ddp_fp32_ckpt, programs.trajectory("AMAM-float32", EQ_STEPS), LOSS_TOL),
            (fsdp_fp32, programs.trajectory("AMAM-float32", EQ_STEPS), LOSS_TOL)]
    available = gpus()
    record_property("gpus", available)
    if available >= 2:
        # Launched only here, and only where the CUDA configurations can run.
        runs += [(run, programs.trajectory("AMAM-float32", EQ_STEPS), CUDA_LOSS_TOL)
                 for run in request.getfixturevalue("cuda_runs")]
    record_property("runs_judged", ",".join(run.name for run, _, _ in runs))
    for run, traj, tol in runs:
        run.require(record_property)
        _check_pattern(run)
        final = run.final().get("model")
        assert isinstance(final, dict), f"{run.name}: final_state.pt holds no model state dict"
        for key, value in final.items():
            t = as_tensor(value)
            assert t is not None and bool(torch.isfinite(t).all()), (
                f"{run.name}: the final {key} is not finite")
        loss_err, lr_err = judge_replay.metrics_errors(run.metrics(), traj)
        record_property(f"{run.name}_vs_judge_loss_max_abs_diff", loss_err)
        record_property(f"{run.name}_vs_judge_lr_max_abs_diff", lr_err)
        assert within(loss_err, tol), f"{run.name}: logged losses off the judge's by {loss_err}"
        assert within(lr_err, LR_TOL), f"{run.name}: logged LRs off the judge's by {lr_err}"
        # Every rank evaluates its slice of the held-out set: the reported figure must be the
        # whole set's loss of the weights the run ended with.
        heldout = judge_replay.heldout_loss(programs.get("AMAM-float32"),
                                            judge_replay.GLOBAL_BATCH, final)
        reported = as_float(run.summary().get("heldout_loss"))
        heldout_err = abs(reported - heldout)
        record_property(f"{run.name}_heldout_loss", heldout)
        record_property(f"{run.name}_reported_heldout_loss", reported)
        assert within(heldout_err, tol if tol == CUDA_LOSS_TOL else HELDOUT_TOL), (
            f"{run.name}: summary.json reports held-out loss {reported}, the judge computes "
            f"{heldout:.6f} from the run's final weights")
