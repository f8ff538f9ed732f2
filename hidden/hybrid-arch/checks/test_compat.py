# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""Hidden compatibility checks: with no pattern the graded tree is the pristine baseline.

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

The reference here is the pristine baseline itself (GRADING_BASELINE), run in its own
process, as the candidate uid in a job folder like the graded tree's runs. These checks pass
on the untouched baseline by construction; they fail when the feature changes the
all-attention model or breaks old checkpoints. The graded tree's model loads the baseline's
state in a sealed probe process (``probes/hybrid_probe.py``); the judge only reads sealed
outputs as data.
"""

from __future__ import annotations

from typing import Any

import judge_replay
import source_facts
import torch
from conftest import OTHER_OPTIONS, OTHER_OPTIONS_CONFIGS, other_options_pair
from oracle_lib import (
    EQ_STEPS,
    PROBE,
    RESUME_AT,
    baseline_dir,
    read_checkpoint,
    tree_max_diff,
    workdir,
    worst_key,
)

from grading import probe
from grading.compare import within
from grading.observation import CANDIDATE_REPORT, JUDGE, OUTSIDE, observed_in

# The judge's replay of the pristine model (same ops, one process) vs a cpu-1 run resumed from
# the perturbed checkpoint: measured 0 for the baseline and the reference; the perturbation
# moves the end by ~5e-2.
PERTURBED_RESUME_TOL = 1e-6


@observed_in(JUDGE, OUTSIDE)
def test_default_pattern_is_baseline_bitwise(
    baseline_cpu1: Any, candidate_default_cpu1: Any, record_property: Any
) -> None:
    """With no --layer-pattern, a 20-step cpu-1 run of the graded tree equals the pristine
    baseline's bit for bit (metrics.jsonl, final model and optimizer state, and every entry of
    the baseline's summary.json but the wall time, the held-out loss included)."""
    record_property("oracle", "reference")
    record_property("configurations", "cpu-1")
    record_property("tolerance", 0.0)
    record_property("why", "TASK.md: the all-A model has exactly today's parameters, keys, "
                    "initial values and trajectory; same process layout and thread count, so "
                    "any difference is a change in the model")
    baseline_cpu1.require(record_property)
    candidate_default_cpu1.require(record_property)
    base, cand = baseline_cpu1.final(), candidate_default_cpu1.final()
    assert isinstance(cand.get("model"), dict), "final_state.pt holds no model state dict"
    assert list(cand["model"]) == list(base["model"]), "state-dict keys or their order changed"
    for part in ("model", "optim"):
        diff = tree_max_diff(cand.get(part), base[part])
        record_property(f"{part}_max_abs_diff", diff)
        if part == "model" and not within(diff, 0.0):
            record_property("worst_key", worst_key(cand["model"], base["model"]))
        assert within(diff, 0.0), f"{part} differs from the baseline by {diff}"
    base_metrics = (baseline_cpu1.out / "run" / "metrics.jsonl").read_text()
    cand_metrics = (candidate_default_cpu1.out / "run" / "metrics.jsonl").read_text()
    assert cand_metrics == base_metrics, "metrics.jsonl (losses, LRs) differs from the baseline"
    written = _summary_departure(baseline_cpu1.summary(), candidate_default_cpu1.summary())
    assert not written, f"summary.json departs from the baseline's: {written}"


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports="that the default model loaded the baseline's state strictly",
             corroborated_by="the run resumed from the baseline's checkpoint ends bitwise at the "
                             "baseline's end, and one resumed from the judge's perturbed "
                             "checkpoint at the judge's replay")
