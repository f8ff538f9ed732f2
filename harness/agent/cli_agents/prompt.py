"""What a CLI agent is told: the loop's instructions, the harness's commands it has instead of
the loop's tools, and the task. The arms differ by one line, the one the loop's arms differ by:
the treatment's ``traincheck`` with the description the loop's ``traincheck`` tool has."""

from __future__ import annotations

from harness.agent.tools import COMMON_TOOLS
from harness.agent.toolsets import EXTRA_TOOLS

CLI_INSTRUCTIONS = (
    "You are a software engineer working on a PyTorch training codebase in /workspace. "
    "Implement the feature request below without breaking the codebase's contracts "
    "(distributed training, checkpoint resume, export). Use your tools to read, edit, test "
    "and run the code; there is no network. When you are done, stop with a short summary: "
    "your workspace as it is then is what gets graded."
)
# The loop's tools that a CLI agent has as shell commands (its own tools read, write and
# edit files, and run commands), with the usage line each shows.
COMMANDS = {"run_public_tests": "harness-run-public-tests",
            "run_candidate": "harness-run-candidate CONFIGURATION"}
EXTRA_COMMANDS = {"traincheck": "traincheck CONFIGURATION"}


def _description(name: str) -> str:
    spec = next((t for t in COMMON_TOOLS if t.name == name), None) or EXTRA_TOOLS[name]
    return spec.description


def command_lines(extra_tools: list[str]) -> list[str]:
    """One line per harness command the arm has, as the loop lists its tools."""
    lines = [f"- {usage}: {_description(name)}" for name, usage in COMMANDS.items()]
    lines += [f"- {EXTRA_COMMANDS[name]}: {_description(name)}" for name in extra_tools]
    return lines


def build_cli_prompt(base: str | None, extra_tools: list[str], task_md: str) -> str:
    return "\n".join([base or CLI_INSTRUCTIONS, "",
                      "Commands (run them in your shell; `COMMAND --help` explains each):",
                      *command_lines(extra_tools), "", task_md])
