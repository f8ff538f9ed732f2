"""The applicability policy's decision over recorded checks: what any policy run violates
is dropped, with every run that violated it, and nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from diagnostics.checking import invariant_id
from harness.errors import HarnessError
from harness.traincheck.reference import (
    FrozenConfig,
    PolicyRun,
    RunSummary,
    apply_policy,
)


def _invariant(n: int) -> dict[str, Any]:
    return {"relation": "APIContainRelation", "params": [{"api": f"f{n}"}],
            "text_description": f"f{n} always calls g", "precondition": {}}


def _violation(inv: dict[str, Any]) -> dict[str, Any]:
    return {"id": invariant_id(inv), "relation": inv["relation"],
            "rule": inv["text_description"], "first_step": 1, "ranks": [1]}


def test_every_rule_a_policy_run_violates_is_dropped_with_its_runs() -> None:
    learned = [_invariant(n) for n in range(5)]
    seed_noise, rank_local, intended, both = learned[1], learned[2], learned[3], learned[4]
    decision = apply_policy(learned, [
        ("healthy", 10, [_violation(seed_noise), _violation(both)]),
        ("healthy", 20, [_violation(rank_local)]),
        ("reference", 0, [_violation(intended), _violation(both)]),
        ("reference", 10, []),
    ])
    assert decision.kept == [learned[0]]
    assert set(decision.dropped) == {invariant_id(i) for i in learned[1:]}
    by = {k: v["violated_by"] for k, v in decision.dropped.items()}
    assert by[invariant_id(seed_noise)] == ["healthy baseline at seed 10"]
    assert by[invariant_id(both)] == ["healthy baseline at seed 10",
                                      "reference solution at seed 0"]
    reasons = {k: v["reason"] for k, v in decision.dropped.items()}
    assert reasons[invariant_id(intended)].startswith("violated by the reference solution")
    assert reasons[invariant_id(both)].startswith("violated by a healthy baseline run")


def test_clean_policy_runs_keep_everything() -> None:
    learned = [_invariant(n) for n in range(3)]
    decision = apply_policy(learned, [("healthy", 10, []), ("reference", 0, [])])
    assert decision.kept == learned and decision.dropped == {}


def test_a_violation_of_a_rule_never_learned_is_refused() -> None:
    learned = [_invariant(0)]
    with pytest.raises(HarnessError, match="not in the learned set"):
        apply_policy(learned, [("healthy", 10, [_violation(_invariant(9))])])


def test_a_reference_frozen_under_the_one_control_policy_still_reads() -> None:
    run = RunSummary(variant="baseline", config="cpu-1", seed=0, traced=True, outcome="ok",
                     wall_s=3.0)
    legacy = FrozenConfig.model_validate({
        "config": "cpu-1", "invariants_file": "a", "invariants_sha256": "0", "control_file": "b",
        "control_sha256": "0", "n_learned": 2, "n_dropped": 0, "n_kept": 2,
        "kept_by_relation": {}, "control_violations": [], "learn_run": run.model_dump(),
        "control_run": run.model_dump(), "applicability_run": run.model_dump(),
        "infer_s": 5.0, "check_s": [1.0, 2.0]})
    assert len(legacy.runs()) == 3 and legacy.check_seconds() == 3.0
    current = legacy.model_copy(update={
        "control_run": None, "applicability_run": None, "check_s": [],
        "policy_runs": [PolicyRun(role="healthy", run=run, violated_ids=[], check_s=4.0)]})
    assert len(current.runs()) == 2 and current.check_seconds() == 4.0
