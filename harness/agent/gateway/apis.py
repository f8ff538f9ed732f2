"""The three model APIs the CLIs speak, as the gateway reads them: Anthropic Messages (Claude
Code), OpenAI Responses (Codex) and OpenAI Chat Completions; streamed or not.

A request is parsed before anything is forwarded: a JSON object within the size and nesting
caps, a model name, a list of messages; anything else is refused (``RequestRefused``) and never
reaches the provider. An answer is parsed in full before the CLI sees a byte of it, for its
usage (what the ledger counts), its tool calls and its text; an answer that cannot be read is
the provider's failure (``ProviderError("malformed_response")``), a stream that reports an
overload is worth retrying (``TransientError``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.agent.gateway.sse import parse_sse
from harness.agent.providers.base import (
    MAX_TURN_DEPTH,
    UNPARSED_ARGUMENTS,
    ProviderError,
    ToolCall,
    TransientError,
    nesting,
)

ApiName = Literal["anthropic-messages", "openai-responses", "openai-chat"]
# Path (without its query) -> API. Nothing else is a model route.
API_PATHS: dict[str, ApiName] = {
    "/v1/messages": "anthropic-messages",
    "/v1/responses": "openai-responses",
    "/v1/chat/completions": "openai-chat",
}
PROVIDER_OF: dict[ApiName, str] = {"anthropic-messages": "anthropic",
                                   "openai-responses": "openai", "openai-chat": "openai"}
# Where each API's request holds its conversation, and its output-token cap.
MESSAGES_FIELD: dict[ApiName, str] = {"anthropic-messages": "messages",
                                      "openai-responses": "input", "openai-chat": "messages"}
OUTPUT_FIELD: dict[ApiName, str] = {"anthropic-messages": "max_tokens",
                                    "openai-responses": "max_output_tokens",
                                    "openai-chat": "max_completion_tokens"}
# Anthropic's smallest thinking budget: below it, thinking is switched off for the call.
MIN_THINKING_TOKENS = 1024


class RequestRefused(Exception):
    """The request is not one the gateway forwards; ``reason`` goes to the CLI and the record."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_json_object(raw: bytes, what: str) -> dict[str, Any]:
    """A JSON object of finite values nested at most MAX_TURN_DEPTH deep, or ValueError."""
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a JSON object")
    depth, non_finite = nesting(value)
    if depth > MAX_TURN_DEPTH:
        raise ValueError(f"{what} is nested {depth} levels deep (over {MAX_TURN_DEPTH})")
    if non_finite:
        raise ValueError(f"{what} holds a non-finite number")
    return value


@dataclass
class ModelCall:
    """One parsed request. ``body`` is what will be forwarded (re-encoded only if changed)."""

    api: ApiName
    raw: bytes
    body: dict[str, Any]
    model: str
    stream: bool
    changed: dict[str, Any] = field(default_factory=dict)

    @property
    def messages(self) -> list[Any]:
        value = self.body.get(MESSAGES_FIELD[self.api])
        if isinstance(value, str):  # the Responses API takes a bare string as one user turn
            return [value]
        return list(value or [])

    def frame(self) -> dict[str, Any]:
        """The request without its conversation: tools, system prompt, settings."""
        return {k: v for k, v in self.body.items() if k != MESSAGES_FIELD[self.api]}

    @property
    def requested_output(self) -> int | None:
        value = self.body.get(OUTPUT_FIELD[self.api])
        if self.api == "openai-chat" and value is None:
            value = self.body.get("max_tokens")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def cap_output(self, allowed: int) -> None:
        """Make the call's output cap ``allowed`` (what the budget leaves), saying so."""
        if self.requested_output == allowed:
            return
        name = OUTPUT_FIELD[self.api]
        if self.api == "openai-chat" and "max_tokens" in self.body:
            name = "max_tokens"
        self.changed[name] = {"from": self.body.get(name), "to": allowed}
        self.body[name] = allowed
        thinking = self.body.get("thinking")
        if self.api == "anthropic-messages" and isinstance(thinking, dict):
            budget = thinking.get("budget_tokens")
            if isinstance(budget, int) and budget >= allowed:
                # The API wants the thinking budget below max_tokens, and at least 1024.
                if allowed - 1 >= MIN_THINKING_TOKENS:
                    self.changed["thinking.budget_tokens"] = {"from": budget, "to": allowed - 1}
                    thinking["budget_tokens"] = allowed - 1
                else:
                    self.changed["thinking"] = {"from": thinking, "to": None}
                    del self.body["thinking"]

    def ask_for_usage(self) -> None:
        """A streamed chat completion reports usage only when asked: ask."""
        if self.api != "openai-chat" or not self.stream:
            return
        options = self.body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage") is True:
            return
        self.changed["stream_options.include_usage"] = {"from": None, "to": True}
        self.body["stream_options"] = {**(options if isinstance(options, dict) else {}),
                                       "include_usage": True}

    def wire_bytes(self) -> bytes:
        if not self.changed:
            return self.raw
        return json.dumps(self.body, ensure_ascii=False, separators=(",", ":")).encode()


