"""The real openai and anthropic SDKs over HTTP against a local server speaking each API."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from harness.agent.loop import build_system_prompt
from harness.agent.tools import ToolSpec
from harness.agent.toolsets import EXTRA_TOOLS, tools_for_arm
from harness.records.attempt import TRANSCRIPT_NAME, read_grades, read_record
from harness.records.transcript import read_events, verify
from harness.study.session import SessionOptions, run_session
from tests.conftest import FAST_RETRY, session_containers, write_script, write_study
from tests.fake_model_server import FakeModelServer, Reply, tool_reply

# --- whole sessions, with the real container ------------------------------------------------


def session_events(attempt: Path, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in read_events(attempt / TRANSCRIPT_NAME) if e.kind == kind]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_session_through_the_sdk_sums_usage_exactly(
    server: FakeModelServer, tmp_path: Path, kind: str
) -> None:
    server.replies += [
        tool_reply(kind, "write_file", {"path": "NOTES.md", "content": "hello\n"}, 1234, 56),
        Reply(status=503, body={"error": {"message": "busy"}}, headers={"Retry-After": "0"}),
        tool_reply(kind, "bash", {"command": "cat NOTES.md"}, 1400, 21, call_id="c2"),
        tool_reply(kind, "submit", {"summary": "wrote notes"}, 1500, 11, call_id="c3"),
    ]
    study = write_study(tmp_path, agent={"model": f"{kind}:fake-model", "temperature": 0.0,
                                         "retry": FAST_RETRY.model_dump()})
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                          log=lambda _m: None)
    record = read_record(attempt)
    assert record.outcome == "submitted" and record.diff and record.diff.files_changed == [
        "NOTES.md"]
    usage = record.usage
    assert usage is not None
    assert (usage.tokens_input, usage.tokens_output) == (1234 + 1400 + 1500, 56 + 21 + 11)
    assert usage.tokens_total == usage.tokens_input + usage.tokens_output
    assert usage.compute_seconds["inference"] > 0 and "retries" in usage.compute_seconds
    attempts = session_events(attempt, "model_attempt")
    assert [a["ok"] for a in attempts] == [True, False, True, True]
    results = session_events(attempt, "tool_result")
    assert "hello" in results[1]["shown_to_model"]
    start = session_events(attempt, "session_start")[0]
    assert start["model"]["model"] == f"{kind}:fake-model" and start["model"]["temperature"] == 0
    assert all(r["body"]["temperature"] == 0.0 for r in server.requests)
    assert verify(attempt / TRANSCRIPT_NAME).ok


def test_token_budget_stops_before_an_unaffordable_call_and_the_diff_is_graded(
    server: FakeModelServer, tmp_path: Path
) -> None:
    server.replies += [
        tool_reply("anthropic", "write_file", {"path": "NOTES.md", "content": "x\n"}, 3000, 4000),
        tool_reply("anthropic", "submit", {"summary": "never sent"}, 10, 10, call_id="c2"),
    ]
    study = write_study(tmp_path, agent={"model": "anthropic:fake-model",
                                         "retry": FAST_RETRY.model_dump()},
                        budget={"tokens_total": 12000})
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control"),
                          log=lambda _m: None)
    record = read_record(attempt)
    assert record.outcome == "budget_exhausted:tokens_total"
    assert record.usage is not None and record.usage.tokens_total == 7000 <= 12000
    assert len(server.requests) == 1  # the second call could not fit, so it was never sent
    bound = session_events(attempt, "model_request")[0]["input_tokens_bound"]
    assert server.requests[0]["body"]["max_tokens"] == min(4096, 12000 - bound)
    assert record.diff is not None and read_grades(attempt, record)  # graded all the same


def test_wall_budget_cancels_an_in_flight_model_call(
    server: FakeModelServer, tmp_path: Path
) -> None:
    # The reply would come after two minutes; the session's 4 s wall budget must cancel the
    # call. The bound tells "cancelled" from "waited" on a loaded host; it times nothing finer.
    server.replies.append(Reply(delay_s=120, body={}))
    study = write_study(tmp_path, agent={"model": "openai:fake-model",
                                         "retry": FAST_RETRY.model_dump()},
                        budget={"wall_seconds": 4})
    started = time.monotonic()
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                          log=lambda _m: None)
    assert read_record(attempt).outcome == "budget_exhausted:wall_seconds"
    assert time.monotonic() - started < 90


def test_candidate_run_budget(tmp_path: Path) -> None:
    script = write_script(tmp_path, [
        {"tool": "run_candidate", "args": {"configuration": "cpu-1"}},
        {"tool": "run_candidate", "args": {"configuration": "cpu-1"}},
        {"tool": "submit", "args": {"summary": "never reached"}},
    ])
    study = write_study(tmp_path, agent={"model": f"scripted:{script}"},
                        budget={"candidate_runs": 1})
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                          log=lambda _m: None)
    record = read_record(attempt)
    assert record.outcome == "budget_exhausted:candidate_runs"
    assert record.diff is not None  # kept for grading, as after any other budget stop
    assert record.usage is not None and record.usage.candidate_runs == 1
    assert record.usage.compute_seconds["candidate_runs"] > 0
    first = session_events(attempt, "tool_result")[0]
    assert first["exit_code"] == 0, first["output"][-2000:]


@pytest.mark.parametrize(("model", "variable"), [("openai:gpt-x", "OPENAI_API_KEY"),
                                                 ("anthropic:claude-x", "ANTHROPIC_API_KEY")])
def test_missing_key_is_one_clear_line_and_no_container(
    tmp_path: Path, client: docker.DockerClient, model: str, variable: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(variable, raising=False)
    study = write_study(tmp_path)
    result = subprocess.run([sys.executable, "-m", "harness.cli", "session", "--study",
                             str(study), "--pair", "1", "--arm", "control", "--model", model],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and variable in lines[0] and lines[0].startswith("error:")
    assert not (tmp_path / "runs").exists()
    assert session_containers(client, "tiny-regression-pair1-control",
                              tmp_path / "runs/fixture") == []


def test_model_override_is_recorded_outside_the_study(
    server: FakeModelServer, tmp_path: Path
) -> None:
    server.replies.append(tool_reply("openai", "submit", {"summary": "s"}, 10, 2))
    attempt = run_session(SessionOptions(study_path=write_study(tmp_path), pair=1,
                                         arm="control", grade=False,
                                         model="openai:override-model"), log=lambda _m: None)
    record = read_record(attempt)
    assert record.model == "openai:override-model" and record.in_frozen_study is False
    assert server.requests[0]["body"]["model"] == "override-model"


def test_arms_differ_only_by_the_treatment_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = ToolSpec(name="probe", description="A diagnostic probe.", parameters={
        "type": "object", "properties": {}, "required": []})
    monkeypatch.setitem(EXTRA_TOOLS, "probe", probe)
    script = write_script(tmp_path, [{"tool": "submit", "args": {"summary": "s"}}])
    study = write_study(tmp_path, agent={"model": f"scripted:{script}"},
                        arms={"control": {"image": "control"},
                              "treatment": {"image": "treatment", "extra_tools": ["probe"]}})
    starts = {}
    for arm in ("control", "treatment"):
        attempt = run_session(SessionOptions(study_path=study, pair=1, arm=arm, grade=False),
                              log=lambda _m: None)
        starts[arm] = session_events(attempt, "session_start")[0]
    control, treatment = starts["control"], starts["treatment"]
    assert treatment["tools"] == [*control["tools"], "probe"]
    control_lines = control["system_prompt"].splitlines()
    treatment_lines = treatment["system_prompt"].splitlines()
    assert treatment_lines == [*control_lines, "- probe: A diagnostic probe."]
    for key in ("model", "budget", "task", "seed", "pair"):
        assert control[key] == treatment[key], key
    assert tools_for_arm(["probe"])[-1] == probe
    assert build_system_prompt(None, tools_for_arm([])) == control["system_prompt"]
