"""An offline agent that plays a file of tool calls: every harness path runs deterministically.

Script format (YAML): ``{steps: [{tool: NAME, args: {...}, text?: str, usage?: {input_tokens,
output_tokens}}, ...]}``. One step is one model turn with one tool call. When the steps run
out, the agent stops without submitting (the loop records that outcome).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from grading.yamlfile import YamlFileError, load_model
from harness.agent.providers.base import ModelTurn, Provider, TokenUsage, ToolCall
from harness.errors import HarnessError


class ScriptStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    text: str = ""
    usage: TokenUsage = Field(default_factory=TokenUsage)


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: list[ScriptStep]


def load_script(path: Path) -> Script:
    if not path.is_file():
        raise HarnessError(f"agent script {path} does not exist", "check the study's agent.model")
    try:
        return load_model(path, Script, what="agent script")
    except YamlFileError as exc:
        raise HarnessError(str(exc), "see tests/fixtures/agents/ for the format") from None


class ScriptedProvider(Provider):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.script = load_script(path)
        self.name = f"scripted:{path.name}"
        self._next = 0

    def _call(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
        max_output_tokens: int, timeout_s: float,
    ) -> ModelTurn:
        if self._next >= len(self.script.steps):
            return ModelTurn(text="(script finished)", stop_reason="end_turn", model=self.name)
        step = self.script.steps[self._next]
        self._next += 1
        call = ToolCall(id=f"call_{self._next}", name=step.tool, args=step.args)
        return ModelTurn(
            text=step.text, tool_calls=[call], usage=step.usage, stop_reason="tool_use",
            model=self.name,
        )