def parse_request(api: ApiName, raw: bytes) -> ModelCall:
    """The request as the gateway will meter and forward it; RequestRefused otherwise."""
    try:
        body = load_json_object(raw, "the request body")
    except ValueError as exc:
        raise RequestRefused(str(exc)) from None
    model = body.get("model")
    if not isinstance(model, str) or not model or len(model) > 200:
        raise RequestRefused("the request names no model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestRefused("`stream` is not true or false")
    messages = body.get(MESSAGES_FIELD[api])
    if not (isinstance(messages, list) or (api == "openai-responses"
                                           and isinstance(messages, str))):
        raise RequestRefused(f"the request has no `{MESSAGES_FIELD[api]}` list")
    cap = body.get(OUTPUT_FIELD[api])
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise RequestRefused(f"`{OUTPUT_FIELD[api]}` is not a positive integer")
    if api == "anthropic-messages" and cap is None:
        raise RequestRefused("`max_tokens` is required")
    return ModelCall(api=api, raw=raw, body=body, model=model, stream=stream)


# --- answers -----------------------------------------------------------------------------------


@dataclass
class ModelAnswer:
    """What the provider answered, as the transcript and the ledger need it."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    # Every count the provider reported, by its own name; input and output as the ledger sums
    # them (Anthropic's cache reads and writes are input tokens too).
    usage: dict[str, int] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    stop_reason: str = ""
    model: str = ""
    content: list[dict[str, Any]] = field(default_factory=list)


def _malformed(detail: str) -> ProviderError:
    return ProviderError("malformed_response", detail[:300])


def _count(value: Any, name: str) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _malformed(f"usage {name} is not a count: {value!r}"[:200])
    return value


def _args(text: str) -> dict[str, Any]:
    """A tool call's arguments: its JSON object, or its text under UNPARSED_ARGUMENTS."""
    try:
        value = json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError):
        return {UNPARSED_ARGUMENTS: text}
    return value if isinstance(value, dict) else {UNPARSED_ARGUMENTS: text}


def _stream_error(error: Any) -> Exception:
    """An error reported inside a stream: an overload or server error is retried."""
    info = error if isinstance(error, dict) else {}
    kind = str(info.get("type") or info.get("code") or "")
    message = str(info.get("message") or error)[:300]
    if kind in ("overloaded_error", "api_error", "rate_limit_error", "server_error",
                "rate_limit_exceeded", "internal_error"):
        return TransientError(f"error in the stream: {kind}: {message}")
    return ProviderError("bad_request", f"error in the stream: {kind}: {message}")


def _events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for event in parse_sse(raw):
        if event.data.strip() == "[DONE]":
            continue
        try:
            data = load_json_object(event.data.encode(), "a streamed event")
        except ValueError as exc:
            raise _malformed(str(exc)) from None
        out.append((event.event or str(data.get("type", "")), data))
    return out


