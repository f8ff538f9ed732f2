"""``harness oracle-strength`` on the fixture task: real mutants, graded by the real checks."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.infra import images
from harness.infra.sandbox import OWNER_PID_LABEL
from harness.oracle.strength import (
    OracleStrengthOptions,
    OracleStrengthReport,
    oracle_strength,
    rescore,
    resume_oracle_strength,
)
from harness.paths import REPO_ROOT

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "task_packets" / "tiny-regression"
HIDDEN = REPO_ROOT / "hidden" / "tiny-regression"
# Deleting ``scheduler.step()`` leaves the learning rate at its first warmup value: a hidden
# warmup check must kill it. A dataclass default of 1 warmup step ramps nothing (factor
# min(1, (s + 1) / 1) is 1 on every step), so no check can tell it from 0: it survives.
KILLABLE = "delete-statement-c4c02162e5"
EQUIVALENT = "default-2492d4d92c"
# The name of a periodic checkpoint: no check trains with --checkpoint-every, so the statement
# never runs in any check (line coverage of the reference's grade) and is not graded.
UNREACHED = "constant-9635bf8345"
# Beyond the diff: the trainer's ``loss.backward()`` (a line the reference left alone, which
# every training check executes) run twice.
BEYOND = "duplicate-statement-abc2ab34ed"


def test_fixture_mutants_are_graded_by_the_hidden_checks(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "tiny-regression.equivalent.yaml").write_text(
        f"{EQUIVALENT}: one warmup step multiplies every step's lr by min(1, (s + 1) / 1) = 1, "
        "exactly what warmup 0 does\n")
    run = {"task": "tiny-regression", "packet_dir": FIXTURE, "hidden_dir": HIDDEN,
           "runs_root": tmp_path / "run", "report_dir": reports}
    report = oracle_strength(OracleStrengthOptions(
        **run, ids={KILLABLE, EQUIVALENT, UNREACHED, BEYOND}), log=lambda _m: None)
    assert report.reference_verdict == "complete" and report.coverage_recorded
    assert report.coverage_per_check and 0 < report.reference_duration_s < report.duration_s
    entries = {e.mutant.id: e for e in report.entries}
    assert set(entries) == {KILLABLE, EQUIVALENT, UNREACHED, BEYOND}
    # The beyond scope comes from the reference's coverage and is scored apart.
    beyond = entries[BEYOND]
    assert (beyond.mutant.scope, beyond.mutant.family) == ("beyond", "insertion")
    assert beyond.result.status == "killed", beyond.result
    assert [(r.scope, r.mutants, r.detected) for r in report.by_scope] == [
        ("diff", 3, 1), ("beyond", 1, 1)]
    killed = entries[KILLABLE].result
    assert killed.status == "killed", killed
    assert killed.killed_by is not None and killed.killed_by.startswith("hidden:test_warmup.py::")
    assert killed.configurations == ["cpu-1"]
    survivor = entries[EQUIVALENT]
    assert survivor.result.status == "survived" and survivor.equivalent is not None
    # Stopped at the first failing contract, but the survivor ran every check that executes
    # its statement (a dataclass default: every one that imports the module).
    assert survivor.result.contracts_run > killed.contracts_run
    # Every warmup check trains through the deleted ``scheduler.step()`` (the negative-warmup
    # check also shows that --warmup-steps 3 trains, so a forged refusal cannot pass it): no
    # contract is left out of the killed mutant's grade for not covering it.
    assert killed.contracts_not_covering == 0
    unreached = entries[UNREACHED].result
    # Coverage says no check runs it; it is graded with every contract all the same, in case
    # coverage missed something, and survives them all.
    assert (unreached.status, unreached.covered, unreached.confirmed) == (
        "survived", False, "every_contract")
    assert unreached.contracts_run > 1
    assert survivor.result.covered and killed.covered
    assert killed.confirmed in ("first", "alone") and survivor.result.confirmed == "every_contract"
    # detected / (mutants - equivalent): diff 1 / 2 (the unreached survivor is a blind spot),
    # beyond 1 / 1; 2 / 3 in all. The goal holds for neither the whole nor the diff scope.
    assert (report.detected, report.equivalent, report.survived, report.score) == (
        2, 1, 1, 0.6667)
    assert [r.score for r in report.by_scope] == [0.5, 1.0]

    # The committed artefacts: the report as written, and readable by a person.
    saved = OracleStrengthReport.model_validate_json(
        (reports / "tiny-regression.json").read_text())
    assert saved.score == 0.6667 and saved.by_scope == report.by_scope
    markdown = (reports / "tiny-regression.md").read_text()
    assert "Score: **66.7%** (diff 50.0%; beyond 100.0%)" in markdown
    assert "goal 90% in each scope: NOT met" in markdown and f"`{EQUIVALENT}`" in markdown
    assert "no check executes this statement" in markdown
    assert "one process per hidden check" in markdown
    assert "every contract ran on it" in markdown and "Kills checked" in markdown
    run_dir = next((tmp_path / "run").glob("run-*"))
    canary = (HIDDEN / "CANARY").read_text().strip()
    assert canary not in markdown and canary not in (reports / "tiny-regression.json").read_text()
    # Two grader containers graded the four mutants, one log each, their candidate processes
    # forked from a warm interpreter (grading.warm_start, the default).
    assert report.workers == 2 and not report.reference_reused and report.warm_start
    # The reference's checks were shared between the two containers, and merged into one
    # passing header (the verdict above) with every check's coverage and timing.
    assert report.reference_parts == 2 and "in 2 grader containers side by side, in" in markdown
    assert {p.name for p in run_dir.glob("reference-part-*.log")} == {
        "reference-part-0.log", "reference-part-1.log"}
    assert "forked from a warm interpreter" in markdown
    # The survivors ran every contract: each training run and probe of theirs started warm.
    assert all(entries[m].result.processes_warm > 0 for m in (EQUIVALENT, UNREACHED)), [
        (e.mutant.id, e.result.processes_warm, e.result.processes_fresh) for e in report.entries]
    # Every one of them ran hidden checks, in a judge forked from its worker's judge daemon.
    assert all(e.result.judges_warm > 0 for e in report.entries), [
        (e.mutant.id, e.result.judges_warm) for e in report.entries]
    assert "forked from the worker's judge daemon" in markdown
    # A kill confirmed alone took a second grade, and a second judge: both are counted.
    assert killed.judges_warm == (2 if killed.confirmed == "alone" else 1), killed
    assert {p.stem for p in (run_dir / "logs").glob("*.log")} == set(entries)

    # Again, same grading code, image, hidden tree and reference: the reference's grade is
    # reused, not graded again, and the mutant fares the same with fresh interpreters.
    again = oracle_strength(OracleStrengthOptions(**run, ids={KILLABLE}, workers=1,
                                                  warm_start=False), log=lambda _m: None)
    assert again.reference_reused and again.workers == 1 and not again.warm_start
    cold = again.entries[0].result
    assert cold.processes_warm == cold.judges_warm == 0
    assert again.reference_duration_s == report.reference_duration_s
    assert again.duration_s < report.reference_duration_s
    assert [(e.mutant.id, e.result.status, e.result.killed_by) for e in again.entries] == [
        (KILLABLE, "killed", killed.killed_by)]
    assert "not graded again" in (reports / "tiny-regression.md").read_text()


def test_sigterm_keeps_what_was_graded_and_removes_the_grader(tmp_path: Path) -> None:
    """A stopped analysis leaves no container behind (it once left its grader running) and
    keeps what it graded: the reference, and the mutant done, which --rescore reports and
    --resume keeps, grading only the one that was cut off."""
    client = images.docker_client()
    runs = REPO_ROOT / "runs" / "oracle-strength" / "tiny-regression"
    before = set(runs.glob("run-*")) if runs.is_dir() else set()
    with (tmp_path / "cli.log").open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.cli", "oracle-strength", "--task", "tiny-regression",
             "--packet", str(FIXTURE), "--report-dir", str(tmp_path), "--mutant", KILLABLE,
             "--mutant", EQUIVALENT], stdout=out, stderr=subprocess.PIPE, text=True)
    mine = {"label": f"{OWNER_PID_LABEL}={proc.pid}"}
    run_dir = None
    try:
        deadline = time.monotonic() + 600
        # Stop it once the reference is graded (or taken from an earlier run) and the first
        # mutant is: the kill stops at its first failing contract, while the equivalent one
        # runs every contract that executes it, so it is still being graded.
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            new = sorted(set(runs.glob("run-*")) - before) if runs.is_dir() else []
            run_dir = new[0] if new else None
            if run_dir is not None and "reference: " in (tmp_path / "cli.log").read_text() \
                    and "mutant 1/2" in (tmp_path / "cli.log").read_text():
                break
            time.sleep(0.5)
        assert run_dir is not None and client.containers.list(filters=mine)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    try:
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "SIGTERM" in err
        assert client.containers.list(all=True, filters=mine) == []
        assert not (tmp_path / "tiny-regression.json").exists()
        assert (run_dir / "out" / "reference.json").is_file()
        rescored = subprocess.run(
            [sys.executable, "-m", "harness.cli", "oracle-strength", "--task", "tiny-regression",
             "--packet", str(FIXTURE), "--report-dir", str(tmp_path), "--rescore", str(run_dir)],
            capture_output=True, text=True, timeout=300)
        assert rescored.returncode == 0, rescored.stdout + rescored.stderr
        saved = OracleStrengthReport.model_validate_json(
            (tmp_path / "tiny-regression.json").read_text())
        assert saved.mutants_generated == 2 and saved.mutants_total == 1
        assert "Stopped early" in (tmp_path / "tiny-regression.md").read_text()
        [kept] = saved.entries
        cut_off = ({KILLABLE, EQUIVALENT} - {kept.mutant.id}).pop()

        # Resumed: the graded mutant is kept as it was, the other graded; its log from the
        # stopped run is set aside, not overwritten.
        messages: list[str] = []
        resumed = resume_oracle_strength(OracleStrengthOptions(
            task="tiny-regression", packet_dir=FIXTURE, hidden_dir=HIDDEN, runs_root=runs,
            report_dir=tmp_path), run_dir, log=messages.append)
        assert "1 of 2 mutants graded before it stopped, kept; grading the other 1" in \
            "\n".join(messages)
        [record] = resumed.resumes
        assert (record.kept, record.of, resumed.mutants_total) == (1, 2, 2)
        entries = {e.mutant.id: e for e in resumed.entries}
        assert entries[kept.mutant.id].result == kept.result
        assert entries[KILLABLE].result.status == "killed"
        assert entries[EQUIVALENT].result.status == "survived"
        assert (run_dir / "logs" / f"{cut_off}.log").is_file()
        assert (run_dir / "logs" / f"{cut_off}.log.unfinished-1").is_file()
        markdown = (tmp_path / "tiny-regression.md").read_text()
        assert "**Resumed:**" in markdown and "Stopped early" not in markdown
        assert (run_dir / "out" / "mutants.json").is_file()
        # Rescoring the resumed run (after marking equivalents, say) keeps saying so.
        rescore(task="tiny-regression", hidden_dir=HIDDEN, run_dir=run_dir,
                report_dir=tmp_path, log=lambda _m: None)
        assert "**Resumed:**" in (tmp_path / "tiny-regression.md").read_text()
        with pytest.raises(HarnessError, match="finished: nothing to resume"):
            resume_oracle_strength(OracleStrengthOptions(
                task="tiny-regression", packet_dir=FIXTURE, hidden_dir=HIDDEN,
                runs_root=runs, report_dir=tmp_path), run_dir)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
