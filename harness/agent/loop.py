"""The agent loop, the same for every provider.

system prompt + TASK.md + the arm's tools -> model turn -> tool calls executed in the
container -> observations back, until the agent submits, stops, or a budget runs out.
Every step is a transcript event; budgets are checked before each model call and each tool
call, so no budget can be overrun by more than the call already in flight.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from harness.agent.providers.base import Provider
from harness.agent.tools import ToolRunner, ToolSpec
from harness.budget import BudgetExhausted, Ledger
from harness.transcript import TranscriptWriter

DEFAULT_SYSTEM_PROMPT = (
    "You are a software engineer working on a PyTorch training codebase in /workspace. "
    "Implement the feature request below without breaking the codebase's contracts "
    "(distributed training, checkpoint resume, export). Use the tools to read, edit, test "
    "and run the code. When you are done, call `submit` with a short summary."
)


class AgentOutcome(BaseModel):
    """How the agent part of a session ended."""

    outcome: str  # submitted | agent_stopped | budget_exhausted:<kind>
    summary: str = ""
    turns: int = 0
    tool_calls: int = 0


def build_system_prompt(base: str | None, tools: list[ToolSpec]) -> str:
    """The arm's prompt: the shared text plus one line per tool, so arms differ only there."""
    lines = [base or DEFAULT_SYSTEM_PROMPT, "", "Tools:"]
    lines += [f"- {tool.name}: {tool.description}" for tool in tools]
    return "\n".join(lines)


def run_agent(
    provider: Provider,
    tools: list[ToolSpec],
    runner: ToolRunner,
    ledger: Ledger,
    transcript: TranscriptWriter,
    *,
    system_prompt: str,
    task_md: str,
    max_output_tokens: int,
) -> AgentOutcome:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": task_md},
    ]
    tool_dicts = [tool.api_dict() for tool in tools]
    turns = calls = 0
    try:
        while True:
            ledger.check_time()
            ledger.check_tokens()
            allowed = ledger.max_output_tokens(max_output_tokens)
            transcript.append("model_request", {"turn": turns, "provider": provider.name,
                                                "max_output_tokens": allowed,
                                                "messages": len(messages)})
            turn = provider.next_turn(messages, tool_dicts, allowed)
            turns += 1
            transcript.append("model_response", turn.model_dump(mode="json"))
            ledger.add_tokens(turn.usage.input_tokens, turn.usage.output_tokens)
            messages.append({"role": "assistant", "content": turn.text,
                             "tool_calls": [c.model_dump() for c in turn.tool_calls]})
            if not turn.tool_calls:
                return AgentOutcome(outcome="agent_stopped", turns=turns, tool_calls=calls)
            for call in turn.tool_calls:
                ledger.begin_tool_call(candidate_run=runner.is_candidate_run(call.name))
                calls += 1
                transcript.append("tool_call", call.model_dump(mode="json"))
                result = runner.run(call.name, call.args)
                transcript.append("tool_result", {"id": call.id, "name": call.name,
                                                  **result.model_dump(mode="json")})
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": result.output})
                if result.ends_session:
                    return AgentOutcome(outcome="submitted", turns=turns, tool_calls=calls,
                                        summary=str(result.details.get("summary", "")))
            ledger.check_tokens()
    except BudgetExhausted as exc:
        transcript.append("budget_exhausted", {"kind": exc.kind, "message": str(exc)})
        return AgentOutcome(outcome=exc.outcome, turns=turns, tool_calls=calls)
