"""`harness matrix` for real: worker processes, Docker, scripted agents, graders.

The matrix here has the pilot's structure (every pair with both arms, launch order from the
lock, one grading per session) on the fast fixture task, so it fits the CI's time: the real
12-session offline pilot (studies/pilot-offline.yaml) takes about an hour on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import docker
import pytest

from harness.infra.sandbox import MANAGED_LABEL
from harness.paths import REPO_ROOT
from harness.records.attempt import SessionRecord, read_grades, study_records
from tests.conftest import write_script, write_study
from tests.helpers import HARNESS, SOLVE, harness, solve_edits

TINY = "tiny-regression"


def matrix_study(tmp: Path, *, pairs: int, model: str | None = None,
                 **overrides: object) -> tuple[Path, str]:
    """A fixture-task study with a name of its own, so this test's containers are found by
    its label and nobody else's."""
    name = f"m-{uuid.uuid4().hex[:8]}"
    study = write_study(tmp, name=name, pairs_per_task=pairs, tasks=[{
        "id": TINY, "packet": str(REPO_ROOT / "tests/fixtures/task_packets" / TINY),
        "hidden": str(REPO_ROOT / "hidden" / TINY), "comparison": "coverage-audit"}],
        agent={"model": model or f"scripted:{SOLVE}"}, **overrides)
    result = harness("freeze", "--study", str(study))
    assert result.returncode == 0, result.stderr
    return study, name


def study_containers(client: docker.DockerClient, name: str) -> list[object]:
    return client.containers.list(all=True,
                                  filters={"label": [MANAGED_LABEL, f"org.harness.study={name}"]})


def attempts(tmp: Path, name: str) -> dict[str, list[SessionRecord]]:
    """Each session's records, with every grading listed (each in its own folder)."""
    found: dict[str, list[SessionRecord]] = {}
    for path, record in study_records(tmp / "runs" / name):
        graded = record.model_copy(update={"grades": read_grades(path, record)})
        found.setdefault(record.session_id, []).append(graded)
    return found


