"""The agent loop, the same for every provider.

system prompt + TASK.md + the arm's tools -> model turn -> tool calls executed in the
container -> observations back, until the agent submits, stops, or a budget runs out.
Every step is a transcript event. Budgets are checked before each model call and each tool
call: a model call starts only if its worst case fits (input tokens estimated from above,
output tokens capped by ``max_tokens``), so no token budget can be overrun.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from harness.agent.providers.base import DeadlineReached, Provider, ProviderError
from harness.agent.snapshots import SNAPSHOT_TOOLS, Snapshots
from harness.agent.tools import ToolRunner, ToolSpec
from harness.infra.sandbox import SandboxLost, artifact_note
from harness.records.budget import BudgetExhausted, Ledger
from harness.records.transcript import TranscriptWriter

DEFAULT_SYSTEM_PROMPT = (
    "You are a software engineer working on a PyTorch training codebase in /workspace. "
    "Implement the feature request below without breaking the codebase's contracts "
    "(distributed training, checkpoint resume, export). Use the tools to read, edit, test "
    "and run the code. When you are done, call `submit` with a short summary."
)
# Framing tokens a provider adds per message and per request beyond the text itself.
MESSAGE_OVERHEAD_TOKENS = 16
REQUEST_OVERHEAD_TOKENS = 256


class AgentOutcome(BaseModel):
    """How the agent part of a session ended."""

    # submitted | agent_stopped | budget_exhausted:<kind> | provider_error:<kind> |
    # workspace_full | sandbox_lost
    outcome: str
    summary: str = ""
    turns: int = 0
    tool_calls: int = 0
    error: str = ""


def build_system_prompt(base: str | None, tools: list[ToolSpec]) -> str:
    """The arm's prompt: the shared text plus one line per tool, so arms differ only there."""
    lines = [base or DEFAULT_SYSTEM_PROMPT, "", "Tools:"]
    lines += [f"- {tool.name}: {tool.description}" for tool in tools]
    return "\n".join(lines)


def cut_for_model(text: str, limit: int, where: str = "") -> str:
    """Head and tail of a tool output, with an explicit marker where the middle was cut.

    ``where``: where the output is kept (:func:`harness.infra.sandbox.artifact_note`).
    """
    if len(text) <= limit:
        return text
    half = limit // 2
    kept = f" {where[:1].upper()}{where[1:]}." if where else ""
    marker = (f"\n[... {len(text) - 2 * half} characters cut here by the harness; "
              f"{len(text)} in all.{kept} ...]\n")
    return text[:half] + marker + text[-half:]


class InputEstimate:
    """An upper bound on the next request's input tokens.

    The provider's reported input of the previous call is exact; what was appended since
    is bounded by its UTF-8 byte count (every tokenizer in use spends at least one byte per
    token) plus a per-message overhead. The first call is bounded by its bytes alone.
    """

    def __init__(self) -> None:
        self.base = 0
        self.counted = 0  # messages already included in ``base``

    def estimate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        new = messages[self.counted:]
        # surrogatepass: a lone surrogate counts as the 3 bytes of the U+FFFD sent in its place.
        added = sum(len(json.dumps(m, ensure_ascii=False).encode("utf-8", "surrogatepass"))
                    + MESSAGE_OVERHEAD_TOKENS for m in new)
        if self.counted == 0:
            added += len(json.dumps(tools).encode()) + REQUEST_OVERHEAD_TOKENS
        return self.base + added

    def observe(self, messages: list[dict[str, Any]], input_tokens: int,
                output_tokens: int) -> None:
        # The assistant reply just appended is ``output_tokens`` long, exactly.
        self.base = input_tokens + output_tokens + MESSAGE_OVERHEAD_TOKENS
        self.counted = len(messages)


@dataclass(frozen=True)
class AgentParts:
    """What one agent loop works with: the model, its tools and where their calls run, the
    budget ledger, the transcript, and the trajectory snapshots (None: none are taken)."""

    provider: Provider
    tools: list[ToolSpec]
    runner: ToolRunner
    ledger: Ledger
    transcript: TranscriptWriter
    snapshots: Snapshots | None = None


class AgentPrompt(BaseModel):
    """What the model is told, and how much of each answer and tool output it gets."""

    system_prompt: str
    task_md: str
    max_output_tokens: int
    tool_output_chars: int = 16_000


