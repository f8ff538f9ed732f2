"""The real openai and anthropic SDKs over HTTP against a local server speaking each API."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from harness import records
from harness.agent.loop import build_system_prompt
from harness.agent.providers import make_provider
from harness.agent.providers.base import DeadlineReached, Provider, ProviderError
from harness.agent.tools import COMMON_TOOLS, EXTRA_TOOLS, ToolSpec, tools_for_arm
from harness.session import SessionOptions, run_session
from harness.study import AgentSettings, RetryPolicy
from harness.transcript import read_events, verify
from tests.conftest import session_containers, write_script, write_study
from tests.fake_model_server import (
    FakeModelServer,
    Reply,
    anthropic_text_reply,
    anthropic_tool_reply,
    openai_text_reply,
    openai_tool_reply,
)

FAST_RETRY = RetryPolicy(max_attempts=5, initial_wait_s=0.05, max_wait_s=2.0, jitter_s=0.01)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    with FakeModelServer() as srv:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", f"{srv.url}/v1")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
        yield srv


def provider(kind: str, **settings: Any) -> Provider:
    return make_provider(AgentSettings(model=f"{kind}:fake-model", retry=FAST_RETRY, **settings))


def tool_reply(kind: str, name: str, args: dict[str, Any], inp: int, out: int,
               call_id: str = "c1") -> Reply:
    if kind == "openai":
        return openai_tool_reply(name, args, prompt_tokens=inp, completion_tokens=out,
                                 call_id=call_id)
    return anthropic_tool_reply(name, args, input_tokens=inp, output_tokens=out,
                                call_id=call_id)


def text_reply(kind: str, text: str, inp: int, out: int) -> Reply:
    if kind == "openai":
        return openai_text_reply(text, prompt_tokens=inp, completion_tokens=out)
    return anthropic_text_reply(text, input_tokens=inp, output_tokens=out)


MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "do it"}]
TOOLS = [t.api_dict() for t in COMMON_TOOLS]


def test_openai_tool_call_round_trip(server: FakeModelServer) -> None:
    server.replies.append(tool_reply("openai", "bash", {"command": "ls"}, 100, 7))
    turn = provider("openai", temperature=0.2).next_turn(MESSAGES, TOOLS, 321)
    assert [(c.name, c.args) for c in turn.tool_calls] == [("bash", {"command": "ls"})]
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (100, 7)
    (request,) = server.requests
    body = request["body"]
    assert request["path"] == "/v1/chat/completions"
    assert body["model"] == "fake-model" and body["max_completion_tokens"] == 321
    assert body["temperature"] == 0.2
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert {t["function"]["name"] for t in body["tools"]} == {t.name for t in COMMON_TOOLS}
    assert request["headers"]["authorization"] == "Bearer test-key"


def test_anthropic_tool_use_round_trip_groups_tool_results(server: FakeModelServer) -> None:
    server.replies.append(tool_reply("anthropic", "read_file", {"path": "a.py"}, 50, 9))
    turn = provider("anthropic", reasoning={"thinking_budget_tokens": 1024}).next_turn(
        MESSAGES, TOOLS, 2048)
    assert turn.tool_calls[0].name == "read_file" and turn.provider_content
    body = server.requests[0]["body"]
    assert body["system"] == "sys" and body["max_tokens"] == 2048
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert {t["name"] for t in body["tools"]} == {t.name for t in COMMON_TOOLS}
    assert all("input_schema" in t for t in body["tools"])
    headers = server.requests[0]["headers"]
    assert "test-key" in (headers.get("x-api-key", "") + headers.get("authorization", ""))
    # Second turn: the assistant's blocks go back verbatim, results of one turn together.
    history = [*MESSAGES,
               {"role": "assistant", "content": "", "provider_content": turn.provider_content,
                "tool_calls": []},
               {"role": "tool", "tool_call_id": "c1", "content": "one"},
               {"role": "tool", "tool_call_id": "c2", "content": "two"}]
    server.replies.append(text_reply("anthropic", "done", 80, 3))
    provider("anthropic").next_turn(history, TOOLS, 100)
    sent = server.requests[1]["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == turn.provider_content
    assert [b["tool_use_id"] for b in sent[2]["content"]] == ["c1", "c2"]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_retries_429_500_and_dropped_connection(server: FakeModelServer, kind: str) -> None:
    server.replies += [
        Reply(status=429, body={"error": {"message": "slow down"}},
              headers={"Retry-After": "1"}),
        Reply(status=500, body={"error": {"message": "boom"}}),
        Reply(drop=True),
        tool_reply(kind, "submit", {"summary": "ok"}, 40, 5),
    ]
    events: list[tuple[str, dict[str, Any]]] = []
    started = time.monotonic()
    turn = provider(kind).next_turn(MESSAGES, TOOLS, 64,
                                    on_event=lambda k, d: events.append((k, d)))
    elapsed = time.monotonic() - started
    assert turn.tool_calls[0].name == "submit"
    attempts = [d for k, d in events if k == "model_attempt"]
    waits = [d["wait_s"] for k, d in events if k == "model_retry_wait"]
    assert [a["ok"] for a in attempts] == [False, False, False, True]
    assert [a["status"] for a in attempts[:2]] == [429, 500]
    assert attempts[0]["retry_after_s"] == 1.0
    assert len(waits) == 3 and waits[0] == 1.0  # Retry-After honoured exactly
    assert elapsed >= sum(waits) and len(server.requests) == 4


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize(("reply", "expected"), [
    (Reply(status=200, body="{this is not json"), "malformed_response"),
    (Reply(status=200, body={"unexpected": "shape"}), "malformed_response"),
    (Reply(status=400, body={"error": {"message": "bad"}}), "bad_request"),
    (Reply(status=401, body={"error": {"message": "who"}}), "auth"),
])
def test_unfixable_errors_are_not_retried(
    server: FakeModelServer, kind: str, reply: Reply, expected: str
) -> None:
    server.replies.append(reply)
    events: list[str] = []
    with pytest.raises(ProviderError) as info:
        provider(kind).next_turn(MESSAGES, TOOLS, 64, on_event=lambda k, _d: events.append(k))
    assert info.value.kind == expected
    assert len(server.requests) == 1 and events == ["model_attempt"]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_reply_slower_than_the_time_left_is_cut_at_the_deadline(
    server: FakeModelServer, kind: str
) -> None:
    server.replies.append(Reply(delay_s=8, body={}))
    deadline = time.monotonic() + 1.5
    started = time.monotonic()
    with pytest.raises(DeadlineReached):
        provider(kind).next_turn(MESSAGES, TOOLS, 64,
                                 time_left=lambda: max(0.0, deadline - time.monotonic()))
    assert time.monotonic() - started < 4


# --- whole sessions, with the real container ------------------------------------------------


def session_events(attempt: Path, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in read_events(attempt / records.TRANSCRIPT_NAME) if e.kind == kind]


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
    record = records.read_record(attempt)
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
    assert verify(attempt / records.TRANSCRIPT_NAME).ok


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
    record = records.read_record(attempt)
    assert record.outcome == "budget_exhausted:tokens_total"
    assert record.usage is not None and record.usage.tokens_total == 7000 <= 12000
    assert len(server.requests) == 1  # the second call could not fit, so it was never sent
    bound = session_events(attempt, "model_request")[0]["input_tokens_bound"]
    assert server.requests[0]["body"]["max_tokens"] == min(4096, 12000 - bound)
    assert record.diff is not None and record.grades  # extracted and graded all the same


def test_wall_budget_cancels_an_in_flight_model_call(
    server: FakeModelServer, tmp_path: Path
) -> None:
    server.replies.append(Reply(delay_s=30, body={}))
    study = write_study(tmp_path, agent={"model": "openai:fake-model",
                                         "retry": FAST_RETRY.model_dump()},
                        budget={"wall_seconds": 4})
    started = time.monotonic()
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                          log=lambda _m: None)
    assert records.read_record(attempt).outcome == "budget_exhausted:wall_seconds"
    assert time.monotonic() - started < 25


def test_candidate_run_budget(tmp_path: Path) -> None:
    script = write_script(tmp_path, [
        {"tool": "run_candidate", "args": {"configuration": "cpu-1"}},
        {"tool": "run_candidate", "args": {"configuration": "cpu-1"}},
        {"tool": "submit", "args": {"summary": "never reached"}},
    ])
    study = write_study(tmp_path, agent={"model": f"scripted:{script}"},
                        budget={"candidate_runs": 1})
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control"),
                          log=lambda _m: None)
    record = records.read_record(attempt)
    assert record.outcome == "budget_exhausted:candidate_runs"
    assert record.diff is not None and record.grades  # graded all the same
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
    record = records.read_record(attempt)
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
