"""``harness oracle-strength --resume``: what it refuses before any grading.

The grading half (a stopped run finished by a resume, its graded mutants kept) runs for real in
``tests/integration/test_oracle_strength.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grading.hashing import grader_source_sha256, tree_sha256
from grading.mutant_report import REFERENCE_NAME, RESULTS_NAME, MutantsReport
from harness.errors import HarnessError
from harness.oracle.strength import (
    RUN_LOCK,
    RUN_SETTINGS,
    OracleStrengthOptions,
    _run_lock,
    _same_grade,
    resume_oracle_strength,
    stopped_run,
)
from harness.paths import REPO_ROOT
from tests.helpers import one_error_line, run_cli

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "task_packets" / "tiny-regression"
HIDDEN = REPO_ROOT / "hidden" / "tiny-regression"


def _options(tmp_path: Path) -> OracleStrengthOptions:
    return OracleStrengthOptions(task="tiny-regression", packet_dir=FIXTURE, hidden_dir=HIDDEN,
                                 runs_root=tmp_path / "runs", report_dir=tmp_path / "reports")


def _stopped(tmp_path: Path, **settings: object) -> Path:
    """A run folder as a stopped run leaves it: its sample, settings and reference grade."""
    run = tmp_path / "runs" / "run-1"
    (run / "out").mkdir(parents=True)
    (run / "mutants.json").write_text("[]")
    (run / RUN_SETTINGS).write_text(json.dumps(
        {"seed": 0, "limit": None, "selected": False, "scope": "both",
         "grader_source_sha256": grader_source_sha256(),
         "hidden_tree_sha256": tree_sha256(HIDDEN), "workers": 2, "warm_start": True}
        | settings))
    header = MutantsReport(task_id="tiny-regression", reference_verdict="complete",
                           reference_duration_s=1.0, hidden_test_timeout_s=10.0,
                           grader_source_sha256=grader_source_sha256(),
                           hidden_tree_sha256=tree_sha256(HIDDEN))
    (run / "out" / REFERENCE_NAME).write_text(header.model_dump_json())
    (run / RUN_LOCK).touch()  # as every run since runs hold a lock leaves it
    return run


def test_the_newest_stopped_run_is_the_one_resumed(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    with pytest.raises(HarnessError, match="no oracle-strength run to resume"):
        stopped_run(root)
    for n in (2, 10):
        (root / f"run-{n}" / "out").mkdir(parents=True)
    (root / "run-11").symlink_to(root / "run-2")  # a link is never a run of this folder
    assert stopped_run(root).name == "run-10"
    (root / "run-10" / "out" / RESULTS_NAME).write_text("{}")
    with pytest.raises(HarnessError, match="finished: nothing to resume"):
        stopped_run(root)


def test_a_run_still_grading_is_not_resumed_beside_it(tmp_path: Path) -> None:
    run = _stopped(tmp_path)
    with _run_lock(run), pytest.raises(HarnessError, match="being graded by another process"):
        resume_oracle_strength(_options(tmp_path), run)
    # Released with its holder: the next one is not refused.
    with _run_lock(run):
        pass


@pytest.mark.parametrize(("change", "words"), [
    ({"grader_source_sha256": "0" * 64}, "another grading code"),
    ({"hidden_tree_sha256": "0" * 64}, "another hidden tree"),
])
def test_a_run_graded_on_other_inputs_is_refused(tmp_path: Path, change: dict[str, str],
                                                 words: str) -> None:
    run = _stopped(tmp_path, **change)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(HarnessError, match=words):
        resume_oracle_strength(_options(tmp_path), run)
    # Nothing recorded changed, and nothing was added.
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_a_finished_or_foreign_run_is_refused(tmp_path: Path) -> None:
    run = _stopped(tmp_path)
    header = json.loads((run / "out" / REFERENCE_NAME).read_text())
    (run / "out" / REFERENCE_NAME).write_text(json.dumps(header | {"task_id": "moe-router"}))
    with pytest.raises(HarnessError, match="a run of moe-router, not tiny-regression"):
        resume_oracle_strength(_options(tmp_path), run)
    (run / "out" / RESULTS_NAME).write_text("{}")
    with pytest.raises(HarnessError, match="finished: nothing to resume"):
        resume_oracle_strength(_options(tmp_path), run)
    (run / "mutants.json").unlink()
    with pytest.raises(HarnessError, match="cannot be resumed"):
        resume_oracle_strength(_options(tmp_path), run)


def test_a_run_from_before_the_lock_is_not_resumed_while_it_may_be_grading(
        tmp_path: Path) -> None:
    run = _stopped(tmp_path)
    (run / RUN_LOCK).unlink()
    with pytest.raises(HarnessError, match="holds no lock: it may still be grading"):
        resume_oracle_strength(_options(tmp_path), run)


@pytest.mark.parametrize(("damage", "words"), [
    (lambda run: (run / RUN_SETTINGS).write_text("[1, 2]"), "no valid mutants, settings"),
    (lambda run: (run / RUN_SETTINGS).write_text('{"seed": "x"}'), "no valid mutants, settings"),
    (lambda run: (run / "mutants.json").write_text('{"id": 1}'), "mutants.json is not a list"),
    (lambda run: (run / "out" / "mutants.jsonl").write_text(
        '{"id": "arith-0123456789", "status": "killed", "duration_s": 1.0}\n'),
     "results name mutants its sample does not list"),
    (lambda run: (run / "out" / "resumed.jsonl").write_text("not json\n"), "is damaged"),
])
def test_a_damaged_run_is_refused_with_one_reason(tmp_path: Path, damage: object,
                                                  words: str) -> None:
    run = _stopped(tmp_path)
    assert callable(damage)
    damage(run)
    with pytest.raises(HarnessError, match=words):
        resume_oracle_strength(_options(tmp_path), run)


def test_resume_keeps_the_stopped_runs_own_sample() -> None:
    result = run_cli("oracle-strength", "--task", "tiny-regression", "--resume", "--limit", "5",
                     "--operator", "arith")
    one_error_line(result, "--resume", "--limit, --operator")


def test_a_run_without_its_inputs_key_is_bound_by_its_own_reference_grade() -> None:
    """Runs made before run.json recorded the inputs' key are bound by the reference-cache
    entry their grade wrote: the same grade but for what the host sets after it."""
    graded = MutantsReport(task_id="tiny-regression", reference_verdict="complete",
                           reference_duration_s=12.5, hidden_test_timeout_s=40.0,
                           grader_source_sha256="a" * 64, hidden_tree_sha256="b" * 64)
    as_run = graded.model_copy(update={"workers": 2, "warm_start": True, "duration_s": 99.0})
    assert _same_grade(graded, as_run)
    # Another grade of the same inputs differs in its timings: not the run's own.
    assert not _same_grade(graded, as_run.model_copy(update={"reference_duration_s": 12.6}))
    assert not _same_grade(graded, as_run.model_copy(update={"reference_verdict": "incomplete"}))
