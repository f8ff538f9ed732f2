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

from grading import probe
from oracle_lib import PROBE, tree_max_diff, worst_key


def test_default_pattern_is_baseline_bitwise(
    baseline_cpu1: Any, candidate_default_cpu1: Any, record_property: Any
) -> None:
    """With no --layer-pattern, a 20-step cpu-1 run of the graded tree equals the pristine baseline's bit for bit (metrics.jsonl and final model and optimizer state)."""
    record_property("oracle", "reference")
    record_property("configurations", "cpu-1")
    record_property("tolerance", 0.0)
    record_property("why", "TASK.md: the all-A model has exactly today's parameters, keys, "
                    "initial values and trajectory; same process layout and thread count, so "
                    "any difference is a change in the model")
    baseline_cpu1.require(record_property)
    candidate_default_cpu1.require(record_property)
    base, cand = baseline_cpu1.final(), candidate_default_cpu1.final()
    assert list(cand["model"]) == list(base["model"]), "state-dict keys or their order changed"
    for part in ("model", "optim"):
        diff = tree_max_diff(cand[part], base[part], part)
        record_property(f"{part}_max_abs_diff", diff)
        if part == "model" and diff:
            record_property("worst_key", worst_key(cand["model"], base["model"])[0])
        assert diff == 0.0, f"{part} differs from the baseline by {diff}"
    base_metrics = (baseline_cpu1.out / "run" / "metrics.jsonl").read_text()
    cand_metrics = (candidate_default_cpu1.out / "run" / "metrics.jsonl").read_text()
    assert cand_metrics == base_metrics, "metrics.jsonl (losses, LRs) differs from the baseline"


def test_baseline_checkpoint_loads_into_all_attention(
    baseline_cpu1: Any, candidate_resumes_baseline: Any, record_property: Any
) -> None:
    """A pristine-baseline DCP checkpoint (step 10) resumes in the graded tree's default model and ends bitwise equal to the baseline's uninterrupted run; the baseline's final_state.pt loads strictly."""
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
        diff = tree_max_diff(resumed[part], base[part], part)
        record_property(f"{part}_max_abs_diff", diff)
        assert diff == 0.0, f"resumed-from-baseline {part} differs from the baseline by {diff}"
