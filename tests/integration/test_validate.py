"""Gold validation runs the real grading path on reference, baseline and every fault."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import docker
import pytest

from grading.models import GradeReport
from harness.errors import HarnessError
from harness.infra.workspace import snapshot_baseline
from harness.oracle import reuse
from harness.oracle.grade import finished_grading, fixed_inputs
from harness.oracle.validate import compare, fault_folders, render_markdown, validate_task
from harness.records.tasks import ValidationReport
from tests.conftest import FIXTURE_HIDDEN, FIXTURE_PACKET

FIXTURE, HIDDEN = FIXTURE_PACKET, FIXTURE_HIDDEN


def test_fixture_task_validates_in_both_directions(
    tiny_validation: ValidationReport, tmp_path: Path
) -> None:
    report = tiny_validation  # graded for real once, shared with the calibration track's test
    variants = {v.variant: v for v in report.variants}
    assert set(variants) == {"reference", "baseline", "fault:off-by-one-ramp",
                             "fault:scheduler-not-resumed"}
    assert report.ok, [m for v in report.variants for m in v.mismatches]
    assert report.requirement_problems == []  # hidden/tiny-regression/requirements.yaml
    assert variants["reference"].verdict == "complete"
    assert variants["reference"].configurations == {"cpu-1": "pass"}
    assert variants["baseline"].outcomes["public-tests"] == "pass"
    resumed = "hidden:test_warmup.py::test_resume_mid_warmup_equals_uninterrupted"
    assert variants["fault:scheduler-not-resumed"].outcomes[resumed] == "fail"
    assert "PASS" in render_markdown(report)
    # What the grader wrote for the reference (its canary travels with it: an agent's diff
    # must not carry it) and for the baseline (graded as an empty diff that applies).
    reference = GradeReport.model_validate_json(
        (Path(variants["reference"].grade_folder) / "out" / "grade.json").read_text())
    assert reference.diff.canary_found and reference.task_id == "tiny-regression"
    assert reference.torch_version and len(reference.contracts) >= 9
    assert "arm" not in reference.model_dump()  # the grader is never told the arm
    grader_log = Path(variants["reference"].grade_folder) / "grader-output.log"
    assert "complete" in grader_log.read_text()
    baseline = GradeReport.model_validate_json(
        (Path(variants["baseline"].grade_folder) / "out" / "grade.json").read_text())
    assert baseline.diff.empty and baseline.diff.applied and baseline.verdict == "incomplete"
    # report.ok: each fault (the off-by-one ramp among them) fails exactly the contracts its
    # fault.yaml documents, and no other.

    # --variant grades exactly the named variants; the rest come from the earlier summary.
    # A variant the hidden folder no longer defines (a fault since removed) is not kept.
    # A kept variant graded before a check existed (here: its outcome for one check removed)
    # fails the summary until it is graded again.
    gone = report.variants[0].model_copy(update={"variant": "fault:since-removed"})
    first = min(c for c in variants["reference"].outcomes
                if c.startswith("hidden:") and "[" not in c)
    before_check = variants["reference"].model_copy(update={"outcomes": {
        c: o for c, o in variants["reference"].outcomes.items() if c != first}})
    again = validate_task("tiny-regression", FIXTURE, HIDDEN, tmp_path, log=lambda _m: None,
                          only=["baseline"], previous=report.model_copy(
                              update={"variants": [before_check, gone]}))
    graded = {v.variant: v for v in again.variants}
    assert set(graded) == {"reference", "baseline"}
    assert graded["reference"].grade_folder == variants["reference"].grade_folder
    assert graded["baseline"].grade_folder != variants["baseline"].grade_folder
    assert not again.ok and graded["reference"].mismatches == [
        f"reference: kept from an earlier validation that has no outcome for {first} (a check "
        "added since): grade it again (--variant reference)"]


def test_a_stopped_validation_goes_on_where_it_stopped(
    tiny_validation: ValidationReport, tmp_path: Path
) -> None:
    """Stopped before its summary, in the middle of one variant's grading: only that variant
    is graded again, and the folder of its unfinished grading is kept aside."""
    variants = {v.variant: v for v in tiny_validation.variants}
    stopped = tmp_path / "tiny-regression" / "validation-1"
    shutil.copytree(Path(variants["reference"].grade_folder).parent, stopped, symlinks=True)
    for summary in ("validation.json", "validation.md"):
        (stopped / summary).unlink()
    cut_short = stopped / "fault-off-by-one-ramp"
    for last in ("grader.json", "manifest.json"):  # grade_diff writes these last
        (cut_short / last).unlink()
    said: list[str] = []
    report = validate_task("tiny-regression", FIXTURE, HIDDEN, tmp_path, log=said.append,
                           resume=True)
    assert report.ok, [m for v in report.variants for m in v.mismatches]
    graded = {v.variant: v for v in report.variants}
    assert set(graded) == set(variants)
    for kept in ("reference", "baseline", "fault:scheduler-not-resumed"):
        assert graded[kept].grade_folder == str(stopped / kept.replace(":", "-"))
        assert f"kept {kept}: its grading had finished" in said
    assert ("grading fault:off-by-one-ramp again (its unfinished grading is in "
            "fault-off-by-one-ramp.unfinished-1)") in said
    assert (stopped / "fault-off-by-one-ramp.unfinished-1" / "out" / "grade.json").is_file()
    assert (cut_short / "grader.json").is_file() and (stopped / "validation.json").is_file()
    with pytest.raises(HarnessError, match="finished: nothing to resume"):
        validate_task("tiny-regression", FIXTURE, HIDDEN, tmp_path, resume=True)


def test_a_finished_grading_is_kept_only_as_it_was_made(
    tiny_validation: ValidationReport, client: docker.DockerClient, tmp_path: Path
) -> None:
    """grade.finished_grading, which --resume trusts: the same inputs and an unchanged folder
    give back its grade; a file changed, a link, or any other input give nothing."""
    folder = Path({v.variant: v for v in tiny_validation.variants}["baseline"].grade_folder)
    inputs = reuse.GradingInputs(
        diff_sha256=hashlib.sha256(b"").hexdigest(),
        **fixed_inputs(client, FIXTURE / "packet.yaml", _baseline(tmp_path), HIDDEN))
    copies = {}
    for name in ("as-made", "changed", "linked"):
        copies[name] = tmp_path / name
        shutil.copytree(folder, copies[name], symlinks=True)
    grade = copies["changed"] / "out" / "grade.json"
    grade.write_bytes(grade.read_bytes() + b" ")
    log = copies["linked"] / "grader-output.log"
    log.unlink()
    log.symlink_to(folder / "grader-output.log")
    kept = finished_grading(copies["as-made"], inputs)
    assert kept is not None and kept.verdict == "incomplete"
    assert finished_grading(copies["changed"], inputs) is None
    assert finished_grading(copies["linked"], inputs) is None
    other = inputs.model_copy(update={"diff_sha256": hashlib.sha256(b"x").hexdigest()})
    assert finished_grading(copies["as-made"], other) is None


def _baseline(tmp_path: Path) -> Path:
    baseline = tmp_path / "baseline"
    snapshot_baseline(FIXTURE / "repo", baseline)
    return baseline


def test_a_mismatch_in_either_direction_is_reported() -> None:
    outcomes = {"public-tests": "pass", "hidden:a": "fail", "hidden:b": "pass",
                "hidden:c": "not_run"}
    assert compare("v", outcomes, ["hidden:a"]) == []
    assert compare("v", outcomes, ["hidden:b"]) == [
        "v: hidden:a should pass but was fail", "v: hidden:b should fail but was pass"]
    assert compare("v", outcomes, ["hidden:zzz*"])[-1] == "v: no contract matches 'hidden:zzz*'"
    # A contract that could not run is neither agreement nor disagreement.
    assert compare("v", outcomes, ["hidden:a", "hidden:c"]) == []


def test_oracle_regressions_are_graded_after_the_calibration_faults(tmp_path: Path) -> None:
    """regressions/<id>/ (faults an adversarial review found the checks passing) are graded by
    gold validation as regression:<id>, after the calibration faults; folders without a
    fault.yaml are not faults."""
    for rel in ("faults/b/fault.yaml", "faults/a/fault.yaml", "regressions/c/fault.yaml",
                "regressions/notes/README.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    assert fault_folders(tmp_path) == [("fault", tmp_path / "faults" / "a"),
                                       ("fault", tmp_path / "faults" / "b"),
                                       ("regression", tmp_path / "regressions" / "c")]
    assert fault_folders(HIDDEN) == [("fault", HIDDEN / "faults" / name)
                                     for name in ("off-by-one-ramp", "scheduler-not-resumed")]
