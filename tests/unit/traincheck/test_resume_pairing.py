"""The resume pairing's learning and checking rules, on trace files in TrainCheck's format.

The real path (torchrun ranks traced by traincheck-collect) is in
tests/integration/test_traincheck_resume.py; here each rule of ``diagnostics.resume`` is
pinned on small hand-made traces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from diagnostics.checking import invariant_id
from diagnostics.resume import RELATION, check, learn, observations, rule


def _record(rank: int, step: int, name: str, **attributes: Any) -> dict[str, Any]:
    return {"var_name": name, "var_type": "diagnostics.state.rng", "process_id": 10 + rank,
            "thread_id": 1, "meta_vars": {"rank": rank, "step": step},
            "type": "state_change", "attributes": attributes, "time": 1}


def _trace(folder: Path, records: list[dict[str, Any]], *, torn: bool = False) -> Path:
    folder.mkdir(parents=True)
    by_rank: dict[int, list[str]] = {}
    for record in records:
        by_rank.setdefault(record["meta_vars"]["rank"], []).append(json.dumps(record))
    for rank, lines in by_rank.items():
        text = "\n".join(lines) + "\n" + ('{"var_name": "torn' if torn else "")
        (folder / f"trace_VAR_{10 + rank}_1.log").write_text(text)
    return folder


def _pair(tmp_path: Path, resumed_rng_rank1: int = 7, *, steps: tuple[int, ...] = (1, 2)
          ) -> tuple[Path, Path]:
    straight, resumed = [], []
    for step in (0, 1, 2):  # the straight run dumps every step; the resume starts at 1
        for rank in (0, 1):
            straight.append(_record(rank, step, "state.rng.torch", digest=7 + rank))
            straight.append(_record(rank, step, "state.lr.0", digest=100 + step))
            straight.append(_record(rank, step, "state.wall", digest=step * 31 + rank))
    for step in steps:
        for rank in (0, 1):
            rng = 7 if rank == 0 else resumed_rng_rank1
            resumed.append(_record(rank, step, "state.rng.torch", digest=rng))
            resumed.append(_record(rank, step, "state.lr.0", digest=100 + step))
            resumed.append(_record(rank, step, "state.wall", digest=step * 31 + rank + 1))
    return (_trace(tmp_path / "straight", straight, torn=True),
            _trace(tmp_path / "resumed", resumed))


def test_learn_keeps_what_the_healthy_pair_preserves(tmp_path: Path) -> None:
    straight, resumed = _pair(tmp_path / "healthy", resumed_rng_rank1=8)
    names = {(r["var_name"], r["attribute"]) for r in learn(straight, resumed)}
    # The value that differs between the runs in healthy code is not a rule.
    assert names == {("state.rng.torch", "digest"), ("state.lr.0", "digest")}
    assert all(r["relation"] == RELATION for r in learn(straight, resumed))


def test_check_names_the_rule_its_first_step_and_ranks(tmp_path: Path) -> None:
    rules = [rule("state.rng.torch", "digest"), rule("state.lr.0", "digest"),
             rule("state.optim.model.w.exp_avg", "digest")]
    straight, resumed = _pair(tmp_path / "fault", resumed_rng_rank1=7)  # rank 1 got rank 0's
    result = check(straight, resumed, rules)
    assert result["n_checked"] == 3 and result["n_failed"] == 1
    # A rule with nothing to compare is not triggered, never a pass or a violation.
    assert result["n_not_triggered"] == 1
    (violation,) = result["violations"]
    assert violation["id"] == invariant_id(rules[0])
    assert violation["first_step"] == 1 and violation["ranks"] == [1]
    assert violation["rule"].startswith("state.rng.torch.digest is preserved by resume")


def test_only_steps_both_runs_took_are_compared(tmp_path: Path) -> None:
    # The resumed run died after its first step: step 2 is compared nowhere, step 1 still is.
    straight, resumed = _pair(tmp_path / "short", resumed_rng_rank1=8, steps=(1,))
    result = check(straight, resumed, [rule("state.rng.torch", "digest")])
    assert result["violations"] == [] and result["n_not_triggered"] == 0
    seen = observations(resumed)
    assert sorted(seen[(1, "state.rng.torch", "digest")]) == [1]


def test_records_without_rank_or_step_are_not_observations(tmp_path: Path) -> None:
    bad = _record(0, 1, "state.rng.torch", digest=1)
    bad["meta_vars"] = {"step": 1}  # no rank: TrainCheck's record before the entry tags it
    folder = _trace(tmp_path / "t", [_record(0, 1, "state.lr.0", digest=2)])
    (folder / "trace_VAR_99_1.log").write_text(json.dumps(bad) + "\n")
    assert set(observations(folder)) == {(0, "state.lr.0", "digest")}
