"""The real openai and anthropic SDKs over HTTP against a local server speaking each API."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from harness.agent.providers import make_provider
from harness.agent.providers.base import (
    MAX_ARGUMENT_DEPTH,
    UNPARSED_ARGUMENTS,
    DeadlineReached,
    Provider,
    ProviderError,
)
from harness.agent.tools import COMMON_TOOLS
from harness.records.study import AgentSettings
from tests.conftest import FAST_RETRY
from tests.fake_model_server import FakeModelServer, Reply, text_reply, tool_reply


def provider(kind: str, **settings: Any) -> Provider:
    return make_provider(AgentSettings(model=f"{kind}:fake-model", retry=FAST_RETRY, **settings))


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
    # The reply would come after a minute; the call must end at its 1.5 s deadline. The bound
    # is half the reply's delay, not near the deadline: it tells "cut" from "waited" on a
    # host loaded by other work without timing how fast the cut is.
    server.replies.append(Reply(delay_s=60, body={}))
    deadline = time.monotonic() + 1.5
    started = time.monotonic()
    with pytest.raises(DeadlineReached):
        provider(kind).next_turn(MESSAGES, TOOLS, 64,
                                 time_left=lambda: max(0.0, deadline - time.monotonic()))
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_negative_token_counts_are_a_malformed_response(server: FakeModelServer,
                                                        kind: str) -> None:
    # Summed as they came, they would buy the session tokens past its budget.
    server.replies.append(tool_reply(kind, "bash", {"command": "ls"}, -5_000_000, 7))
    with pytest.raises(ProviderError) as err:
        provider(kind).next_turn(MESSAGES, TOOLS, 100)
    assert err.value.kind == "malformed_response"


def _raw(reply: Reply, marker: str, text: str) -> Reply:
    """``reply`` as raw JSON text with the string ``marker`` replaced by ``text`` (JSON that
    the server's own encoder could not write: nested too deep, integers too long)."""
    return Reply(body=json.dumps(reply.body).replace(json.dumps(marker), text))


def test_openai_arguments_nested_past_any_parser_are_a_refused_call(
        server: FakeModelServer) -> None:
    deep = "[" * 5000 + "]" * 5000
    reply = tool_reply("openai", "bash", {"command": "ls"}, 10, 2)
    reply.body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = deep
    server.replies.append(reply)
    turn = provider("openai").next_turn(MESSAGES, TOOLS, 100)
    assert turn.tool_calls[0].args == {UNPARSED_ARGUMENTS: deep}
    # Deep enough to refuse, shallow enough to parse: not kept, said so.
    nested: Any = "x"
    for _ in range(MAX_ARGUMENT_DEPTH + 5):
        nested = [nested]
    server.replies.append(tool_reply("openai", "bash", {"command": nested}, 10, 2))
    turn = provider("openai").next_turn(MESSAGES, TOOLS, 100)
    assert "nested" in turn.tool_calls[0].args[UNPARSED_ARGUMENTS]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_replies_no_parser_can_read_are_malformed_not_a_harness_error(
        server: FakeModelServer, kind: str) -> None:
    deep = tool_reply(kind, "bash", {"command": "@DEEP@"}, 10, 2)
    if kind == "openai":
        deep.body["choices"][0]["message"]["content"] = "@DEEP@"
    server.replies.append(_raw(deep, "@DEEP@", "[" * 5000 + "]" * 5000))
    huge = tool_reply(kind, "bash", {"command": "ls"}, 424242, 2)
    server.replies.append(Reply(body=json.dumps(huge.body).replace("424242", "9" * 5000)))
    for _ in range(2):
        with pytest.raises(ProviderError) as err:
            provider(kind).next_turn(MESSAGES, TOOLS, 100)
        assert err.value.kind == "malformed_response", err.value