def test_baseline_checkpoint_loads_into_all_attention(
    baseline_cpu1: Any, candidate_resumes_baseline: Any, launch_resume_perturbed: Any,
    record_property: Any
) -> None:
    """A pristine-baseline DCP checkpoint (step 10) resumes in the graded tree's default model
    and ends bitwise equal to the baseline's uninterrupted run; the baseline's final_state.pt
    loads strictly; and the same checkpoint with step-10 weights the judge perturbed resumes to
    the judge's own replay of the pristine model from them (1e-6), so the resume must load the
    checkpoint."""
    record_property("oracle", "reference")
    record_property("configurations", "cpu-1")
    record_property("tolerance", 0.0)
    record_property("why", "measured 0 (QUALIFICATION.md compat rows, model and optimizer): "
                    "the all-A model is the baseline model, so every state restores exactly")
    baseline_cpu1.require(record_property)
    base = baseline_cpu1.final()
    # Strict loading raises on a missing or unexpected key, and the check then fails
    # (probe.CandidateRaised).
    probe.call(PROBE, "load_default_model_state", state=base["model"])

    candidate_resumes_baseline.require(record_property)
    resumed = candidate_resumes_baseline.final()
    for part in ("model", "optim"):
        diff = tree_max_diff(resumed.get(part), base[part])
        record_property(f"{part}_max_abs_diff", diff)
        assert within(diff, 0.0), (
            f"resumed-from-baseline {part} differs from the baseline by {diff}")

    # Resuming must load the checkpoint, not recompute the run: the baseline's checkpoint
    # layout (read on the pristine tree) with the judge's own step-10 state of the pristine
    # model plus noise, resumed in a fresh launch, ends where the judge's replay from it ends.
    contents = read_checkpoint(baseline_cpu1.out / "ckpt" / f"step-{RESUME_AT}",
                               root=baseline_dir())
    model = judge_replay.PristineModel()
    batch = judge_replay.GLOBAL_BATCH
    at10 = judge_replay.replay(model, batch, model.seeded(0), dtype=torch.float32,
                               total_steps=EQ_STEPS, stop=RESUME_AT)
    start = judge_replay.perturbed(at10.state, model.parameter_keys)
    expected = judge_replay.replay(model, batch, start, dtype=torch.float32,
                                   total_steps=EQ_STEPS, start=RESUME_AT, optim=at10.optim)
    judge_ckpt = {**contents, "model": start, "optim": {**contents["optim"], "state": at10.optim}}
    run = launch_resume_perturbed("candidate-resumes-perturbed-baseline-ckpt", judge_ckpt,
                                  ["--config", "cpu-1", "--steps", str(EQ_STEPS)], nproc=1)
    run.require(record_property)
    final = run.final()
    model_err = judge_replay.state_error(final.get("model"), expected)
    optim_err = judge_replay.optim_error(final.get("optim"), expected)
    record_property("perturbed_resume_vs_judge_param_max_abs_diff", model_err)
    record_property("perturbed_resume_vs_judge_optim_max_abs_diff", optim_err)
    record_property("perturbed_resume_tolerance", PERTURBED_RESUME_TOL)
    assert within(model_err, PERTURBED_RESUME_TOL), (
        f"resumed from the perturbed checkpoint, the parameters differ from the judge's replay "
        f"by {model_err}")
    assert within(optim_err, PERTURBED_RESUME_TOL), (
        f"resumed from the perturbed checkpoint, the optimizer state differs by {optim_err}")


@observed_in(JUDGE)
def test_no_new_dependencies(record_property: Any) -> None:
    """TASK.md: "No new dependencies". Every module the graded tree's code imports (statements,
    and import_module/__import__ of a literal name; tests/ is discarded before grading) is the
    standard library, the tree's own, or one the pristine baseline imports; every file parses.
    pyproject.toml is the baseline's in the graded tree (the grader discards the candidate's),
    so a new package can only show as an import."""
    record_property("oracle", "specification")
    record_property("configurations", "cpu-1")
    record_property("tolerance", "exact (module names)")
    record_property("why", "TASK.md forbids new dependencies; a module the grader's image "
                    "happens to hold would otherwise run here and fail on the user's install")
    base = baseline_dir()
    assert base is not None, "the judge has no pristine baseline (GRADING_BASELINE)"
    new, problems = source_facts.new_dependencies(workdir(), base)
    record_property("new_imports", str({m: sorted(f) for m, f in sorted(new.items())}))
    assert not problems, f"files the judge could not parse for their imports: {problems[:4]}"
    assert not new, "modules neither the standard library, the tree's own nor the baseline's: " + \
        "; ".join(f"{m} (imported by {', '.join(sorted(f)[:3])})" for m, f in sorted(new.items()))