def parse_answer(api: ApiName, raw: bytes, streamed: bool) -> ModelAnswer:
    """The answer in full; ProviderError / TransientError when it cannot be used."""
    try:
        if api == "anthropic-messages":
            message = (_anthropic_stream(_events(raw)) if streamed
                       else load_json_object(raw, "the answer"))
            return _anthropic_answer(message)
        if api == "openai-responses":
            response = (_responses_stream(_events(raw)) if streamed
                        else load_json_object(raw, "the answer"))
            return _responses_answer(response)
        chat = _chat_stream(_events(raw)) if streamed else load_json_object(raw, "the answer")
        return _chat_answer(chat)
    except (ProviderError, TransientError):
        raise
    except ValueError as exc:
        raise _malformed(str(exc)) from None
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise _malformed(f"{type(exc).__name__}: {exc}") from None


def _anthropic_stream(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The message a Messages stream builds, its usage the last reported counts."""
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    for kind, data in events:
        if kind == "error":
            raise _stream_error(data.get("error"))
        if kind == "message_start":
            message = dict(data["message"])
            message["usage"] = dict(message.get("usage") or {})
        elif message is None:
            if kind == "ping":
                continue
            raise _malformed(f"stream event {kind!r} before message_start")
        elif kind == "content_block_start":
            blocks[int(data["index"])] = dict(data["content_block"])
        elif kind == "content_block_delta":
            block = blocks[int(data["index"])]
            delta = data["delta"]
            dtype = delta.get("type")
            if dtype == "text_delta":
                block["text"] = block.get("text", "") + str(delta.get("text", ""))
            elif dtype == "input_json_delta":
                partial.setdefault(int(data["index"]), []).append(
                    str(delta.get("partial_json", "")))
            elif dtype == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
            elif dtype == "signature_delta":
                block["signature"] = block.get("signature", "") + str(delta.get("signature", ""))
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if "stop_reason" in delta:
                message["stop_reason"] = delta["stop_reason"]
            message["usage"].update(data.get("usage") or {})
    if message is None:
        raise _malformed("the stream has no message_start")
    for index, pieces in partial.items():
        text = "".join(pieces)
        blocks[index]["input"] = _args(text) if text else blocks[index].get("input") or {}
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def _input_of(block: dict[str, Any]) -> dict[str, Any]:
    value = block.get("input")
    return value if isinstance(value, dict) else {}


def _anthropic_answer(message: dict[str, Any]) -> ModelAnswer:
    usage = message.get("usage")
    if not isinstance(usage, dict):
        raise _malformed("the answer carries no usage")
    counts = {name: _count(usage.get(name), name) for name in (
        "input_tokens", "output_tokens", "cache_creation_input_tokens",
        "cache_read_input_tokens") if usage.get(name) is not None}
    content = [b for b in message.get("content") or [] if isinstance(b, dict)]
    calls = [ToolCall(id=str(b.get("id", "")), name=str(b.get("name", "")),
                      args=_input_of(b))
             for b in content if b.get("type") == "tool_use"]
    return ModelAnswer(
        text="".join(str(b.get("text", "")) for b in content if b.get("type") == "text"),
        tool_calls=calls, usage=counts,
        input_tokens=(counts.get("input_tokens", 0) + counts.get("cache_creation_input_tokens", 0)
                      + counts.get("cache_read_input_tokens", 0)),
        output_tokens=counts.get("output_tokens", 0),
        stop_reason=str(message.get("stop_reason") or ""), model=str(message.get("model", "")),
        content=content)


def _responses_stream(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The final response of a Responses stream (``response.completed`` or ``.incomplete``)."""
    for kind, data in events:
        if kind == "error":
            raise _stream_error(data.get("error") or data)
        if kind == "response.failed":
            raise _stream_error((data.get("response") or {}).get("error"))
        if kind in ("response.completed", "response.incomplete"):
            return dict(data["response"])
    raise _malformed("the stream ended without response.completed")


def _responses_answer(response: dict[str, Any]) -> ModelAnswer:
    usage = response.get("usage")
    if not isinstance(usage, dict):
        raise _malformed("the answer carries no usage")
    counts = {"input_tokens": _count(usage.get("input_tokens"), "input_tokens"),
              "output_tokens": _count(usage.get("output_tokens"), "output_tokens")}
    details_in = usage.get("input_tokens_details") or {}
    details_out = usage.get("output_tokens_details") or {}
    if isinstance(details_in, dict) and details_in.get("cached_tokens") is not None:
        counts["cached_tokens"] = _count(details_in["cached_tokens"], "cached_tokens")
    if isinstance(details_out, dict) and details_out.get("reasoning_tokens") is not None:
        counts["reasoning_tokens"] = _count(details_out["reasoning_tokens"], "reasoning_tokens")
    output = [item for item in response.get("output") or [] if isinstance(item, dict)]
    texts, calls = [], []
    for item in output:
        kind = item.get("type")
        if kind == "message":
            texts += [str(c.get("text", "")) for c in item.get("content") or []
                      if isinstance(c, dict) and c.get("type") == "output_text"]
        elif kind == "function_call":
            calls.append(ToolCall(id=str(item.get("call_id", "")), name=str(item.get("name", "")),
                                  args=_args(str(item.get("arguments", "")))))
        elif kind == "custom_tool_call":
            calls.append(ToolCall(id=str(item.get("call_id", "")), name=str(item.get("name", "")),
                                  args={"input": str(item.get("input", ""))}))
        elif kind == "local_shell_call":
            action = item.get("action")
            calls.append(ToolCall(id=str(item.get("call_id", "")), name="local_shell",
                                  args=action if isinstance(action, dict) else {}))
    return ModelAnswer(text="".join(texts), tool_calls=calls, usage=counts,
                       input_tokens=counts["input_tokens"], output_tokens=counts["output_tokens"],
                       stop_reason=str(response.get("status") or ""),
                       model=str(response.get("model", "")), content=output)


def _chat_stream(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The completion a chat stream builds from its chunks."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish, model, usage = "", "", None
    for _kind, chunk in events:
        if "error" in chunk:
            raise _stream_error(chunk["error"])
        model = str(chunk.get("model") or model)
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                text.append(str(delta["content"]))
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(int(call.get("index", 0)),
                                        {"id": "", "type": "function",
                                         "function": {"name": "", "arguments": ""}})
                slot["id"] = call.get("id") or slot["id"]
                function = call.get("function") or {}
                slot["function"]["name"] += str(function.get("name") or "")
                slot["function"]["arguments"] += str(function.get("arguments") or "")
            finish = str(choice.get("finish_reason") or finish)
    message = {"role": "assistant", "content": "".join(text),
               "tool_calls": [calls[i] for i in sorted(calls)]}
    return {"model": model, "usage": usage,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def _chat_answer(completion: dict[str, Any]) -> ModelAnswer:
    usage = completion.get("usage")
    if not isinstance(usage, dict):
        raise _malformed("the answer carries no usage")
    counts = {"prompt_tokens": _count(usage.get("prompt_tokens"), "prompt_tokens"),
              "completion_tokens": _count(usage.get("completion_tokens"), "completion_tokens")}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is not None:
        counts["cached_tokens"] = _count(cached, "cached_tokens")
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    if reasoning is not None:
        counts["reasoning_tokens"] = _count(reasoning, "reasoning_tokens")
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    calls = [ToolCall(id=str(c.get("id", "")), name=str((c.get("function") or {}).get("name", "")),
                      args=_args(str((c.get("function") or {}).get("arguments", ""))))
             for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    return ModelAnswer(text=str(message.get("content") or ""), tool_calls=calls, usage=counts,
                       input_tokens=counts["prompt_tokens"],
                       output_tokens=counts["completion_tokens"],
                       stop_reason=str(choice.get("finish_reason") or ""),
                       model=str(completion.get("model", "")), content=[message])
