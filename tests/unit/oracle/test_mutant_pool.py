"""The mutant pool's scheduling: every mutant handed out once, a failure ends the pool.

The containers are stood in for (``_sandbox``, ``send_inputs``, ``_grade_one``): what is tested
here is the hand-out and shutdown logic between the threads; the real containers are
exercised by ``tests/integration/test_oracle_strength.py``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from grading.mutant_report import MutantResult
from harness.oracle import mutant_pool
from harness.oracle.grade import GraderFailed


class FakeBox:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = threading.Event()

    def removing(self) -> None:
        """Called as the pool removes it, once ``closed`` is set: a test may make it slow."""


@pytest.fixture
def boxes(monkeypatch: pytest.MonkeyPatch) -> list[FakeBox]:
    made: list[FakeBox] = []

    @contextmanager
    def fake_sandbox(name_hint: str, run_id: str) -> Iterator[FakeBox]:
        box = FakeBox(name_hint)
        made.append(box)
        try:
            yield box
        finally:
            box.closed.set()  # as removing the container ends whatever runs in it
            box.removing()

    monkeypatch.setattr(mutant_pool, "_sandbox", fake_sandbox)
    monkeypatch.setattr(mutant_pool, "send_inputs", lambda box, entries: None)
    return made


def _inputs(tmp_path: Path) -> mutant_pool.MutantInputs:
    return mutant_pool.MutantInputs(
        baseline=tmp_path, packet_yaml=tmp_path / "p.yaml", hidden=tmp_path,
        reference_diff=tmp_path / "r.diff", mutants=tmp_path, grader_sha256="g",
        hidden_sha256="h")


def test_every_mutant_is_graded_once_by_whichever_worker_is_free(
    tmp_path: Path, boxes: list[FakeBox], monkeypatch: pytest.MonkeyPatch
) -> None:
    graded_by: dict[str, str] = {}
    first_held = threading.Event()

    def grade_one(inputs: Any, box: FakeBox, n: int, mutant_id: str, out_dir: Path,
                  timeout_s: float) -> MutantResult:
        if mutant_id == "m0":
            # A long grade on one worker: the other must take every other mutant meanwhile.
            assert first_held.wait(30)
        graded_by[mutant_id] = box.name
        if len(graded_by) == 5:
            first_held.set()
        return MutantResult(id=mutant_id, status="killed")

    monkeypatch.setattr(mutant_pool, "_grade_one", grade_one)
    got: list[str] = []
    ids = [f"m{k}" for k in range(6)]
    mutant_pool.grade_in_pool(_inputs(tmp_path), tmp_path / "ref.json", ids, tmp_path,
                              workers=2, per_mutant_s=60, on_result=lambda r: got.append(r.id),
                              log=lambda _m: None)
    assert sorted(got) == ids and got[-1] == "m0"
    held_by = graded_by["m0"]
    assert {w for m, w in graded_by.items() if m != "m0"} == {b.name for b in boxes} - {held_by}
    assert all(b.closed.is_set() for b in boxes)


def _pool_until_bad_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          grade_one: Any, later: str) -> list[str]:
    """Mutants "slow", "bad", then two more on two workers, graded by ``grade_one``, which
    fails "bad": the pool must raise that failure. Returns the results reported."""
    monkeypatch.setattr(mutant_pool, "_grade_one", grade_one)
    got: list[str] = []
    with pytest.raises(GraderFailed, match="mutant bad"):
        mutant_pool.grade_in_pool(_inputs(tmp_path), tmp_path / "ref.json",
                                  ["slow", "bad", f"{later}-1", f"{later}-2"], tmp_path,
                                  workers=2, per_mutant_s=60,
                                  on_result=lambda r: got.append(r.id), log=lambda _m: None)
    return got


def test_a_failing_worker_ends_the_pool_without_waiting_for_the_others(
    tmp_path: Path, boxes: list[FakeBox], monkeypatch: pytest.MonkeyPatch
) -> None:
    handed: list[str] = []
    removed_while_grading: list[bool] = []
    slow_done = threading.Event()

    def grade_one(inputs: Any, box: FakeBox, n: int, mutant_id: str, out_dir: Path,
                  timeout_s: float) -> MutantResult:
        handed.append(mutant_id)
        if mutant_id == "bad":
            raise GraderFailed("the grader of mutant bad exited with code 2", "see its log")
        # Runs until its container is removed: the pool must not wait for it to finish.
        removed_while_grading.append(box.closed.wait(60))
        slow_done.set()
        raise RuntimeError("container removed")

    got = _pool_until_bad_fails(tmp_path, monkeypatch, grade_one, "never")
    assert got == [] and "never-1" not in handed and "never-2" not in handed
    assert slow_done.wait(60) and removed_while_grading == [True]
    assert all(b.closed.is_set() for b in boxes)


def test_a_result_that_comes_back_after_a_failure_is_neither_reported_nor_followed(
    tmp_path: Path, boxes: list[FakeBox], monkeypatch: pytest.MonkeyPatch
) -> None:
    failed = threading.Event()
    handed: list[str] = []

    def grade_one(inputs: Any, box: FakeBox, n: int, mutant_id: str, out_dir: Path,
                  timeout_s: float) -> MutantResult:
        handed.append(mutant_id)
        if mutant_id == "bad":
            failed.set()
            raise GraderFailed("the grader of mutant bad exited with code 2", "see its log")
        if mutant_id == "slow":
            # Finishes after the other worker failed, once the pool has begun removing the
            # containers (the other one is gone, its own may still be up).
            assert failed.wait(30)
            other = next(b for b in boxes if b is not box)
            assert other.closed.wait(30)
            slow_returned.set()
        return MutantResult(id=mutant_id, status="killed")

    slow_returned = threading.Event()

    def slow_to_remove(box: FakeBox) -> None:
        # Removing a real container takes seconds: a late result must not slip into them.
        slow_returned.wait(5)
        threading.Event().wait(0.2)

    monkeypatch.setattr(FakeBox, "removing", slow_to_remove)
    got = _pool_until_bad_fails(tmp_path, monkeypatch, grade_one, "next")
    assert got == [] and sorted(handed) == ["bad", "slow"]


def test_the_grader_is_told_to_start_mutants_cold_only_when_asked(tmp_path: Path) -> None:
    warm = _inputs(tmp_path)
    cold = dataclasses.replace(warm, warm_start=False)
    assert "--cold-start" not in warm.command("/out", "--only", "m")
    assert cold.command("/out", "--only", "m")[-3:] == ["--cold-start", "--only", "m"]
    # Warm: the worker's daemons listen in a folder outside --work (which each run removes),
    # so the next mutant's grade finds them; cold: no daemons.
    daemons = warm.command("/out")[warm.command("/out").index("--warm-daemon-dir") + 1]
    work = warm.command("/out")[warm.command("/out").index("--work") + 1]
    assert not daemons.startswith(work + "/")
    assert "--warm-daemon-dir" not in cold.command("/out")


def test_the_reference_is_graded_in_parts_side_by_side_and_merged(
    tmp_path: Path, boxes: list[FakeBox], monkeypatch: pytest.MonkeyPatch
) -> None:
    from grading.mutant_report import MutantsReport

    asked: dict[tuple[int, int] | None, str] = {}
    both_running = threading.Barrier(2, timeout=30)

    def grade_part(inputs: Any, box: FakeBox, out_dir: Path, part: tuple[int, int] | None,
                   timeout_s: float) -> MutantsReport:
        asked[part] = box.name
        both_running.wait()  # each part waits for the other: they run at the same time
        return MutantsReport(task_id="t", reference_verdict="incomplete",
                             reference_duration_s=10.0, hidden_test_timeout_s=60.0,
                             grader_source_sha256="g", hidden_tree_sha256="h",
                             reference_parts=2)

    merged_from: list[list[MutantsReport]] = []

    def merge(parts: list[MutantsReport], packet: Any) -> MutantsReport:
        merged_from.append(parts)
        return parts[0].model_copy(update={"reference_verdict": "complete"})

    monkeypatch.setattr(mutant_pool, "_grade_reference_part", grade_part)
    monkeypatch.setattr(mutant_pool, "merge_reference_parts", merge)
    monkeypatch.setattr(mutant_pool, "load_packet_spec", lambda path: None)
    header = mutant_pool.grade_reference(_inputs(tmp_path), tmp_path, timeout_s=60, parts=2,
                                         log=lambda _m: None)
    assert header.reference_verdict == "complete" and len(merged_from[0]) == 2
    # One container per part, each removed when done.
    assert set(asked) == {(0, 2), (1, 2)} and len(set(asked.values())) == 2
    assert all(b.closed.is_set() for b in boxes)


def test_a_failing_reference_part_removes_the_other_parts_container(
    tmp_path: Path, boxes: list[FakeBox], monkeypatch: pytest.MonkeyPatch
) -> None:
    removed_while_grading: list[bool] = []

    def grade_part(inputs: Any, box: FakeBox, out_dir: Path, part: tuple[int, int] | None,
                   timeout_s: float) -> Any:
        if part == (1, 2):
            raise GraderFailed("the reference's grade exited with code 2", "see its log")
        removed_while_grading.append(box.closed.wait(60))
        raise RuntimeError("container removed")

    monkeypatch.setattr(mutant_pool, "_grade_reference_part", grade_part)
    with pytest.raises(GraderFailed, match="exited with code 2"):
        mutant_pool.grade_reference(_inputs(tmp_path), tmp_path, timeout_s=60, parts=2,
                                    log=lambda _m: None)
    assert all(b.closed.is_set() for b in boxes)
    for _ in range(600):
        if removed_while_grading:
            break
        threading.Event().wait(0.05)
    assert removed_while_grading == [True]