@observed_in(JUDGE, OUTSIDE)
def test_default_pattern_at_other_options_is_baseline_bitwise(
    other_options_runs: dict[str, tuple[Any, Any]], runs_dir: Any, record_property: Any
) -> None:
    """With no --layer-pattern and every other option at a non-default value (--seed 3
    --global-batch 8 --lr 1e-3 --warmup-steps 2 --dtype fp64 --n-layers 3), 6 steps of the
    graded tree equal the pristine baseline's bit for bit (metrics.jsonl, final model and
    optimizer state, and every entry of the baseline's summary.json but the wall time, the
    held-out loss included) on cpu-1, gloo-ddp-2 and gloo-fsdp-2: a path the feature changed
    that runs only at another value of an option shows, and so does a held-out evaluation that
    slices the set wrongly only when there are two ranks. On a difference, each option is run
    alone at its other value to name the one whose path departs."""
    record_property("oracle", "reference")
    record_property("configurations", ",".join(OTHER_OPTIONS_CONFIGS))
    record_property("tolerance", 0.0)
    record_property("why", "TASK.md: the all-A model is exactly today's (parameters, keys, "
                    "initial values and trajectory) whatever the options; the baseline runs in "
                    "the same process layout, so any difference is the feature's")
    departed = {}
    for config, (base, cand) in other_options_runs.items():
        base.require(record_property)
        cand.require(record_property)
        differs = _departure(base, cand)
        record_property(f"{config}_departure", differs or "none")
        if differs:
            departed[config] = differs
    if not departed:
        return
    # Name the option: each alone at its other value, on the first configuration that departed
    # (only a failing candidate pays for these runs).
    config, differs = next(iter(departed.items()))
    culprits = []
    for option, args in OTHER_OPTIONS.items():
        b, c = other_options_pair(runs_dir, config, args, option.strip("-"))
        b.require(record_property)
        c.require(record_property)
        if _departure(b, c):
            culprits.append(" ".join(args))
    record_property(f"{config}_options_departing_alone", str(culprits))
    named = (f"departs with {', '.join(culprits)} alone" if culprits else
             "departs only with the options combined")
    raise AssertionError(f"with no pattern the graded tree is not the baseline at non-default "
                         f"options on {', '.join(departed)} ({config}: {differs}); on {config} "
                         f"it {named}")


def _departure(base: Any, cand: Any) -> str:
    """'' when the two runs are bitwise equal (metrics.jsonl, final model and optimizer state,
    and summary.json as :func:`_summary_departure` reads it), else what differs first."""
    if (cand.out / "run" / "metrics.jsonl").read_bytes() != \
            (base.out / "run" / "metrics.jsonl").read_bytes():
        return "metrics.jsonl (losses, LRs) differs"
    got, want = cand.final(), base.final()
    if not isinstance(got.get("model"), dict) or list(got["model"]) != list(want["model"]):
        return "the final state's model keys differ"
    for part in ("model", "optim"):
        diff = tree_max_diff(got.get(part), want[part])
        if not within(diff, 0.0):
            where = f" (worst {worst_key(got[part], want[part])})" if part == "model" else ""
            return f"final {part} differs by {diff:g}{where}"
    written = _summary_departure(base.summary(), cand.summary())
    return f"summary.json {written}" if written else ""


# The one summary.json entry that differs from run to run of the same code.
WALL_TIME_KEY = "train_s"


