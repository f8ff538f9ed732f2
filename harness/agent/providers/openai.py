"""``openai:<model>``: Chat Completions with tool calling through the official SDK.

Chat Completions (not the Responses API) so that any OpenAI-compatible endpoint, e.g. a local
vLLM server, works through ``OPENAI_BASE_URL``. The SDK's own retries are off: the harness
retries, so every attempt is logged and bounded by the session's deadline.
"""

from __future__ import annotations

import json
from typing import Any

import openai

from harness.agent.providers.base import (
    UNPARSED_ARGUMENTS,
    ModelTurn,
    Provider,
    ProviderError,
    TokenUsage,
    ToolCall,
)
from harness.agent.providers.sdk_errors import map_sdk_error
from harness.records.study import AgentSettings


def to_openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for msg in messages:
        if msg["role"] in ("system", "user"):
            out.append({"role": msg["role"], "content": msg["content"]})
        elif msg["role"] == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or None}
            if msg.get("tool_calls"):
                item["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": json.dumps(c["args"])}}
                    for c in msg["tool_calls"]
                ]
            out.append(item)
        elif msg["role"] == "tool":
            out.append({"role": "tool", "tool_call_id": msg["tool_call_id"],
                        "content": msg["content"]})
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """Tool arguments; text that is not a JSON object of finite values (Python's ``json``
    would take NaN and Infinity) reaches the tool as its text, which the tool refuses."""
    try:
        value = json.loads(raw or "{}", parse_constant=_refuse_constant)
    except (ValueError, RecursionError):  # JSONDecodeError included; nesting past the parser's
        return {UNPARSED_ARGUMENTS: raw}
    return value if isinstance(value, dict) else {UNPARSED_ARGUMENTS: raw}


class OpenAIProvider(Provider):
    def __init__(self, model: str, settings: AgentSettings) -> None:
        self._init_api("openai", model, settings)
        # Reads OPENAI_API_KEY and OPENAI_BASE_URL from the environment, as the SDK does.
        self.client = openai.OpenAI(max_retries=0)

    def request_settings(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.settings.temperature is not None:
            extra["temperature"] = self.settings.temperature
        if "effort" in self.settings.reasoning:
            extra["reasoning_effort"] = self.settings.reasoning["effort"]
        return extra

    def _call(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
              max_output_tokens: int, timeout_s: float) -> ModelTurn:
        try:
            response = self.client.chat.completions.create(
                model=self.model,
                messages=to_openai_messages(messages),  # type: ignore[arg-type]
                tools=[{"type": "function", "function": t} for t in tools],  # type: ignore[typeddict-item]
                max_completion_tokens=max_output_tokens,
                timeout=timeout_s,
                **self.request_settings(),
            )
        except Exception as exc:
            mapped = map_sdk_error(openai, exc)
            if mapped is exc:
                raise
            raise mapped from exc
        try:  # a body that parsed as JSON but is not a completion is a malformed response
            choice = response.choices[0]
            calls = []
            for c in choice.message.tool_calls or []:
                if c.type != "function":  # never offered, so never a valid reply
                    raise ProviderError("malformed_response", f"a {c.type!r} tool call")
                calls.append(ToolCall(id=c.id, name=c.function.name,
                                      args=parse_arguments(c.function.arguments)))
            if response.usage is None:
                raise ProviderError("malformed_response", "the response carries no usage")
            return ModelTurn(
                text=choice.message.content or "", tool_calls=calls,
                usage=TokenUsage(input_tokens=response.usage.prompt_tokens,
                                 output_tokens=response.usage.completion_tokens),
                stop_reason=choice.finish_reason or "", model=response.model,
            )
        except ProviderError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise ProviderError("malformed_response", f"{type(exc).__name__}: {exc}") from exc
