"""Session integrity (issue 11), each as a real session with a scripted or SDK agent.

Every test ends with a recorded outcome, a transcript that verifies against the end its
session recorded, a graded diff where a diff exists, and no container of the session left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import pytest

from grading.models import GradeReport
from harness.paths import REPO_ROOT
from harness.records.attempt import (
    MANIFEST_NAME,
    RECORD_NAME,
    TRANSCRIPT_NAME,
    SessionRecord,
    read_grades,
    read_record,
    write_record,
)
from harness.records.transcript import read_events, read_text
from harness.records.verify import verify_attempt
from harness.study.session import SessionOptions, run_session
from tests.conftest import FAST_RETRY, session_containers, write_script, write_study
from tests.fake_model_server import FakeModelServer, Reply, tool_reply
from tests.helpers import HARNESS, harness, one_error_line

SESSION = "tiny-regression-pair1-control"
CHANGE = {"tool": "bash", "args": {"command": "echo '# changed by the agent' >> train.py"}}
SUBMIT = {"tool": "submit", "args": {"summary": "done"}}


def session(tmp_path: Path, steps: list[dict[str, Any]], *, grade: bool = False,
            **study: Any) -> Path:
    """A scripted session; graded only where the grader's side is what the test is about (a
    session grades any diff at its end, whatever the outcome: test_session.py shows it)."""
    script = write_script(tmp_path, steps)
    path = write_study(tmp_path, agent={"model": f"scripted:{script}"}, **study)
    return run_session(SessionOptions(study_path=path, pair=1, arm="control", grade=grade),
                       log=lambda _m: None)


def events(attempt: Path, kind: str) -> list[Any]:
    return [e for e in read_events(attempt / TRANSCRIPT_NAME) if e.kind == kind]


def assert_ended_cleanly(attempt: Path, client: docker.DockerClient, outcome: str,
                         *, graded: bool = False) -> SessionRecord:
    record = read_record(attempt)
    assert record.outcome == outcome, (record.outcome, record.error)
    verdict = verify_attempt(attempt)
    assert verdict.ok and not verdict.notes, verdict
    assert record.transcript is not None and record.transcript.events == verdict.events
    if graded and record.diff is not None:
        assert read_grades(attempt, record), "a diff exists but was not graded"
    assert session_containers(client, SESSION, attempt.parent.parent) == []
    return record


def ns(timestamp: str) -> int:
    moment = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return int(moment.timestamp() * 1_000_000) * 1000


# --- a consistent final tree ------------------------------------------------------------------


def test_processes_left_running_are_frozen_and_killed_before_the_copy_out(
    tmp_path: Path, client: docker.DockerClient
) -> None:
    writer = "while :; do date +%s%N >> ticks.log; done"
    attempt = session(tmp_path, [
        {"tool": "bash", "args": {"command": f"nohup bash -c '{writer}' >/dev/null 2>&1 & "
                                             "sleep 1000 >/dev/null 2>&1 &"}},
        {"tool": "bash", "args": {"command": "sleep 1; test -s ticks.log"}},
        CHANGE, SUBMIT,
    ])
    record = assert_ended_cleanly(attempt, client, "submitted")
    stop = record.processes_stopped
    assert stop is not None and stop.frozen and stop.method == "sigkill_while_frozen"
    commands = [p.command for p in stop.processes]
    assert any(writer in c for c in commands) and "sleep 1000" in commands, commands
    assert all(p.uid == 1000 for p in stop.processes) and stop.survivors == []
    # Nothing was written after the agent's end: the freeze came first.
    ticks = (attempt / "final" / "ticks.log").read_bytes()
    assert ticks.endswith(b"\n")
    last_tick = int(ticks.splitlines()[-1])
    (agent_end,) = events(attempt, "agent_end")
    assert last_tick <= ns(agent_end.ts)
    kinds = [e.kind for e in read_events(attempt / TRANSCRIPT_NAME)]
    assert kinds.index("agent_end") < kinds.index("processes_stopped") < kinds.index("diff")
    assert record.diff is not None and "ticks.log" in record.diff.files_changed


# --- any bytes ----------------------------------------------------------------------------------


def test_file_names_that_are_not_utf8_reach_the_diff_and_the_grader(
    tmp_path: Path, client: docker.DockerClient
) -> None:
    attempt = session(tmp_path, [
        {"tool": "bash", "args": {"command": "mkdir $'dir\\xfe' && printf 'x\\n' > "
                                             "$'dir\\xfe/bad\\xff.txt' && printf 'y\\n' > "
                                             "$'caf\\xe9.txt'"}},
        CHANGE, SUBMIT,
    ], grade=True)
    record = assert_ended_cleanly(attempt, client, "submitted", graded=True)
    names = [os.fsdecode(b"caf\xe9.txt"), os.fsdecode(b"dir\xfe/bad\xff.txt"), "train.py"]
    assert record.diff is not None and record.diff.files_changed == names
    (diff_event,) = events(attempt, "diff")
    assert diff_event.data["files_changed"] == names  # exactly, lone surrogates and all
    raw = (attempt / RECORD_NAME).read_bytes()
    assert "\\udcfe" in raw.decode("utf-8")  # escaped in valid UTF-8 JSON, not mangled
    assert os.listdir(os.fsencode(attempt / "final" / os.fsdecode(b"dir\xfe"))) == [b"bad\xff.txt"]
    patch = (attempt / "submission.diff").read_bytes()
    assert b'"b/dir\\376/bad\\377.txt"' in patch and b'"b/caf\\351.txt"' in patch


def sdk_session(tmp_path: Path, kind: str, **budget: Any) -> Path:
    study = write_study(tmp_path, agent={"model": f"{kind}:fake-model",
                                         "retry": FAST_RETRY.model_dump()}, **budget)
    return run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                       log=lambda _m: None)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_lone_surrogate_in_tool_arguments_is_recorded_and_refused(
    server: FakeModelServer, tmp_path: Path, client: docker.DockerClient, kind: str
) -> None:
    # The server writes "\ud800" as a JSON escape; the SDK's json.loads hands it over as is.
    server.replies += [
        tool_reply(kind, "bash", {"command": "echo \ud800 > x.txt"}, 100, 10),
        tool_reply(kind, "write_file", {"path": "NOTES.md", "content": "ok\n"}, 200, 10, "c2"),
        tool_reply(kind, "submit", {"summary": "s"}, 300, 10, "c3"),
    ]
    attempt = sdk_session(tmp_path, kind)
    record = assert_ended_cleanly(attempt, client, "submitted")
    first = events(attempt, "model_response")[0].data
    assert first["tool_calls"][0]["args"] == {"command": "echo \ud800 > x.txt"}  # lossless
    refused = events(attempt, "tool_result")[0].data
    assert not refused["ok"] and "lone surrogate U+D800 at character 5" in refused["output"]
    assert record.diff is not None and record.diff.files_changed == ["NOTES.md"]
    # The model's own turn went back to it, with U+FFFD where UTF-8 cannot carry the escape.
    sent = server.requests[1]["body"]["messages"]
    assert echoed_arguments(kind, sent) == [{"command": "echo \ufffd > x.txt"}]
    assert "lone surrogate" in json.dumps(sent)


def echoed_arguments(kind: str, messages: list[dict[str, Any]]) -> list[Any]:
    """The tool-call arguments of the assistant turns sent back, as each API spells them."""
    turns = [m for m in messages if m["role"] == "assistant"]
    if kind == "openai":
        return [json.loads(c["function"]["arguments"]) for m in turns for c in m["tool_calls"]]
    return [b["input"] for m in turns for b in m["content"] if b["type"] == "tool_use"]


def test_a_10_mb_argument_goes_to_a_blob(tmp_path: Path, client: docker.DockerClient) -> None:
    content = "".join(f"line {i:07d} of a large file written in one tool call\n"
                      for i in range(200_000))
    assert len(content) > 10_000_000
    attempt = session(tmp_path, [
        {"tool": "write_file", "args": {"path": "big.txt", "content": content}},
        {"tool": "bash", "args": {"command": "#" + "x" * 200_000}},
        SUBMIT,
    ], grade=True)
    record = assert_ended_cleanly(attempt, client, "submitted", graded=True)
    assert (attempt / TRANSCRIPT_NAME).stat().st_size < 1_000_000
    (call,) = [e for e in events(attempt, "tool_call") if e.data["name"] == "write_file"]
    assert call.data["args"]["content"].keys() == {"blob", "size", "text"}
    path = attempt / TRANSCRIPT_NAME
    assert read_text(path, call.data)["args"]["content"] == content
    too_long = events(attempt, "tool_result")[1].data
    assert not too_long["ok"] and "command too long" in too_long["output"]
    assert record.diff is not None and record.diff.files_changed == ["big.txt"]
    assert (attempt / "final" / "big.txt").read_text() == content


# --- a chain that cannot be cut --------------------------------------------------------------


def verify_cli(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HARNESS, "verify", str(folder)], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("cut", ["partial_last_line", "no_session_end", "last_three_events"])
def test_a_finished_transcript_cut_at_its_end_fails_verify(
    demo_attempt: Path, tmp_path: Path, cut: str
) -> None:
    copy = tmp_path / "attempt"
    shutil.copytree(demo_attempt, copy, symlinks=True)
    assert verify_cli(copy).returncode == 0
    transcript = copy / TRANSCRIPT_NAME
    lines = transcript.read_bytes().splitlines(keepends=True)
    assert b'"kind":"session_end"' in lines[-1]
    kept = {"partial_last_line": b"".join(lines)[:-40], "no_session_end": b"".join(lines[:-1]),
            "last_three_events": b"".join(lines[:-3])}[cut]
    transcript.write_bytes(kept)
    result = verify_cli(copy)
    assert result.returncode == 1
    expected = "partial line" if cut == "partial_last_line" else "cut off the end"
    assert expected in result.stderr and "Traceback" not in result.stderr


def test_a_partial_last_line_is_ok_only_for_a_session_that_never_finished(
    demo_attempt: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "attempt"
    shutil.copytree(demo_attempt, copy, symlinks=True)
    record = read_record(copy)
    record.status, record.transcript = "running", None  # as a SIGKILL leaves it
    write_record(copy, record)
    transcript = copy / TRANSCRIPT_NAME
    transcript.write_bytes(transcript.read_bytes()[:-40])
    result = verify_cli(copy)
    assert result.returncode == 0, result.stderr
    assert "never finished" in result.stdout and "partial line" in result.stdout


def test_a_head_the_manifest_does_not_repeat_fails_verify(
    demo_attempt: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "attempt"
    shutil.copytree(demo_attempt, copy, symlinks=True)
    manifest = json.loads((copy / MANIFEST_NAME).read_text())
    manifest["transcript"]["events"] -= 1
    (copy / MANIFEST_NAME).write_text(json.dumps(manifest))
    result = verify_cli(copy)
    assert result.returncode == 1 and "manifest.json" in result.stderr


# --- bounded disks and outputs ---------------------------------------------------------------


def test_filling_the_workspace_ends_the_session_as_workspace_full(
    tmp_path: Path, client: docker.DockerClient
) -> None:
    attempt = session(tmp_path, [
        CHANGE,
        {"tool": "bash", "args": {"command": "head -c 3G /dev/zero > fill.bin; df /workspace"}},
        SUBMIT,
    ])
    record = assert_ended_cleanly(attempt, client, "workspace_full")
    fill = events(attempt, "tool_result")[1].data
    assert "No space left on device" in fill["output"]
    (full,) = events(attempt, "workspace_full")
    assert full.data["bytes_total"] == 2 * 1024**3 and full.data["bytes_free"] < 1024**2
    assert [e.data["name"] for e in events(attempt, "tool_call")] == ["bash", "bash"]
    # The 2 GiB tree is over the copy-out cap: no diff, and the record says why.
    assert record.diff is None and "over the cap" in (record.error or "")


def test_an_output_past_the_artifact_cap_is_marked_as_cut(
    tmp_path: Path, client: docker.DockerClient
) -> None:
    size = 300 * 1024**2
    attempt = session(tmp_path, [
        {"tool": "bash", "args": {"command": f"head -c {size} /dev/zero | tr '\\0' a; echo"}},
        CHANGE, SUBMIT,
    ])
    assert_ended_cleanly(attempt, client, "submitted")
    result = events(attempt, "tool_result")[0].data
    cap = 256 * 1024**2
    assert result["output_bytes"] == size + 1 and result["artifact_truncated"]
    assert result["artifact_bytes"] == cap == Path(result["artifact"]).stat().st_size
    for text in (read_text(attempt / TRANSCRIPT_NAME, result["output"]),
                 result["shown_to_model"]):
        assert f"first {cap} bytes are in" in text.lower(), text[-600:]
        assert f"last {size + 1 - cap} bytes were not kept" in text
        assert "whole output" not in text


# --- PID 1 is not the agent's ------------------------------------------------------------------


def test_the_agent_cannot_signal_or_trace_pid_1(tmp_path: Path,
                                                client: docker.DockerClient) -> None:
    ptrace = ("python -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
              "print(\"ptrace\", libc.ptrace(16, 1, 0, 0), ctypes.get_errno())'")
    attempt = session(tmp_path, [
        {"tool": "bash", "args": {"command": f"kill -TERM 1; kill -KILL 1; {ptrace}"}},
        CHANGE, SUBMIT,
    ])
    assert_ended_cleanly(attempt, client, "submitted")
    output = events(attempt, "tool_result")[0].data["output"]
    assert output.count("Operation not permitted") == 2 and "ptrace -1 1" in output  # EPERM


def test_a_sandbox_that_dies_under_the_agent_is_the_outcome_sandbox_lost(
    tmp_path: Path, client: docker.DockerClient
) -> None:
    transcript = tmp_path / "runs" / "fixture" / SESSION / "attempt-1" / TRANSCRIPT_NAME

    def kill_when_the_command_runs() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if transcript.exists() and b'"kind":"tool_call"' in transcript.read_bytes():
                time.sleep(0.5)
                for container in session_containers(client, SESSION, tmp_path / "runs/fixture"):
                    container.kill()  # as an OOM kill of PID 1 would end it
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_when_the_command_runs)
    killer.start()
    attempt = session(tmp_path, [
        {"tool": "bash", "args": {"command": "sleep 60"}}, CHANGE, SUBMIT,
    ])
    killer.join()
    record = assert_ended_cleanly(attempt, client, "sandbox_lost")
    assert "stopped: PID 1 exited with code 137" in (record.error or "")
    assert record.diff is None  # the RAM-backed workspace went with the container
    assert events(attempt, "sandbox_lost") and events(attempt, "copy_out_skipped")


# --- operator-facing edges --------------------------------------------------------------------


@pytest.mark.parametrize(("text", "words"), [
    ("id: tiny-regression\ntitle: [unclosed\n", ("packet.yaml", "not valid YAML at line")),
    ("id: tiny-regression\ntitle: t\nconfigurations: [tpu-8]\n",
     ("packet.yaml", "configurations.0", "problem(s)")),
])
def test_a_malformed_packet_is_one_clear_line(
    tmp_path: Path, client: docker.DockerClient, text: str, words: tuple[str, ...]
) -> None:
    packet = tmp_path / "packet"
    shutil.copytree(REPO_ROOT / "tests/fixtures/task_packets/tiny-regression", packet)
    (packet / "packet.yaml").write_text(text)
    study = write_study(tmp_path, tasks=[{"id": "tiny-regression", "packet": str(packet),
                                          "hidden": str(REPO_ROOT / "hidden/tiny-regression")}])
    result = subprocess.run([*HARNESS, "session", "--study", str(study), "--pair", "1",
                             "--arm", "control"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "fix:" in lines[0], lines
    assert all(word in lines[0] for word in words), lines[0]
    assert not (tmp_path / "runs").exists()
    assert session_containers(client, SESSION, tmp_path / "runs/fixture") == []


def test_sigterm_stops_the_session_with_one_line_and_no_traceback(
    tmp_path: Path, client: docker.DockerClient
) -> None:
    script = write_script(tmp_path, [CHANGE, {"tool": "bash", "args": {"command": "sleep 60"}},
                                     SUBMIT])
    study = write_study(tmp_path, agent={"model": f"scripted:{script}"})
    proc = subprocess.Popen([*HARNESS, "session", "--study", str(study), "--pair", "1",
                             "--arm", "control"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    attempt = tmp_path / "runs" / "fixture" / SESSION / "attempt-1"
    deadline = time.monotonic() + 120

    def sleeping() -> bool:  # the command runs in the container, not just recorded as called
        try:
            boxes = session_containers(client, SESSION, tmp_path / "runs/fixture")
            return any("sleep 60" in row[-1] for box in boxes
                       for row in box.top().get("Processes") or [])
        except docker.errors.APIError:  # created, not started yet
            return False

    while not sleeping():
        assert time.monotonic() < deadline and proc.poll() is None, "never reached sleep 60"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == [f"interrupted by SIGTERM: session recorded as interrupted in {attempt}"]
    record = read_record(attempt)
    assert record.status == "interrupted" and record.error == "interrupted by SIGTERM"
    assert record.processes_stopped is not None
    assert [p.command for p in record.processes_stopped.processes] == ["sleep 60"]
    # Stopping means stopping: the kept diff is graded on request, not on the way out.
    assert not read_grades(attempt, record) and record.diff is not None
    subprocess.run([*HARNESS, "grade", str(attempt)], capture_output=True, timeout=900)
    assert_ended_cleanly(attempt, client, "interrupted", graded=True)


def test_a_provider_error_is_the_records_error(
    server: FakeModelServer, tmp_path: Path, client: docker.DockerClient
) -> None:
    server.replies.append(Reply(status=400, body={"error": {"message": "bad tool schema"}}))
    attempt = sdk_session(tmp_path, "openai")
    record = assert_ended_cleanly(attempt, client, "provider_error:bad_request")
    assert record.error is not None and "bad tool schema" in record.error


def test_an_output_token_budget_stop_quotes_the_output_figure(
    tmp_path: Path, client: docker.DockerClient
) -> None:
    attempt = session(tmp_path, [
        {**CHANGE, "usage": {"input_tokens": 5000, "output_tokens": 300}}, SUBMIT,
    ], budget={"tokens_output": 300})
    assert_ended_cleanly(attempt, client, "budget_exhausted:tokens_output")
    (stop,) = events(attempt, "budget_exhausted")
    assert stop.data["message"] == ("budget exhausted: tokens_output (300 output tokens used, "
                                    "cap 300)")


# --- nothing re-blesses an attempt ---------------------------------------------------------------


def test_a_swapped_diff_is_refused_by_every_reader_and_nothing_is_written(
    demo_attempt: Path, tmp_path: Path
) -> None:
    """Garbage in place of submission.diff: grading it used to grade the garbage and rewrite
    the manifest over it; now every command that reads the attempt refuses it by name."""
    copy = tmp_path / "attempt"
    shutil.copytree(demo_attempt, copy, symlinks=True)
    (copy / "submission.diff").write_bytes(b"diff --git a/x b/x\n+garbage\n")
    listing = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    for args in (["grade", str(copy)], ["grade", str(copy), "--snapshots"],
                 ["audit", "propose", str(copy)]):
        one_error_line(harness(*args), "does not verify", "submission.diff")
    assert {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()} == listing
    result = verify_cli(copy)
    assert result.returncode == 1 and "submission.diff" in result.stderr
    timeline = harness("replay", str(copy))
    assert timeline.returncode == 1 and "submission.diff" in timeline.stdout + timeline.stderr


def test_a_regrade_adds_a_folder_changes_no_manifest_entry_and_gives_the_same_verdict(
    demo_attempt: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "attempt"
    shutil.copytree(demo_attempt, copy, symlinks=True)
    before = json.loads((copy / MANIFEST_NAME).read_text())["files"]
    record = (copy / RECORD_NAME).read_bytes()
    result = harness("grade", str(copy))
    assert result.returncode == 0, result.stderr
    after = json.loads((copy / MANIFEST_NAME).read_text())["files"]
    assert {k: after[k] for k in before} == before  # every entry as it was
    added = sorted(set(after) - set(before))
    assert added and all(rel.startswith("grades/grade-") for rel in added)
    assert (copy / RECORD_NAME).read_bytes() == record  # the record is never rewritten
    assert verify_cli(copy).returncode == 0
    # The same diff, graded again in a fresh container: the same verdict, contract by contract.
    grades = read_grades(copy)
    first, second = grades[0], grades[-1]
    assert first.folder != second.folder and second.reason is None
    earlier, again = (GradeReport.model_validate_json((copy / g.folder / "out" / "grade.json")
                                                      .read_text()) for g in (first, second))
    assert again.verdict == earlier.verdict == second.verdict == "complete"
    assert {c.id: c.outcome for c in again.contracts} == {
        c.id: c.outcome for c in earlier.contracts}
    assert again.submission_id != earlier.submission_id  # opaque, fresh per grading
