"""An attempt verifies only as it was recorded: every file the manifest lists, and the diff,
final tree and snapshots against the digests their transcript events recorded. Nothing
re-blesses a changed file: a manifest written again over it still fails, and a grading adds
entries to the manifest but never changes one."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.records.attempt import (
    GradeSummary,
    extend_manifest,
    read_grades,
    write_grade_summary,
    write_manifest,
    write_record,
)
from harness.records.verify import require_verified, verify_records
from tests.attempts import finished_attempt


def test_a_recorded_attempt_verifies(tmp_path: Path) -> None:
    verdict = verify_records(finished_attempt(tmp_path / "a"))
    assert verdict.ok and verdict.files_checked, verdict


@pytest.mark.parametrize("rel", ["session.json", "submission.diff", "final/a.py",
                                 "baseline/a.py", "snapshots/0001.diff", "transcript.jsonl"])
def test_any_listed_file_changed_fails_and_is_named(tmp_path: Path, rel: str) -> None:
    attempt = finished_attempt(tmp_path / "a")
    target = attempt / rel
    target.write_bytes(target.read_bytes() + b" ")
    verdict = verify_records(attempt)
    assert not verdict.ok
    # The transcript is checked first, by its chain; every other file by its manifest entry.
    assert (rel in (verdict.error or "")) or (rel == "transcript.jsonl"), verdict.error
    with pytest.raises(HarnessError, match="does not verify"):
        require_verified(attempt)


@pytest.mark.parametrize("rel", ["submission.diff", "final/a.py", "snapshots/0001.diff"])
def test_a_manifest_written_again_over_a_changed_file_does_not_bless_it(
    tmp_path: Path, rel: str
) -> None:
    attempt = finished_attempt(tmp_path / "a")
    (attempt / rel).write_bytes(b"garbage\n")
    write_manifest(attempt)  # what a grading used to do after grading the garbage
    verdict = verify_records(attempt)
    assert not verdict.ok
    name = "final/" if rel.startswith("final/") else rel
    assert name in (verdict.error or "") and "transcript recorded" in (verdict.error or "")


def test_an_unlisted_file_beside_the_listed_ones_fails(tmp_path: Path) -> None:
    attempt = finished_attempt(tmp_path / "a")
    (attempt / "final" / "planted.py").write_text("print('hi')\n")
    verdict = verify_records(attempt)
    assert not verdict.ok and "final/planted.py" in (verdict.error or "")


def test_a_grading_adds_entries_and_never_changes_one(tmp_path: Path) -> None:
    attempt = finished_attempt(tmp_path / "a")
    before = (attempt / "manifest.json").read_bytes()
    record_before = (attempt / "session.json").read_bytes()
    grade_dir = attempt / "grades" / "grade-1"
    grade_dir.mkdir(parents=True)
    summary = GradeSummary(verdict="complete", folder="grades/grade-1")
    write_grade_summary(grade_dir, summary)
    manifest = extend_manifest(attempt)
    assert "grades/grade-1/summary.json" in manifest["files"]
    assert (attempt / "session.json").read_bytes() == record_before
    assert read_grades(attempt) == [summary]
    assert verify_records(attempt).ok
    with pytest.raises(HarnessError, match="already exists"):
        write_grade_summary(grade_dir, summary)
    # A listed file that changed stops the extension, and the manifest stays as it was.
    listed = (attempt / "manifest.json").read_bytes()
    (attempt / "submission.diff").write_bytes(b"garbage\n")
    with pytest.raises(HarnessError, match=r"submission\.diff no longer matches"):
        extend_manifest(attempt)
    assert (attempt / "manifest.json").read_bytes() == listed != before


def test_study_session_resolves_to_the_attempt_the_study_counts(tmp_path: Path) -> None:
    from harness.records.attempt import read_record, resolve_attempt

    session = tmp_path / "runs" / "s" / "t-pair1-control"
    for n, (outcome, frozen) in enumerate([("submitted", True), ("harness_error", True),
                                           ("interrupted", True), ("submitted", False)], 1):
        folder = finished_attempt(session / f"attempt-{n}")
        record = read_record(folder).model_copy(update={
            "attempt": n, "outcome": outcome, "in_frozen_study": frozen,
            "status": "interrupted" if outcome == "interrupted" else "finished"})
        write_record(folder, record)
    # Not the latest (outside the study), nor the retried infrastructure failure.
    assert resolve_attempt("s/t-pair1-control", tmp_path / "runs") == session / "attempt-1"
