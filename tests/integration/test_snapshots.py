"""Trajectory snapshots for real: a scripted agent solves, breaks and repairs the fixture task;
each snapshot is graded post hoc, blind, in its own grader container."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.oracle import reuse
from harness.paths import REPO_ROOT
from harness.records import events
from harness.records.attempt import (
    MANIFEST_NAME,
    SNAPSHOT_GRADES_NAME,
    TRANSCRIPT_NAME,
    read_record,
)
from harness.records.grades import SnapshotGrades
from harness.records.transcript import read_events
from harness.records.verify import verify_attempt
from harness.study.session import SessionOptions, run_session
from tests.conftest import write_script, write_study
from tests.helpers import harness

SOLVE = REPO_ROOT / "tests/fixtures/agents/tiny-regression-solve.yaml"
GOOD = "return min(1.0, (step + 1) / warmup_steps)"
BROKEN = "return min(1.0, step / warmup_steps)"  # off by one: the first step's lr is 0
WARMUP_CONTRACT = "test_lr_follows_linear_warmup"


def regression_and_repair() -> list[dict[str, Any]]:
    """The solve (with its public-test run and candidate run), then a regression checked with
    the public tests, then the repair and the submit."""
    steps = yaml.safe_load(SOLVE.read_text())["steps"]
    assert steps[-1]["tool"] == "submit"
    edit = "tinytrain/trainer.py"
    return [*steps[:-1],
            {"tool": "edit_file", "args": {"path": edit, "old": GOOD, "new": BROKEN}},
            {"tool": "run_public_tests", "args": {}},
            {"tool": "edit_file", "args": {"path": edit, "old": BROKEN, "new": GOOD}},
            steps[-1]]


# Two gradings in a row (four snapshots of two distinct diffs), then a second session whose
# gradings are copies: longer than one test's default.
@pytest.mark.timeout(1500)
def test_snapshots_show_the_regression_and_its_repair_at_the_right_events(
    tmp_path: Path,
) -> None:
    script = write_script(tmp_path, regression_and_repair())
    study = write_study(tmp_path, agent={"model": f"scripted:{script}"})
    # Not graded at the end: the submit snapshot is the final diff, graded below.
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                          log=lambda _m: None)
    written = [events.parse(e) for e in read_events(attempt / TRANSCRIPT_NAME)]
    snaps = [e for e in written if e.kind == "snapshot"]
    assert [s.data.trigger for s in snaps] == [  # type: ignore[attr-defined]
        "run_public_tests", "run_candidate", "run_public_tests", "submit"]
    for snap in snaps:  # each follows the call it captured, with that call's id
        call = next(e for e in reversed(written[:snap.seq]) if e.kind == "tool_call")
        assert call.seq == snap.seq - 1
        assert snap.data.call_id == call.data.id  # type: ignore[attr-defined]
        assert (attempt / snap.data.diff).is_file()  # type: ignore[attr-defined]
    manifest = json.loads((attempt / MANIFEST_NAME).read_text())
    assert {s.data.diff for s in snaps} <= set(manifest["files"])  # type: ignore[attr-defined]
    record = read_record(attempt)
    assert record.usage is not None and record.usage.harness_seconds > 0

    result = harness("grade", str(attempt), "--snapshots")
    assert result.returncode == 0, result.stdout + result.stderr
    graded = SnapshotGrades.model_validate_json((attempt / SNAPSHOT_GRADES_NAME).read_text())
    verdicts = [s.verdict for s in graded.snapshots]
    assert verdicts == ["complete", "complete", "incomplete", "complete"], graded
    broken = graded.snapshots[2]
    failing = {c for c, o in broken.contracts.items() if o != "pass"}
    assert any(WARMUP_CONTRACT in c for c in failing), failing
    # Only what the regression touches: the flag's validation still passes.
    assert not any("negative_warmup" in c for c in failing), failing
    assert all(o == "pass" for o in graded.snapshots[3].contracts.values())
    # The candidate run and the submit saw the code the first public-test run saw: one grading
    # serves the three, and the broken code had its own.
    first = graded.snapshots[0]
    assert [s.same_diff_as for s in graded.snapshots] == [None, first.index, None, first.index]
    assert len({s.folder for s in graded.snapshots}) == 2
    assert {s.diff_sha256 for s in graded.snapshots} == {first.diff_sha256, broken.diff_sha256}
    assert len(list((attempt / "grades" / "snapshots").glob("grade-*"))) == 2
    # Blind: the grader got an opaque id, never the session, arm or position.
    for snap in graded.snapshots:
        host_record = json.loads((attempt / snap.folder / "grader.json").read_text())
        assert record.session_id not in json.dumps(host_record["expected"])
    verdict = verify_attempt(attempt)
    assert verdict.ok and not verdict.notes, verdict

    # Another session of the study writes the same code: its snapshots' gradings are copies of
    # the ones above (same grader, task, baseline, hidden tree and diffs), named as such.
    again = run_session(SessionOptions(study_path=study, pair=1, arm="treatment", grade=False),
                        log=lambda _m: None)
    result = harness("grade", str(again), "--snapshots")
    assert result.returncode == 0, result.stdout + result.stderr
    copied = SnapshotGrades.model_validate_json((again / SNAPSHOT_GRADES_NAME).read_text())
    assert [s.verdict for s in copied.snapshots] == verdicts
    study_dir = attempt.parent.parent
    sources = {s.diff_sha256: (attempt / s.folder).relative_to(study_dir).as_posix()
               for s in graded.snapshots if s.same_diff_as is None}
    assert {s.reused_from for s in copied.snapshots} == set(sources.values())
    for copy in copied.snapshots:
        assert copy.reused_from == sources[copy.diff_sha256]
        source = study_dir / copy.reused_from
        assert (again / copy.folder / "out/grade.json").read_bytes() == \
            (source / "out/grade.json").read_bytes()
        said = json.loads((again / copy.folder / "reused.json").read_text())
        assert said["source"] == copy.reused_from and said["inputs"]["diff_sha256"] == \
            copy.diff_sha256
    verdict = verify_attempt(again)
    assert verdict.ok and not verdict.notes, verdict

    # A source whose files no longer match its attempt's manifest is never copied; nor is a
    # grading the caller asked not to reuse: both grade afresh (not run here, shown by lookup).
    broken_source = study_dir / sources[broken.diff_sha256]
    key = reuse.recorded_inputs(broken_source)
    assert key is not None and key.diff_sha256 == broken.diff_sha256
    assert reuse.find_reusable(study_dir, read_record(attempt).study, key,
                               exclude=again) is not None
    log = broken_source / "grader-output.log"
    log.write_bytes(log.read_bytes() + b"edited\n")
    assert reuse.find_reusable(study_dir, read_record(attempt).study, key, exclude=again) is None
    # The copy is a copy: it is never itself a source.
    assert reuse.find_reusable(study_dir, read_record(attempt).study, key,
                               exclude=attempt) is None


def test_a_snapshot_file_that_does_not_match_its_event_is_refused(tmp_path: Path) -> None:
    steps = yaml.safe_load(SOLVE.read_text())["steps"]
    script = write_script(tmp_path, [s for s in steps if s["tool"] == "submit"])
    study = write_study(tmp_path, agent={"model": f"scripted:{script}"})
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                          log=lambda _m: None)
    diff = attempt / "snapshots" / "0001.diff"
    diff.write_bytes(diff.read_bytes() + b"\n")
    result = harness("grade", str(attempt), "--snapshots")
    # Refused before anything is read: the attempt's manifest (and the snapshot event's digest)
    # name the changed file.
    assert result.returncode == 2, result.stderr
    assert "does not verify" in result.stderr and "snapshots/0001.diff" in result.stderr
    assert not (attempt / SNAPSHOT_GRADES_NAME).exists()
