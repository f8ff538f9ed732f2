"""The harness commands a CLI agent's container asks the host for, through the gateway:
``harness-run-candidate``, ``harness-run-public-tests`` and, in the treatment arm only,
``traincheck``. Each runs as the loop agent's tool of the same name (harness/agent/tools.py,
traincheck_tool.py): the same command in the same container, the same output cut, the same
artifacts, compute categories, snapshot and transcript events (``tool_call``/``tool_result``
with an id ``harness-N``).

The shell call that ran the command was already counted as the agent's tool call (by the
gateway, from the model's answer), so a command counts only what the loop's tool adds to it:
a candidate run against its budget. A candidate run past its cap ends the session as in the
loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.agent.loop import cut_for_model
from harness.agent.snapshots import SNAPSHOT_TOOLS, Snapshots
from harness.agent.tools import ToolRunner
from harness.infra.sandbox import artifact_note
from harness.records.budget import BudgetExhausted
from harness.records.transcript import TranscriptWriter

# Command names (the gateway's /harness/tools/NAME) every arm has; extra tools add theirs.
COMMON_COMMANDS = ("run_candidate", "run_public_tests")


class HarnessCommands:
    """The gateway's ToolBridge for one session."""

    def __init__(self, runner: ToolRunner, transcript: TranscriptWriter,
                 snapshots: Snapshots | None, *, tool_output_chars: int,
                 on_budget: Callable[[BudgetExhausted], None]) -> None:
        self.runner = runner
        self.transcript = transcript
        self.snapshots = snapshots
        self.tool_output_chars = tool_output_chars
        self.on_budget = on_budget
        self.allowed = set(COMMON_COMMANDS) | set(runner.extra_tools)
        self.count = 0

    def __call__(self, name: str, args: dict[str, Any]) -> tuple[str, int]:
        if name not in self.allowed:
            return f"no harness command {name!r} in this session", 3
        self.count += 1
        call_id = f"harness-{self.count}"
        try:
            if self.runner.is_candidate_run(name):
                self.runner.ledger.begin_candidate_run()
            else:
                self.runner.ledger.check_time()
        except BudgetExhausted as exc:
            self.transcript.append("budget_exhausted", {"kind": exc.kind, "message": str(exc)})
            self.on_budget(exc)
            return f"refused: {exc}; the session is over", 3
        self.transcript.append("tool_call", {"id": call_id, "name": name, "args": args})
        if self.snapshots is not None and name in SNAPSHOT_TOOLS:
            self.snapshots.capture(name, call_id)  # type: ignore[arg-type]
        result = self.runner.run(name, args)
        shown = cut_for_model(result.output, self.tool_output_chars, artifact_note(
            result.artifact, result.output_bytes, result.artifact_bytes))
        self.transcript.append("tool_result", {
            "id": call_id, "name": name, **result.model_dump(mode="json"),
            "shown_to_model": shown, "cut_for_model": shown != result.output,
        })
        return shown, 0 if result.ok else 1
