"""What ``matrix status`` shows and ``matrix run`` decides from the records: a finished
attempt whose files changed is ``damaged`` (never launched again), an unreadable record is
``damaged`` too, and a grading cut short is ``interrupted``, to be graded again."""

from __future__ import annotations

from pathlib import Path

from harness.records.attempt import read_record
from harness.records.budget import Budget
from harness.study.freeze import LockedSession
from harness.study.matrix.rows import Verifier, session_row
from tests.attempts import finished_attempt

SESSION = LockedSession(order=1, session_id="t-pair1-control", task="t", pair=1,
                        arm="control", seed=1, model="scripted:x", cpus=2, gpus=0,
                        budget=Budget(wall_seconds=60), comparison="treatment-vs-control")


def row_for(attempt: Path, **extra: object):  # type: ignore[no-untyped-def]
    return session_row(SESSION, [(attempt, read_record(attempt))], 3, verifier=Verifier(),
                       alive=lambda _r: False, **extra)  # type: ignore[arg-type]


def test_a_verified_graded_attempt_is_finished(tmp_path: Path) -> None:
    row = row_for(finished_attempt(tmp_path / "attempt-1", graded=True))
    assert (row.state, row.next, row.verdict) == ("finished", "none", "complete")


def test_a_changed_file_makes_the_session_damaged_not_pending(tmp_path: Path) -> None:
    attempt = finished_attempt(tmp_path / "attempt-1", graded=True)
    (attempt / "submission.diff").write_bytes(b"garbage\n")
    row = row_for(attempt)
    assert (row.state, row.next) == ("damaged", "none")
    assert "submission.diff" in row.note


def test_an_unreadable_record_makes_the_session_damaged(tmp_path: Path) -> None:
    good = finished_attempt(tmp_path / "attempt-1", graded=True)
    row = row_for(good, unreadable=[(tmp_path / "attempt-2", "session.json is not JSON")])
    assert (row.state, row.next) == ("damaged", "none")
    assert "attempt 2 cannot be read" in row.note


def test_a_grading_cut_short_is_interrupted_and_graded_again(tmp_path: Path) -> None:
    attempt = finished_attempt(tmp_path / "attempt-1")
    (attempt / "grades" / "grade-1" / "out").mkdir(parents=True)  # killed before its summary
    row = row_for(attempt)
    assert (row.state, row.next) == ("interrupted", "grade")
    assert "grades/grade-1 has no summary" in row.note


def test_a_finished_row_names_its_attempt_and_what_it_sets_aside(tmp_path: Path) -> None:
    good = finished_attempt(tmp_path / "attempt-1", graded=True)
    row = row_for(good)
    assert row.counted == str(good) and row.set_aside == {}
    changed = finished_attempt(tmp_path / "other" / "attempt-1", graded=True)
    (changed / "submission.diff").write_bytes(b"garbage\n")
    row = row_for(changed, unreadable=[(tmp_path / "attempt-2", "session.json is not JSON")])
    assert row.counted is None
    assert row.set_aside == {
        1: "does not verify: submission.diff changed since the manifest was written",
        2: "its record cannot be read: session.json is not JSON"}


def test_an_ungraded_attempt_is_set_aside_until_graded(tmp_path: Path) -> None:
    row = row_for(finished_attempt(tmp_path / "attempt-1"))
    assert row.counted is None and row.set_aside == {1: "not graded yet"}
