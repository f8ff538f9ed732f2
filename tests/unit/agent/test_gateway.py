"""The model gateway over its real unix socket, forwarding over real HTTP to the scripted
provider (or the fake server for faults): what it forwards, records, counts and refuses."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from harness.agent.gateway.apis import parse_answer
from harness.agent.gateway.scripted import ScriptedUpstream
from harness.agent.gateway.server import (
    SOCKET_DIR_PREFIX,
    Gateway,
    GatewaySettings,
    remove_orphan_socket_dirs,
    socket_dir_prefix,
)
from harness.agent.gateway.upstream import Upstream
from harness.agent.providers.scripted import Script
from harness.records import events
from harness.records.budget import Budget, Ledger
from harness.records.study import RetryPolicy
from harness.records.transcript import TranscriptWriter, read_events, verify
from tests.fake_model_server import FakeModelServer, Reply, anthropic_text_reply

KEY = "sk-unit-0123456789-SECRET"
FAST = RetryPolicy(max_attempts=4, initial_wait_s=0.01, max_wait_s=0.05, jitter_s=0.0)
STEPS = [{"tool": "write_file", "args": {"path": "hello.txt", "content": "hi\n"}},
         {"tool": "bash", "args": {"command": "ls"}},
         {"tool": "submit", "args": {"summary": "done"}}]


class Unix(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("gateway", timeout=30)
        self.unix_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(self.unix_path))


def post(gateway: Gateway, path: str, body: bytes | dict[str, Any],
         method: str = "POST") -> tuple[int, dict[str, str], bytes]:
    conn = Unix(gateway.socket_path)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"Content-Type": "application/json",
                                                   "anthropic-version": "2023-06-01",
                                                   "x-api-key": "placeholder"})
    response = conn.getresponse()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()


def anthropic_request(messages: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 1000, "stream": True,
            "messages": messages or [{"role": "user", "content": "go"}],
            "tools": [{"name": "Write"}, {"name": "Read"}, {"name": "Bash"}], **extra}


class Rig:
    def __init__(self, tmp: Path, budget: Budget, cli: str = "claude-code",
                 upstream_url: str | None = None) -> None:
        self.scripted = ScriptedUpstream(Script.model_validate({"steps": STEPS}), cli).start()
        provider = "anthropic" if cli == "claude-code" else "openai"
        base = upstream_url or (self.scripted.url if provider == "anthropic"
                                else f"{self.scripted.url}/v1")
        self.transcript_path = tmp / "transcript.jsonl"
        self.transcript = TranscriptWriter(self.transcript_path, events.validate)
        self.ledger = Ledger(budget, on_change=self.transcript.append)
        self.ledger.start()
        self.tools_called: list[tuple[str, dict[str, Any]]] = []

        def tools(name: str, args: dict[str, Any]) -> tuple[str, int]:
            self.tools_called.append((name, args))
            return f"ran {name}", 0

        self.gateway = Gateway(GatewaySettings(
            upstream=Upstream(provider=provider, base_url=base, key=SecretStr(KEY)),
            retry=FAST, default_output_tokens=2000, provider_label=f"{provider}:x"),
            # Its socket in the system's temp folder, as a session's: a unix socket's path has
            # a 107-byte limit that a pytest worker's tmp_path can pass.
            self.ledger, self.transcript, tools).start()

    def kinds(self) -> list[str]:
        return [e.kind for e in read_events(self.transcript_path)]

    def close(self) -> None:
        self.gateway.close()
        self.scripted.close()
        self.transcript.close()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path, Budget(wall_seconds=600))
    yield made
    made.close()


def test_a_call_is_forwarded_with_the_hosts_key_and_recorded_with_its_usage(rig: Rig) -> None:
    status, headers, body = post(rig.gateway, "/v1/messages?beta=true", anthropic_request())
    assert status == 200 and headers["content-type"] == "text/event-stream"
    answer = parse_answer("anthropic-messages", body, True)
    # Claude Code must read a file before it overwrites it: the scripted write is two turns.
    assert [c.name for c in answer.tool_calls] == ["Read"]
    assert rig.scripted.credentials == [KEY]
    sent = rig.scripted.sent[0]["usage"]
    response = next(e for e in read_events(rig.transcript_path) if e.kind == "model_response")
    assert {k: response.data["usage"][k] for k in sent} == sent
    assert rig.ledger.usage.tokens_input == (sent["input_tokens"]
                                             + sent["cache_read_input_tokens"])
    assert rig.ledger.usage.tokens_output == sent["output_tokens"]
    assert rig.ledger.usage.tool_calls == 1
    request = next(e for e in read_events(rig.transcript_path) if e.kind == "model_request")
    assert request.data["api"] == "anthropic-messages" and request.data["messages_from"] == 0
    rig.transcript.close()
    assert verify(rig.transcript_path).ok
    for path in rig.transcript_path.parent.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_an_unparseable_request_is_refused_recorded_and_never_forwarded(rig: Rig) -> None:
    for body in (b"{not json", b"[1, 2]", json.dumps({"messages": []}).encode(),
                 b'{"model": "m", "max_tokens": 5, "messages": [], "x": NaN}'):
        status, headers, payload = post(rig.gateway, "/v1/messages", body)
        assert status == 400 and headers["x-should-retry"] == "false"
        assert json.loads(payload)["error"]["type"] == "invalid_request_error"
    status, _, _ = post(rig.gateway, "/v1/models", b"", method="GET")
    assert status == 405
    status, _, _ = post(rig.gateway, "/somewhere/else", b"{}")
    assert status == 404
    assert rig.scripted.requests == 0
    refused = [e for e in read_events(rig.transcript_path) if e.kind == "gateway_refused"]
    assert len(refused) == 6
    assert refused[0].data["body"] == "{not json"
    assert rig.gateway.ended is None  # a bad request is refused, not the end of the session


def test_a_request_of_the_other_provider_is_not_a_route(rig: Rig) -> None:
    status, _, _ = post(rig.gateway, "/v1/responses", {"model": "m", "input": []})
    assert status == 404 and rig.scripted.requests == 0


def test_a_spent_token_budget_refuses_before_forwarding_and_ends_the_session(
        tmp_path: Path) -> None:
    rig = Rig(tmp_path, Budget(wall_seconds=600, tokens_total=50_000))
    try:
        status, _, _ = post(rig.gateway, "/v1/messages", anthropic_request())
        assert status == 200
        big = [{"role": "user", "content": "x" * 60_000}]
        status, headers, payload = post(rig.gateway, "/v1/messages", anthropic_request(big))
        assert status == 400 and headers["x-should-retry"] == "false"
        assert "budget exhausted: tokens_total" in json.loads(payload)["error"]["message"]
        assert rig.scripted.requests == 1
        assert rig.gateway.ended is not None
        assert rig.gateway.ended.outcome == "budget_exhausted:tokens_total"
        assert "budget_exhausted" in rig.kinds()
        # Nothing more is forwarded once the session is over.
        post(rig.gateway, "/v1/messages", anthropic_request())
        assert rig.scripted.requests == 1
    finally:
        rig.close()


def test_the_output_cap_is_cut_to_what_the_budget_leaves(tmp_path: Path) -> None:
    rig = Rig(tmp_path, Budget(wall_seconds=600, tokens_output=300))
    try:
        request = anthropic_request(thinking={"type": "enabled", "budget_tokens": 2000})
        status, _, _ = post(rig.gateway, "/v1/messages", request)
        assert status == 200
        recorded = next(e for e in read_events(rig.transcript_path)
                        if e.kind == "model_request")
        assert recorded.data["max_output_tokens"] == 300
        assert recorded.data["changed"]["max_tokens"] == {"from": 1000, "to": 300}
        assert "thinking" in recorded.data["changed"]  # under 1024 left: thinking is off
    finally:
        rig.close()


def test_an_answer_with_a_tool_call_past_the_cap_is_withheld(tmp_path: Path) -> None:
    rig = Rig(tmp_path, Budget(wall_seconds=600, tool_calls=0))
    try:
        status, _, payload = post(rig.gateway, "/v1/messages", anthropic_request())
        assert status == 400 and b"tool_calls" in payload and b"tool_use" not in payload
        assert rig.gateway.ended is not None
        assert rig.gateway.ended.outcome == "budget_exhausted:tool_calls"
    finally:
        rig.close()


def test_transient_errors_are_retried_with_the_study_policy(tmp_path: Path) -> None:
    with FakeModelServer() as fake:
        fake.replies += [Reply(status=529, body={"error": {"type": "overloaded_error"}}),
                         Reply(drop=True),
                         anthropic_text_reply("ok", input_tokens=7, output_tokens=3)]
        rig = Rig(tmp_path, Budget(wall_seconds=600), upstream_url=fake.url)
        try:
            status, _, body = post(rig.gateway, "/v1/messages", anthropic_request(stream=False))
            assert status == 200 and json.loads(body)["content"][0]["text"] == "ok"
            attempts = [e.data for e in read_events(rig.transcript_path)
                        if e.kind == "model_attempt"]
            assert [a["ok"] for a in attempts] == [False, False, True]
            assert "model_retry_wait" in rig.kinds()
            assert rig.ledger.usage.tokens_total == 10
            assert fake.requests[0]["headers"]["x-api-key"] == KEY
        finally:
            rig.close()


def test_a_provider_that_keeps_failing_ends_the_session_as_retries_exhausted(
        tmp_path: Path) -> None:
    with FakeModelServer() as fake:
        fake.replies += [Reply(status=503)] * 4
        rig = Rig(tmp_path, Budget(wall_seconds=600), upstream_url=fake.url)
        try:
            status, headers, _ = post(rig.gateway, "/v1/messages", anthropic_request())
            assert status == 400 and headers["x-should-retry"] == "false"
            assert rig.gateway.ended is not None
            assert rig.gateway.ended.outcome == "provider_error:retries_exhausted"
        finally:
            rig.close()


def test_garbage_from_the_provider_is_a_malformed_response(tmp_path: Path) -> None:
    with FakeModelServer() as fake:
        fake.replies.append(Reply(body="data: {nope\n\n", headers={}))
        rig = Rig(tmp_path, Budget(wall_seconds=600), upstream_url=fake.url)
        try:
            post(rig.gateway, "/v1/messages", anthropic_request(stream=False))
            assert rig.gateway.ended is not None
            assert rig.gateway.ended.outcome == "provider_error:malformed_response"
        finally:
            rig.close()


def test_the_responses_api_and_its_usage_categories(tmp_path: Path) -> None:
    rig = Rig(tmp_path, Budget(wall_seconds=600), cli="codex")
    try:
        request = {"model": "gpt-x", "stream": True, "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                             "text": "go"}]}],
            "tools": [{"type": "function", "name": "exec_command"}]}
        status, _, body = post(rig.gateway, "/v1/responses", request)
        assert status == 200
        answer = parse_answer("openai-responses", body, True)
        assert answer.tool_calls[0].name == "exec_command"
        assert "hello.txt" in answer.tool_calls[0].args["cmd"]
        sent = rig.scripted.sent[0]["usage"]
        assert answer.usage["cached_tokens"] == sent["cached_tokens"] > 0
        assert rig.ledger.usage.tokens_input == sent["input_tokens"]
        recorded = next(e for e in read_events(rig.transcript_path)
                        if e.kind == "model_request")
        # Codex names no output cap: the gateway sets the study's.
        assert recorded.data["changed"]["max_output_tokens"] == {"from": None, "to": 2000}
        assert rig.scripted.credentials == [f"Bearer {KEY}"]
    finally:
        rig.close()


def test_a_streamed_chat_completion_is_asked_for_its_usage(tmp_path: Path) -> None:
    rig = Rig(tmp_path, Budget(wall_seconds=600), cli="codex")
    try:
        status, _, body = post(rig.gateway, "/v1/chat/completions", {
            "model": "gpt-x", "stream": True, "messages": [{"role": "user", "content": "go"}]})
        assert status == 200
        answer = parse_answer("openai-chat", body, True)
        assert answer.tool_calls and answer.usage["prompt_tokens"] > 0
        recorded = next(e for e in read_events(rig.transcript_path)
                        if e.kind == "model_request")
        assert "stream_options.include_usage" in recorded.data["changed"]
    finally:
        rig.close()


def test_harness_commands_reach_the_bridge_and_nothing_else_does(rig: Rig) -> None:
    status, _, body = post(rig.gateway, "/harness/tools/run_candidate",
                           {"args": {"configuration": "cpu-1"}})
    assert status == 200 and json.loads(body) == {"output": "ran run_candidate", "exit_code": 0}
    assert rig.tools_called == [("run_candidate", {"configuration": "cpu-1"})]
    status, _, _ = post(rig.gateway, "/harness/tools/run_candidate", b"nonsense")
    assert status == 400 and len(rig.tools_called) == 1


def test_a_failing_harness_command_is_answered_and_recorded_and_none_runs_after_the_cli(
    rig: Rig,
) -> None:
    def broken(name: str, args: dict[str, Any]) -> tuple[str, int]:
        raise RuntimeError("the container went away")

    rig.gateway.tools = broken
    status, _, body = post(rig.gateway, "/harness/tools/run_public_tests", {"args": {}})
    assert status == 500 and "went away" in json.loads(body)["output"]
    refused = [e for e in read_events(rig.transcript_path) if e.kind == "gateway_refused"]
    assert refused[-1].data["status"] == 500 and "RuntimeError" in refused[-1].data["reason"]
    # The CLI's run is over (Codex may finish with a command still running): a command that
    # fails now, under the stopped container, is quietly cut off; none starts.
    rig.gateway.close_commands()
    status, _, body = post(rig.gateway, "/harness/tools/run_public_tests", {"args": {}})
    assert status == 409 and json.loads(body)["exit_code"] == 3
    assert [e for e in read_events(rig.transcript_path) if e.kind == "gateway_refused"] == refused


def test_an_oversized_or_chunked_request_is_refused_unread(rig: Rig) -> None:
    conn = Unix(rig.gateway.socket_path)
    conn.putrequest("POST", "/v1/messages")
    conn.putheader("Content-Length", str(10**12))
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn = Unix(rig.gateway.socket_path)
    conn.putrequest("POST", "/v1/messages")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    assert conn.getresponse().status == 411
    assert rig.scripted.requests == 0


def test_cleanup_removes_only_the_socket_folders_of_dead_harness_processes(
    tmp_path: Path,
) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    boot = socket_dir_prefix().split("-")[-2]
    live = tmp_path / f"{socket_dir_prefix()}abc"  # this process's: alive
    orphan = tmp_path / f"{SOCKET_DIR_PREFIX}{dead}-{boot}-def"
    other_boot = tmp_path / f"{SOCKET_DIR_PREFIX}{dead}-000000000000-ghi"
    for folder in (live, orphan, other_boot):
        folder.mkdir()
        (folder / "gateway.sock").write_text("")
    assert remove_orphan_socket_dirs(tmp_path) == [orphan]
    assert live.is_dir() and other_boot.is_dir() and not orphan.exists()
