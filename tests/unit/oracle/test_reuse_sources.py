"""Which gradings may be copied into a snapshot grade, on attempts built with the harness's own
record writers: the classes an adversarial review (2026-12-05) broke the first version with.

A real copy, from real gradings of real sessions, is tests/integration/test_snapshots.py.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from grading.models import DiffInfo, GradeReport, RestoreInfo, SealInfo, count_outcomes
from harness.oracle import reuse
from harness.records.attempt import (
    SNAPSHOT_GRADES_NAME,
    GradeSummary,
    SessionRecord,
    TranscriptHead,
    atomic_write,
    extend_manifest,
    new_numbered_dir,
    write_grade_summary,
    write_manifest,
    write_record,
)
from harness.records.grades import SnapshotGrade, SnapshotGrades
from harness.records.transcript import TranscriptWriter
from harness.records.verify import require_verified

DIFF = b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
SHA = hashlib.sha256(DIFF).hexdigest()
SAME = {"task_id": "tiny", "baseline_tree_sha256": "b" * 64, "hidden_tree_sha256": "h" * 64,
        "grader_source_sha256": "g" * 64}
KEY = reuse.GradingInputs(grader_image_id="sha256:" + "1" * 64, packet_yaml_sha256="p" * 64,
                          diff_sha256=SHA, **SAME)


def attempt(study: Path, session: str, *, study_name: str | None = None) -> Path:
    folder = study / session / "attempt-1"
    (folder / "snapshots").mkdir(parents=True)
    (folder / "snapshots/0001.diff").write_bytes(DIFF)
    with TranscriptWriter(folder / "transcript.jsonl") as writer:
        writer.append("snapshot", {"index": 1, "trigger": "submit", "call_id": "c1",
                                   "diff": "snapshots/0001.diff", "sha256": SHA,
                                   "bytes": len(DIFF), "duration_s": 0.1})
        head = TranscriptHead(events=writer.next_seq, head=writer.last_hash)
    write_record(folder, SessionRecord(
        study=study_name or study.name, session_id=session, attempt=1, task="tiny", pair=1,
        arm="control", seed=1, model="m", packet_dir="/nonexistent/p",
        hidden_dir="/nonexistent/h", image="i", image_id="i", status="finished",
        outcome="submitted", harness_pid=1, host="h", started_at="2026-01-01T00:00:00Z",
        transcript=head))
    write_manifest(folder)
    require_verified(folder)
    return folder


def grade_json(submission_id: str) -> bytes:
    return GradeReport(
        submission_id=submission_id, task_id="tiny", verdict="complete", contracts=[],
        counts=count_outcomes([]), diff=DiffInfo(sha256=SHA, size_bytes=4, empty=False,
                                                 applied=True),
        restore=RestoreInfo(), started_at="t", finished_at="t", duration_s=1.0,
        grader_source_sha256=SAME["grader_source_sha256"],
        baseline_tree_sha256=SAME["baseline_tree_sha256"],
        hidden_tree_sha256=SAME["hidden_tree_sha256"],
        seal=SealInfo(judge_uid=0, candidate_uid=2000), python_version="3.11",
        torch_version=None).model_dump_json().encode()


def grading(folder: Path, *, snapshot: bool = True, named: bool = True,
            packet_sha: str | None = "p" * 64, extra: dict[str, object] | None = None) -> Path:
    """What grade_diff leaves, then what grade_attempt / grade_snapshots add when it finished:
    the record naming it and the manifest's new entries."""
    out = new_numbered_dir(folder / "grades" / ("snapshots" if snapshot else ""), "grade")
    submission = hashlib.sha256(str(out).encode()).hexdigest()[:32]
    (out / "grader-output.log").write_text("log\n")
    (out / "out").mkdir()
    (out / "out/grade.json").write_bytes(grade_json(submission))
    record = {"grader_image_id": KEY.grader_image_id, "submission_id": submission,
              "graded_at": "t", "expected": {"submission_id": submission, "diff_sha256": SHA,
                                             **SAME},
              "exit_code": 0, "timed_out": False, "duration_s": 1.0, **(extra or {})}
    if packet_sha is not None:
        record["packet_yaml_sha256"] = packet_sha
    (out / "grader.json").write_text(json.dumps(record))
    write_manifest(out)
    rel = out.relative_to(folder).as_posix()
    if named and snapshot:
        entry = SnapshotGrade(index=1, trigger="submit", call_id="c1", diff_sha256=SHA,
                              folder=rel, verdict="complete")
        atomic_write(folder / SNAPSHOT_GRADES_NAME, SnapshotGrades(
            graded_at="t", snapshots=[entry]).model_dump_json().encode())
    elif named:
        write_grade_summary(out, GradeSummary(verdict="complete", folder=rel))
    extend_manifest(folder)
    return out


def found(study: Path, exclude: Path, key: reuse.GradingInputs = KEY) -> Path | None:
    hit = reuse.find_reusable(study, study.name, key, exclude=exclude)
    return hit[0] if hit else None


