"""Whole sessions for real: container, scripted agent, transcript, diff, grade, cleanup."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from grading.hashing import file_sha256
from grading.models import GradeReport
from harness.agent.tools import ToolRunner
from harness.errors import HarnessError
from harness.infra.sandbox import Sandbox
from harness.records import events
from harness.records.attempt import MANIFEST_NAME, TRANSCRIPT_NAME, read_grades, read_record
from harness.records.transcript import read_events, verify
from harness.study.session import SessionOptions, run_session
from tests.conftest import session_containers, write_script, write_study

SESSION = "tiny-regression-pair1-control"


def test_demo_session_end_to_end(demo_attempt: Path, client: docker.DockerClient) -> None:
    record = read_record(demo_attempt)
    assert record.status == "finished" and record.outcome == "submitted"
    assert record.image_id.startswith("sha256:") and record.container
    assert record.diff is not None and record.diff.files_changed
    grades = read_grades(demo_attempt, record)
    assert grades and grades[-1].verdict == "complete"
    # The scripted solve, written from the task statement, carries no hidden canary.
    graded = GradeReport.model_validate_json(
        (demo_attempt / grades[-1].folder / "out" / "grade.json").read_text())
    assert not graded.diff.canary_found and graded.verdict == "complete"
    report = verify(demo_attempt / TRANSCRIPT_NAME)
    assert report.ok and not report.partial_tail
    written = read_events(demo_attempt / TRANSCRIPT_NAME)
    kinds = [events.parse(e).kind for e in written]  # every event fits its documented model
    assert kinds[0] == "session_start" and kinds[-1] == "session_end"
    assert {"model_request", "model_response", "tool_call", "tool_result", "diff"} <= set(kinds)
    manifest = json.loads((demo_attempt / MANIFEST_NAME).read_text())
    for rel, digest in manifest["files"].items():
        if not digest.startswith("symlink:"):
            assert file_sha256(demo_attempt / rel) == digest, rel
    assert session_containers(client, SESSION, demo_attempt.parent.parent) == []


def test_editing_one_byte_of_a_transcript_fails_verify_naming_the_event(
    demo_attempt: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "transcript.jsonl"
    original = (demo_attempt / TRANSCRIPT_NAME).read_bytes()
    lines = original.splitlines(keepends=True)
    target = next(i for i, line in enumerate(lines) if b'"kind":"tool_result"' in line)
    line = bytearray(lines[target])
    position = line.index(b'"exit_code":') + len(b'"exit_code":')
    line[position] = ord("7") if line[position] != ord("7") else ord("8")
    lines[target] = bytes(line)
    copy.write_bytes(b"".join(lines))
    (tmp_path / "blobs").mkdir()
    result = subprocess.run([sys.executable, "-m", "harness.cli", "verify", str(copy)],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert f"event {target} (tool_result)" in result.stderr


def test_symlink_to_host_file_and_rewritten_history(tmp_path: Path) -> None:
    script = write_script(tmp_path, [
        {"tool": "bash", "args": {"command": (
            "ln -s /etc/passwd leak && ln -s ../../../../root host-root && "
            "echo '# changed by the agent' >> train.py && printf '\\x00\\x01' > blob.bin && "
            "git add -A && git commit -qm evil && rm -rf .git && git init -q && "
            "git add -A && git commit -qm 'a clean-looking history'")}},
        {"tool": "submit", "args": {"summary": "done"}},
    ])
    study = write_study(tmp_path, agent={"model": f"scripted:{script}"})
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                          log=lambda _m: None)
    patch = (attempt / "submission.diff").read_text(errors="replace")
    assert "new file mode 120000" in patch and "+/etc/passwd" in patch
    assert "root:x:0:0" not in patch  # the link was not followed
    assert "+# changed by the agent" in patch and "blob.bin" in patch
    assert (attempt / "final" / "leak").is_symlink()
    assert not (attempt / "final" / ".git").exists()


def test_exception_mid_session_leaves_no_container_and_a_valid_transcript(
    tmp_path: Path, client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_run = ToolRunner.run
    calls = []

    def failing_run(self: ToolRunner, name: str, args: dict[str, object]) -> object:
        calls.append(name)
        if len(calls) > 1:  # the second tool call blows up inside the harness
            raise RuntimeError("injected failure after 1 tool call")
        return real_run(self, name, args)

    monkeypatch.setattr(ToolRunner, "run", failing_run)
    study = write_study(tmp_path)
    with pytest.raises(RuntimeError, match="injected failure"):
        run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                    log=lambda _m: None)
    attempt = tmp_path / "runs" / "fixture" / SESSION / "attempt-1"
    record = read_record(attempt)
    assert record.outcome == "harness_error" and "injected failure" in (record.error or "")
    assert verify(attempt / TRANSCRIPT_NAME).ok
    assert session_containers(client, SESSION, tmp_path / "runs/fixture") == []


def test_a_sandbox_that_will_not_go_still_leaves_the_record(
    tmp_path: Path, client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daemon refuses the removal (here: the real removal runs, then an error is raised as
    # a daemon's would be): the record and the rest of the transcript are written all the
    # same, the failure said in both the transcript and the log.
    real_close = Sandbox.close

    def refusing_close(self: Sandbox) -> None:
        real_close(self)
        raise HarnessError("container harness-x is still being removed after 60 s")

    monkeypatch.setattr(Sandbox, "close", refusing_close)
    said: list[str] = []
    study = write_study(tmp_path)
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                          log=said.append)
    record = read_record(attempt)
    assert record.status == "finished" and record.diff is not None
    transcript = attempt / TRANSCRIPT_NAME
    assert verify(transcript).ok
    kinds = [e.kind for e in read_events(transcript)]
    assert "sandbox_removed" not in kinds and kinds[-1] == "session_end"
    failed = [e for e in read_events(transcript) if e.kind == "error"]
    assert [e.data["phase"] for e in failed] == ["sandbox"]
    assert "still being removed" in failed[0].data["error"]
    assert any("harness cleanup" in line for line in said)
    assert session_containers(client, SESSION, tmp_path / "runs/fixture") == []


def test_sigkill_of_the_harness_then_cleanup(tmp_path: Path, client: docker.DockerClient) -> None:
    script = write_script(tmp_path, [
        {"tool": "bash", "args": {"command": "echo working; sleep 60"}},
        {"tool": "submit", "args": {"summary": "never reached"}},
    ])
    study = write_study(tmp_path, agent={"model": f"scripted:{script}"})
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "session", "--study",
                             str(study), "--pair", "1", "--arm", "control", "--no-grade"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    transcript = tmp_path / "runs" / "fixture" / SESSION / "attempt-1" / TRANSCRIPT_NAME
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if transcript.exists() and b'"kind":"tool_call"' in transcript.read_bytes():
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the session never reached its first tool call")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # left behind by the kill
    assert len(session_containers(client, SESSION, tmp_path / "runs/fixture")) == 1
    assert verify(transcript).ok
    result = subprocess.run([sys.executable, "-m", "harness.cli", "cleanup", "--runs",
                             str(tmp_path / "runs")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert session_containers(client, SESSION, tmp_path / "runs/fixture") == []
    record = read_record(transcript.parent)
    assert record.status == "interrupted" and record.outcome == "interrupted"
    report = verify(transcript)
    assert report.ok and read_events(transcript)[-1].kind == "session_interrupted"


def test_tool_call_budget_ends_the_session_and_the_diff_is_still_graded(
    tmp_path: Path,
) -> None:
    study = write_study(tmp_path, budget={"tool_calls": 2})
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control"),
                          log=lambda _m: None)
    record = read_record(attempt)
    assert record.outcome == "budget_exhausted:tool_calls"
    assert record.usage is not None and record.usage.tool_calls == 2
    grades = read_grades(attempt, record)
    assert record.diff is not None and grades  # extracted and graded all the same
    assert grades[-1].verdict in ("incomplete", "complete")


def test_wall_clock_budget_bounds_the_running_tool_call(tmp_path: Path) -> None:
    script = write_script(tmp_path, [
        {"tool": "bash", "args": {"command": "sleep 120", "timeout_s": 600}},
        {"tool": "submit", "args": {"summary": "too late"}},
    ])
    study = write_study(tmp_path, agent={"model": f"scripted:{script}"},
                        budget={"wall_seconds": 6})
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                          log=lambda _m: None)
    record = read_record(attempt)
    assert record.outcome == "budget_exhausted:wall_seconds"
    results = [e for e in read_events(attempt / TRANSCRIPT_NAME)
               if e.kind == "tool_result"]
    assert results[0].data["timed_out"] and results[0].data["duration_s"] < 20
    # The diff is kept for grading (a budget stop is graded all the same: the tool-call test).
    assert record.diff is not None


def test_a_hostile_agents_calls_are_its_own_failures_and_snapshots_freeze_it(
    tmp_path: Path,
) -> None:
    """Arguments of the wrong type (or NaN) are failed calls the agent sees, never a harness
    error a matrix would retry; a tool the arm lacks takes no snapshot; and a snapshot is taken
    with the agent's processes frozen, so one left running gains no time off the clock."""
    script = write_script(tmp_path, [
        {"tool": "bash", "args": {"command": 123}},
        {"tool": "write_file", "args": {"path": "x.py", "content": ["not", "text"]}},
        {"tool": "bash", "args": {"command": "echo nan", "timeout_s": float("nan")}},
        {"tool": "bash", "args": {"command": "setsid sh -c 'while :; do date +%s%N >> "
                                             "/tmp/beat; sleep 0.05; done' >/dev/null 2>&1 &"}},
        {"tool": "traincheck", "args": {"configuration": "cpu-1"}},
        {"tool": "run_public_tests", "args": {}},
        {"tool": "submit", "args": {"summary": "done"}},
    ])
    study = write_study(tmp_path, agent={"model": f"scripted:{script}"})
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control",
                                         grade=False), log=lambda _m: None)
    record = read_record(attempt)
    assert record.outcome == "submitted", record.error
    events = read_events(attempt / TRANSCRIPT_NAME)
    results = [e.data for e in events if e.kind == "tool_result"]
    assert [r["ok"] for r in results[:3]] == [False, False, False]
    assert "command must be a string" in results[0]["output"]
    assert "content must be a string" in results[1]["output"]
    assert "not a JSON object of finite values" in results[2]["output"]
    assert results[4]["output"] == "unknown tool 'traincheck'"
    # The NaN call is recorded as the text that was sent, not as a null timeout.
    calls = [e.data for e in events if e.kind == "tool_call"]
    assert "NaN" in calls[2]["args"]["__unparsed_arguments__"]
    snapshots = [e.data for e in events if e.kind == "snapshot"]
    assert [s["trigger"] for s in snapshots] == ["run_public_tests", "submit"]
    assert all(s["paused"] and s["diff"] for s in snapshots), snapshots
    assert verify(attempt / TRANSCRIPT_NAME).ok