def wait_for(condition: object, timeout: float, what: str,
             proc: subprocess.Popen[str] | None = None) -> None:
    """Wait for ``condition``; fail at the timeout, or as soon as ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the matrix run ended before {what}:\n{proc.communicate()[0]}")
        time.sleep(0.3)


def test_sigkill_halfway_then_cleanup_and_rerun_completes_without_redoing_anything(
    tmp_path: Path, client: docker.DockerClient
) -> None:
    # The control arm works 30 s longer, so that sessions still run when the first grade
    # lands: the kill then catches finished, grading and running sessions at once.
    solve = solve_edits()
    write_script(tmp_path, solve, name="treatment.yaml")
    write_script(tmp_path, [{"tool": "bash", "args": {"command": "sleep 30"}}, *solve],
                 name="control.yaml")
    study, name = matrix_study(tmp_path, pairs=2, model=f"scripted:{tmp_path}/{{arm}}.yaml")
    plan = harness("matrix", "plan", "--study", str(study))
    assert plan.returncode == 0 and "4 sessions in launch order" in plan.stdout, plan.stderr
    proc = subprocess.Popen([*HARNESS, "matrix", "run", "--study", str(study)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def graded() -> bool:
        return any(r.grades for rs in attempts(tmp_path, name).values() for r in rs)

    try:
        wait_for(graded, 600, "the first graded session", proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    before = attempts(tmp_path, name)
    done_before = {sid: (rs[-1].attempt, [g.folder for g in rs[-1].grades])
                   for sid, rs in before.items() if rs[-1].status == "finished"}
    assert any(folders for _a, folders in done_before.values())

    result = harness("cleanup", "--runs", str(tmp_path / "runs"), "--study", str(study))
    assert result.returncode == 0, result.stderr
    wait_for(lambda: not study_containers(client, name), 60, "the study's containers to go")

    result = harness("matrix", "run", "--study", str(study))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 finished" in result.stdout
    found = attempts(tmp_path, name)
    assert len(found) == 4
    for sid, (attempt, folders) in done_before.items():
        last = found[sid][-1]  # the finished attempt kept, not redone; a grade kept too
        assert last.attempt == attempt, sid
        assert [g.folder for g in last.grades][:len(folders)] == folders, sid
        assert len(last.grades) == 1, sid  # graded once: an interrupted grading left none
    for rs in found.values():
        final = rs[-1]
        assert final.status == "finished" and final.outcome == "submitted"
        assert final.grades and final.grades[-1].verdict == "complete"
        assert final.in_frozen_study and final.launch is not None
        assert final.launch.queue_seconds is not None and final.launch.queue_seconds >= 0
        assert final.usage is not None and final.usage.queue_seconds >= 0
        assert all(r.status == "interrupted" for r in rs[:-1])  # only stopped ones redone
    assert not study_containers(client, name)

    status = harness("matrix", "status", "--study", str(study))
    assert status.returncode == 0 and "4/4 finished" in status.stdout
    count = sum(len(rs) for rs in found.values())
    again = harness("matrix", "run", "--study", str(study))
    assert again.returncode == 0 and "launched 0 session(s)" in again.stdout
    assert sum(len(rs) for rs in attempts(tmp_path, name).values()) == count
    state = json.loads((tmp_path / "runs" / name / "matrix/rev-1.json").read_text())
    assert len(state["runs"]) == 3 and all(j["ended_at"] for j in state["jobs"])


def test_an_infrastructure_failure_is_retried_and_an_agent_outcome_is_not(
    tmp_path: Path, client: docker.DockerClient
) -> None:
    slow = write_script(tmp_path, [
        {"tool": "bash", "args": {"command": "echo '# touched' >> train.py && sleep 12"}},
        {"tool": "submit", "args": {"summary": "slow"}}], name="control.yaml")
    write_script(tmp_path, [{"tool": "bash", "args": {"command": f"echo {n}"}}
                            for n in range(4)], name="treatment.yaml")
    study, name = matrix_study(tmp_path, pairs=1, model=f"scripted:{tmp_path}/{{arm}}.yaml",
                               budget={"tool_calls": 3})
    assert slow.exists()
    control = f"{TINY}-pair1-control"
    proc = subprocess.Popen([*HARNESS, "matrix", "run", "--study", str(study)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def sleeping() -> list[object]:
        boxes = client.containers.list(filters={"label": [f"org.harness.study={name}",
                                                          f"org.harness.session={control}"]})
        try:
            return [b for b in boxes if any("sleep 12" in row[-1] for row in
                                            b.top().get("Processes") or [])]
        except docker.errors.APIError:
            return []

    try:
        wait_for(lambda: bool(sleeping()), 300, "the control session to sleep", proc)
        sleeping()[0].kill()  # the sandbox is lost under the session: not the agent's doing
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    found = attempts(tmp_path, name)
    lost, retried = found[control]
    assert (lost.outcome, retried.outcome) == ("sandbox_lost", "submitted")
    assert retried.grades and not lost.grades  # no diff survives a lost RAM workspace
    [budget] = found[f"{TINY}-pair1-treatment"]  # final: never retried
    assert budget.outcome == "budget_exhausted:tool_calls" and budget.grades
    assert not study_containers(client, name)


def test_sigterm_stops_the_running_sessions_cleanly(
    tmp_path: Path, client: docker.DockerClient
) -> None:
    write_script(tmp_path, [{"tool": "bash", "args": {"command": "sleep 60"}},
                            {"tool": "submit", "args": {"summary": "never reached"}}])
    study, name = matrix_study(tmp_path, pairs=1, model=f"scripted:{tmp_path}/agent.yaml")
    proc = subprocess.Popen([*HARNESS, "matrix", "run", "--study", str(study)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def both_sleeping() -> bool:
        try:
            return sum(any("sleep 60" in row[-1] for row in box.top().get("Processes") or [])
                       for box in study_containers(client, name)) == 2
        except docker.errors.APIError:
            return False

    try:
        wait_for(both_sleeping, 300, "both sessions to run", proc)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == ["interrupted by SIGTERM: running sessions recorded as interrupted; rerun "
                     "`harness matrix run` to resume"], lines
    found = attempts(tmp_path, name)
    assert len(found) == 2
    assert all(rs[-1].status == rs[-1].outcome == "interrupted" for rs in found.values())
    assert not study_containers(client, name)
    status = harness("matrix", "status", "--study", str(study))
    assert status.stdout.count("interrupted") == 4, status.stdout  # state and outcome


def test_caps_stop_a_session_whose_budget_they_cannot_cover(tmp_path: Path) -> None:
    # The fixture's 900 s wall budget at 1 CPU is 0.25 CPU-hours; 0.3 covers one session.
    study, name = matrix_study(tmp_path, pairs=1, caps={"cpu_hours": 0.1})
    result = harness("matrix", "run", "--study", str(study))
    assert result.returncode == 1
    assert "study cap reached: 0.100 of 0.1 CPU-hours left" in result.stderr, result.stderr
    assert "may use up to 0.250" in result.stderr
    assert not attempts(tmp_path, name)  # nothing started
    plan = harness("matrix", "plan", "--study", str(study))
    assert "the caps cover the first 0 of 2" in plan.stdout


@pytest.mark.parametrize(("args", "words"), [
    (["--parallel", "64"], ("--parallel 64 promises 64 CPUs", "--oversubscribe")),
    (["--executor", "pbs"], ("unknown executor 'pbs'",)),
])
def test_bad_run_options_are_one_line(tmp_path: Path, args: list[str],
                                      words: tuple[str, ...]) -> None:
    study, name = matrix_study(tmp_path, pairs=1)
    result = harness("matrix", "run", "--study", str(study), *args)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "fix:" in lines[0], lines
    assert all(w in lines[0] for w in words), lines[0]
    assert not attempts(tmp_path, name)


def test_an_unfrozen_study_and_a_dead_daemon_are_one_line(tmp_path: Path) -> None:
    study = write_study(tmp_path, name="never-frozen")
    result = harness("matrix", "run", "--study", str(study))
    assert result.returncode == 2 and "study never-frozen is not frozen" in result.stderr
    assert "harness freeze --study" in result.stderr
    dead = subprocess.run([*HARNESS, "matrix", "run", "--study", str(study)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    assert dead.returncode == 2 and "cannot reach the Docker daemon" in dead.stderr
    assert len(dead.stderr.strip().splitlines()) == 1
