"""Tool schemas are read off the handlers, so the model's view and the handler agree."""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from harness.agent.providers.base import UNPARSED_ARGUMENTS, TokenUsage, ToolCall
from harness.agent.providers.openai import parse_arguments
from harness.agent.tools import COMMON_TOOLS, ToolRunner, argument_problem
from harness.agent.toolsets import EXTRA_TOOLS, tools_for_arm
from harness.agent.traincheck_tool import TraincheckTool


def test_every_schema_names_exactly_the_handlers_keyword_arguments() -> None:
    handlers = {t.name: getattr(ToolRunner, f"_tool_{t.name}") for t in COMMON_TOOLS}
    handlers["traincheck"] = TraincheckTool.__call__
    for spec in tools_for_arm(list(EXTRA_TOOLS)):
        params = inspect.signature(handlers[spec.name]).parameters
        keywords = {n: p for n, p in params.items()
                    if n != "self" and p.kind is not inspect.Parameter.POSITIONAL_ONLY}
        schema = spec.parameters
        assert set(schema["properties"]) == set(keywords), spec.name
        assert set(schema["required"]) == {n for n, p in keywords.items()
                                           if p.default is inspect.Parameter.empty}, spec.name
        assert schema["additionalProperties"] is False and spec.description


def test_types_and_descriptions_come_from_the_annotations() -> None:
    bash = next(t for t in COMMON_TOOLS if t.name == "bash").parameters
    assert bash["properties"] == {"command": {"type": "string"},
                                  "timeout_s": {"type": "number", "description": "default 300"}}
    assert bash["required"] == ["command"]
    read = next(t for t in COMMON_TOOLS if t.name == "read_file").parameters["properties"]
    assert read["start_line"] == {"type": "integer"}
    assert read["path"]["description"] == "path relative to /workspace"
    assert "gloo-ddp-2" in EXTRA_TOOLS["traincheck"].parameters["properties"]["configuration"][
        "description"]


def _runner_that_must_not_run() -> ToolRunner:
    """A runner whose every dispatch would fail loudly: no sandbox, packet or ledger."""
    return ToolRunner(None, None, None, Path("/nonexistent"),  # type: ignore[arg-type]
                      extra_tools={"traincheck": TraincheckTool.__new__(TraincheckTool)})


@pytest.mark.parametrize(("name", "args", "says"), [
    ("bash", {"command": 123}, "command must be a string, not integer"),
    ("bash", {"command": ["ls", "-la"]}, "command must be a string, not array"),
    ("bash", {"command": "ls", "timeout_s": "10"}, "timeout_s must be a number, not string"),
    ("bash", {"command": "ls", "timeout_s": True}, "timeout_s must be a number, not boolean"),
    ("write_file", {"path": "a.py", "content": {"x": 1}}, "content must be a string"),
    ("edit_file", {"path": "a.py", "old": None, "new": "x"}, "missing required"),
    ("read_file", {"path": "a.py", "start_line": 1.5}, "start_line must be a integer"),
    ("read_file", {"path": "a.py", "lines": 3}, "unknown argument(s) ['lines']"),
    ("submit", {}, "missing required argument(s) ['summary']"),
    ("traincheck", {"configuration": 2}, "configuration must be a string"),
])
def test_arguments_that_do_not_fit_the_schema_are_refused_before_dispatch(
    name: str, args: dict[str, Any], says: str
) -> None:
    result = _runner_that_must_not_run().run(name, args)
    assert not result.ok and f"bad arguments for {name}" in result.output, result.output
    assert says in result.output, result.output


def test_arguments_that_fit_and_optional_nulls_pass() -> None:
    bash = next(t for t in COMMON_TOOLS if t.name == "bash")
    assert argument_problem(bash, {"command": "ls"}) is None
    assert argument_problem(bash, {"command": "ls", "timeout_s": 10}) is None  # int is a number
    assert argument_problem(bash, {"command": "ls", "timeout_s": None}) is None


def test_non_finite_numbers_are_kept_as_text_and_refused() -> None:
    # Scripted YAML (.nan) or an SDK's parsed JSON (NaN): kept as the text that was sent, so
    # the transcript cannot record null for what the model sent.
    call = ToolCall(id="c1", name="bash", args={"command": "ls", "timeout_s": math.nan})
    assert set(call.args) == {UNPARSED_ARGUMENTS} and "NaN" in call.args[UNPARSED_ARGUMENTS]
    assert parse_arguments('{"command": "ls", "timeout_s": Infinity}') == {
        UNPARSED_ARGUMENTS: '{"command": "ls", "timeout_s": Infinity}'}
    result = _runner_that_must_not_run().run("bash", call.args)
    assert not result.ok and "not a JSON object of finite values" in result.output


def test_negative_token_counts_are_not_usage() -> None:
    with pytest.raises(ValidationError):
        TokenUsage(input_tokens=-5_000_000)
