"""Tool schemas are read off the handlers, so the model's view and the handler agree."""

from __future__ import annotations

import inspect

from harness.agent.tools import COMMON_TOOLS, ToolRunner
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
