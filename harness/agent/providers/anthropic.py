"""``anthropic:<model>``: the Messages API with tool use through the official SDK.

The SDK's own retries are off: the harness retries, so every attempt is logged and bounded
by the session's deadline. Assistant content (thinking blocks included) is sent back
verbatim, as the API requires when extended thinking is on.
"""

from __future__ import annotations

from typing import Any

import anthropic

from harness.agent.providers.base import (
    ModelTurn,
    Provider,
    ProviderError,
    TokenUsage,
    ToolCall,
)
from harness.agent.providers.sdk_errors import map_sdk_error
from harness.records.study import AgentSettings


def to_anthropic_messages(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(system, messages): tool results of one turn go together in one user message."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    out: list[dict[str, Any]] = []
    for msg in messages:
        if msg["role"] == "user":
            out.append({"role": "user", "content": [{"type": "text", "text": msg["content"]}]})
        elif msg["role"] == "assistant":
            content = msg.get("provider_content")
            if content is None:
                content = [{"type": "text", "text": msg["content"]}] if msg.get("content") else []
                content += [{"type": "tool_use", "id": c["id"], "name": c["name"],
                             "input": c["args"]} for c in msg.get("tool_calls", [])]
            out.append({"role": "assistant", "content": content})
        elif msg["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": msg["tool_call_id"],
                     "content": msg["content"]}
            if out and out[-1]["role"] == "user" and out[-1]["content"] and all(
                b.get("type") == "tool_result" for b in out[-1]["content"]
            ):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
    return system, out


class AnthropicProvider(Provider):
    def __init__(self, model: str, settings: AgentSettings) -> None:
        self._init_api("anthropic", model, settings)
        # Reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL from the environment, as the SDK does.
        self.client = anthropic.Anthropic(max_retries=0)

    def request_settings(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        # This SDK version has no `temperature` argument; the API still takes the field,
        # so it travels in the request body.
        if self.settings.temperature is not None:
            extra["extra_body"] = {"temperature": self.settings.temperature}
        budget = self.settings.reasoning.get("thinking_budget_tokens")
        if budget:
            extra["thinking"] = {"type": "enabled", "budget_tokens": int(budget)}
        return extra

    def _call(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
              max_output_tokens: int, timeout_s: float) -> ModelTurn:
        system, api_messages = to_anthropic_messages(messages)
        try:
            response = self.client.messages.create(
                model=self.model,
                system=system,
                messages=api_messages,  # type: ignore[arg-type]
                tools=[{"name": t["name"], "description": t["description"],
                        "input_schema": t["parameters"]} for t in tools],
                max_tokens=max_output_tokens,
                timeout=timeout_s,
                **self.request_settings(),
            )
        except Exception as exc:
            mapped = map_sdk_error(anthropic, exc)
            if mapped is exc:
                raise
            raise mapped from exc
        try:  # a body that parsed as JSON but is not a Message is a malformed response
            blocks = [block.model_dump(mode="json", exclude_none=True)
                      for block in response.content]
            text = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
            calls = [ToolCall(id=b["id"], name=b["name"], args=b.get("input") or {})
                     for b in blocks if b["type"] == "tool_use"]
            usage = response.usage
            if usage is None:
                raise ProviderError("malformed_response", "the response carries no usage")
            # Cached prompt tokens are input tokens too; the ledger counts all of them.
            input_tokens = (usage.input_tokens + (usage.cache_creation_input_tokens or 0)
                            + (usage.cache_read_input_tokens or 0))
            return ModelTurn(
                text=text, tool_calls=calls,
                usage=TokenUsage(input_tokens=input_tokens, output_tokens=usage.output_tokens),
                stop_reason=response.stop_reason or "", model=response.model,
                provider_content=blocks,
            )
        except ProviderError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ProviderError("malformed_response", f"{type(exc).__name__}: {exc}") from exc