def run_agent(parts: AgentParts, prompt: AgentPrompt) -> AgentOutcome:
    provider, tools, runner = parts.provider, parts.tools, parts.runner
    ledger, transcript, snapshots = parts.ledger, parts.transcript, parts.snapshots
    system_prompt, task_md = prompt.system_prompt, prompt.task_md
    max_output_tokens, tool_output_chars = prompt.max_output_tokens, prompt.tool_output_chars
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": task_md},
    ]
    tool_dicts = [tool.api_dict() for tool in tools]
    estimate = InputEstimate()
    turns = calls = 0

    def on_event(kind: str, data: dict[str, Any]) -> None:
        transcript.append(kind, data)
        ledger.add_model_event(kind, data)

    try:
        while True:
            ledger.check_time()
            input_bound = estimate.estimate(messages, tool_dicts)
            allowed = ledger.reserve_model_call(input_bound, max_output_tokens)
            transcript.append("model_request", {
                "turn": turns, "provider": provider.name, "settings":
                provider.request_settings(), "max_output_tokens": allowed,
                "input_tokens_bound": input_bound, "messages": messages[estimate.counted:],
                "message_count": len(messages),
            })
            started = time.monotonic()
            turn = provider.next_turn(messages, tool_dicts, allowed,
                                      time_left=ledger.time_left, on_event=on_event)
            turns += 1
            transcript.append("model_response", {
                **turn.model_dump(mode="json"), "duration_s": round(time.monotonic() - started, 4)
            })
            ledger.add_tokens(turn.usage.input_tokens, turn.usage.output_tokens)
            messages.append({"role": "assistant", "content": turn.text,
                             "tool_calls": [c.model_dump() for c in turn.tool_calls],
                             "provider_content": turn.provider_content})
            estimate.observe(messages, turn.usage.input_tokens, turn.usage.output_tokens)
            if not turn.tool_calls:
                return AgentOutcome(outcome="agent_stopped", turns=turns, tool_calls=calls,
                                    summary=turn.text[:2000])
            for call in turn.tool_calls:
                ledger.begin_tool_call(candidate_run=runner.is_candidate_run(call.name))
                calls += 1
                transcript.append("tool_call", call.model_dump(mode="json"))
                if snapshots is not None and call.name in SNAPSHOT_TOOLS and \
                        runner.has_tool(call.name):
                    snapshots.capture(call.name, call.id)  # type: ignore[arg-type]
                result = runner.run(call.name, call.args)
                shown = cut_for_model(result.output, tool_output_chars, artifact_note(
                    result.artifact, result.output_bytes, result.artifact_bytes))
                transcript.append("tool_result", {
                    "id": call.id, "name": call.name, **result.model_dump(mode="json"),
                    "shown_to_model": shown, "cut_for_model": shown != result.output,
                })
                messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name,
                                 "content": shown})
                usage = runner.sandbox.workspace_usage()
                if usage is not None and usage.full:  # no more room: stop, as for a budget
                    transcript.append("workspace_full", usage.model_dump(mode="json"))
                    return AgentOutcome(outcome="workspace_full", turns=turns, tool_calls=calls,
                                        error=f"/workspace is full ({usage.bytes_free} of "
                                              f"{usage.bytes_total} bytes free, "
                                              f"{usage.inodes_free} inodes free)")
                if result.ends_session:
                    return AgentOutcome(outcome="submitted", turns=turns, tool_calls=calls,
                                        summary=str(result.details.get("summary", "")))
    except BudgetExhausted as exc:
        transcript.append("budget_exhausted", {"kind": exc.kind, "message": str(exc)})
        if snapshots is not None:
            snapshots.capture("budget_stop")
        return AgentOutcome(outcome=exc.outcome, turns=turns, tool_calls=calls, error=str(exc))
    except DeadlineReached as exc:
        kind = ledger.deadline_kind
        transcript.append("budget_exhausted", {"kind": kind, "message": str(exc)})
        if snapshots is not None:
            snapshots.capture("budget_stop")
        return AgentOutcome(outcome=f"budget_exhausted:{kind}", turns=turns, tool_calls=calls,
                            error=str(exc))
    except ProviderError as exc:
        transcript.append("provider_error", {"kind": exc.kind, "status": exc.status,
                                             "message": str(exc)})
        return AgentOutcome(outcome=exc.outcome, turns=turns, tool_calls=calls, error=str(exc))
    except SandboxLost as exc:  # the agent's doing as far as anyone can tell: its outcome
        transcript.append("sandbox_lost", {"error": exc.line()})
        return AgentOutcome(outcome="sandbox_lost", turns=turns, tool_calls=calls,
                            error=exc.line())