def test_a_named_grading_of_the_same_inputs_is_a_source_and_copies_byte_for_byte(
        tmp_path: Path) -> None:
    study = tmp_path / "study"
    source = grading(attempt(study, "a"))
    target = attempt(study, "c")
    assert found(study, exclude=target) == source
    final = grading(attempt(study, "b"), snapshot=False)
    assert found(study, exclude=target) == final  # a final grade is a source too
    hit = reuse.find_reusable(study, "study", KEY, exclude=target)
    assert hit is not None and "summary.json" not in hit[1]  # the attempt's record, not copied
    hit = reuse.find_reusable(study, "study", KEY, exclude=final.parents[1])
    assert hit is not None
    out = new_numbered_dir(target / "grades/snapshots", "grade")
    reuse.copy_grading(hit[0], hit[1], study, KEY, out)
    for rel in hit[1]:
        assert (out / rel).read_bytes() == (source / rel).read_bytes()
    said = reuse.ReusedGrading.model_validate_json((out / reuse.REUSED_RECORD).read_text())
    assert said.source == "a/attempt-1/grades/snapshots/grade-1" and said.inputs == KEY


def test_a_grading_its_attempt_never_named_is_no_source_even_once_listed(tmp_path: Path) -> None:
    """A grading interrupted after the grader exited 0, or added by hand, gets listed by the
    next grading of its attempt (extend_manifest): still not a source."""
    study = tmp_path / "study"
    orphan_attempt = attempt(study, "b")
    grading(orphan_attempt, named=False)
    grading(orphan_attempt, snapshot=False, extra={"error": "the grader timed out",
                                                   "exit_code": None})
    assert found(study, exclude=attempt(study, "c")) is None


def test_a_copy_is_no_source_whole_or_cut_short(tmp_path: Path) -> None:
    study = tmp_path / "study"
    grading(attempt(study, "z"))
    copier = attempt(study, "a")
    hit = reuse.find_reusable(study, "study", KEY, exclude=copier)
    assert hit is not None
    cut = new_numbered_dir(copier / "grades/snapshots", "grade")
    reuse.copy_grading(hit[0], {}, study, KEY, cut)  # cut short: only reused.json written
    for rel in hit[1]:  # ... then completed by hand, without reused.json, and listed
        (cut / rel).parent.mkdir(parents=True, exist_ok=True)
        (cut / rel).write_bytes((hit[0] / rel).read_bytes())
    (cut / reuse.REUSED_RECORD).unlink()
    extend_manifest(copier)
    assert found(study, exclude=attempt(study, "b")) == hit[0]  # z's, never a's


def test_a_link_fifo_or_unlisted_file_inside_a_grading_makes_it_no_source(
        tmp_path: Path) -> None:
    for case in ("link", "fifo", "unlisted-audit"):
        study = tmp_path / case / "study"
        source = grading(attempt(study, "a"))
        if case == "link":
            outside = tmp_path / case / "outside.json"
            outside.write_bytes((source / "out/grade.json").read_bytes())
            (source / "out/grade.json").unlink()
            (source / "out/grade.json").symlink_to(outside)
        elif case == "fifo":
            os.mkfifo(source / "out/pipe")
        else:
            (source / "audit").mkdir()
            (source / "audit/extra.json").write_text("{}")
        assert found(study, exclude=attempt(study, "c")) is None, case


def test_a_grading_changed_after_its_manifest_or_of_other_inputs_is_no_source(
        tmp_path: Path) -> None:
    study = tmp_path / "study"
    changed = grading(attempt(study, "a"))
    (changed / "grader-output.log").write_text("edited\n")
    grading(attempt(study, "b"), packet_sha="q" * 64)  # another packet.yaml
    grading(attempt(study, "c"), packet_sha=None)  # recorded before the packet's digest was
    grading(attempt(study, "d", study_name="another-study"))  # another study's record
    assert found(study, exclude=attempt(study, "e")) is None


def test_records_that_cannot_be_read_are_skipped_never_a_traceback(tmp_path: Path) -> None:
    study = tmp_path / "study"
    source = grading(attempt(study, "a"))
    deep = b"[" * 30000 + b"]" * 30000  # under the size cap, too deep for the parser
    (source / "grader.json").write_bytes(deep)
    assert reuse.recorded_inputs(source) is None
    assert found(study, exclude=attempt(study, "c")) is None


def test_an_attempt_named_through_a_link_belongs_to_its_targets_study(tmp_path: Path) -> None:
    study = tmp_path / "runs/study"
    target = attempt(study, "a")
    grading(attempt(tmp_path / "home", "copied-for-inspection"))
    link = tmp_path / "latest"
    link.symlink_to(target)
    assert reuse.study_folder(link) == study.resolve()
    # The link's own parents hold a verified grading of the same inputs: never looked at.
    assert found(reuse.study_folder(link), exclude=link) is None
    assert found(tmp_path / "home", exclude=link) is not None


@pytest.mark.parametrize("changed", ["grader_image_id", "diff_sha256", "hidden_tree_sha256"])
def test_any_other_input_finds_nothing(tmp_path: Path, changed: str) -> None:
    study = tmp_path / "study"
    grading(attempt(study, "a"))
    other = KEY.model_copy(update={changed: "0" * 64})
    assert found(study, exclude=attempt(study, "c"), key=other) is None
