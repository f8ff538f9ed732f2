"""Which tools an arm has: the common ones, plus the extra tools its study lists."""

from __future__ import annotations

from harness.agent.tools import COMMON_TOOLS, ToolSpec, spec_of
from harness.agent.traincheck_tool import TraincheckTool
from harness.errors import HarnessError

# Extra tools an arm may add; an arm lists them in its study's ``extra_tools``. Their
# handlers are built per session (harness/study/session.py) and given to the ToolRunner, so an arm
# that does not list a tool can never run it.
EXTRA_TOOLS: dict[str, ToolSpec] = {
    "traincheck": spec_of(TraincheckTool.__call__, "traincheck"),
}


def tools_for_arm(extra_tools: list[str]) -> list[ToolSpec]:
    unknown = [name for name in extra_tools if name not in EXTRA_TOOLS]
    if unknown:
        raise HarnessError(f"unknown extra tool(s) {unknown}", f"known: {sorted(EXTRA_TOOLS)}")
    return COMMON_TOOLS + [EXTRA_TOOLS[name] for name in extra_tools]