def _summary_departure(base: Any, cand: Any, where: str = "") -> str:
    """'' when ``cand`` holds every entry of the baseline's summary with the same value and type
    (nested objects entry by entry; the wall time aside), else the first entry that departs. An
    entry the graded tree adds (the pattern in ``model``) is not judged here. The held-out loss
    is one of them: an evaluation that slices the held-out set wrongly on two ranks leaves every
    training output as it was."""
    if not isinstance(cand, dict):
        return f"{where or 'the summary'} is not a JSON object"
    for key, want in base.items():
        if not where and key == WALL_TIME_KEY:
            continue
        name = f"{where}.{key}" if where else str(key)
        if key not in cand:
            return f"lacks {name!r}"
        got = cand[key]
        if isinstance(want, dict):
            nested = _summary_departure(want, got, name)
            if nested:
                return nested
        elif type(got) is not type(want) or got != want:
            return f"has {name} = {got!r}, the baseline's is {want!r}"
    return ""


@observed_in(JUDGE, OUTSIDE)
def test_python_api_at_defaults_is_baseline_bitwise(api_default_runs: tuple[Any, Any],
                                                    record_property: Any) -> None:
    """``run(TrainConfig(out=DIR))`` through the Python API with nothing else set (cpu-1, the
    package's own defaults: seed 0, 200 steps, global batch 16, AdamW's settings, fp32, the
    default model) writes bit for bit the pristine baseline's metrics.jsonl, final model and
    optimizer state, and every entry of its summary.json but the wall time. train.py passes
    every setting explicitly, so only this run stands on ``TrainConfig``'s defaults."""
    record_property("oracle", "reference")
    record_property("configurations", "cpu-1")
    record_property("tolerance", 0.0)
    record_property("why", "TASK.md fixes seed 0, 200 steps, global batch 16, AdamW (lr 3e-3, "
                    "weight decay 0.01), 10 warmup steps and fp32 (\"do not change these "
                    "defaults\") and keeps TrainConfig, run and train working; the all-A model "
                    "is the baseline's, so the same process gives the same bits")
    base, cand = api_default_runs
    base.require(record_property)
    cand.require(record_property)
    differs = _departure(base, cand)
    record_property("departure", differs or "none")
    assert not differs, (f"train(TrainConfig()) at its defaults is not the baseline's run: "
                         f"{differs}")


# The data module whose public definitions TASK.md fixes ("do not change ... the data source or
# the held-out set"), relative to a tree's root.
DATA_MODULE = "hybridlm/data.py"


@observed_in(JUDGE)
def test_data_source_and_heldout_set_unchanged(record_property: Any) -> None:
    """The data source and the held-out set keep the pristine baseline's public definitions in
    ``hybridlm/data.py``: every public function, class, method and dataclass field of the
    baseline's is there with the same parameters and the same default expressions (the
    source's vocabulary and length, ``heldout_batches``' count and size). The training runs are
    held to the judge's replay on the pristine data, but train.py passes the vocabulary, the
    length and the count explicitly, so a changed default shows only to a caller who relies on
    it; the judge reads both files as text and runs neither."""
    record_property("oracle", "specification")
    record_property("configurations", "cpu-1")
    record_property("tolerance", "exact (parameter names and default expressions)")
    record_property("why", "TASK.md: \"Do not change these defaults, the data source or the "
                    "held-out set\"; MarkovSource() and heldout_batches(source) at their "
                    "defaults are the source and the set")
    base = baseline_dir()
    assert base is not None, "the judge has no pristine baseline (GRADING_BASELINE)"
    want = source_facts.public_signatures(base / DATA_MODULE)
    assert want, "the baseline's data module defines nothing public (the check is broken)"
    path = workdir() / DATA_MODULE
    assert path.is_file() and not path.is_symlink(), f"the graded tree has no {DATA_MODULE}"
    got = source_facts.public_signatures(path)
    changed = {name: {"baseline": sig, "graded": got.get(name, "missing")}
               for name, sig in want.items() if got.get(name) != sig}
    record_property("definitions_compared", len(want))
    record_property("changed", str(changed)[:2000] or "none")
    assert not changed, f"{DATA_MODULE} changes the data source or the held-out set: " + \
        "; ".join(f"{name}: {diff['graded']} (baseline: {diff['baseline']})"
                  for name, diff in list(changed.items())[:4])
