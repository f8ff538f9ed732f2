"""The agent's tools, defined once as data so both arms share them, and their execution.

Each tool runs in the session's container: commands through ``Sandbox.exec`` (timeout
bounded by the time left), file reads and edits through the image's ``harness-tool``,
writes through ``put_archive``. Nothing here touches the host's copy of the task.
"""

from __future__ import annotations

import functools
import inspect
import math
import posixpath
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from pydantic import BaseModel, Field

from grading.packet import CUDA_CONFIGURATIONS
from harness.agent.providers.base import UNPARSED_ARGUMENTS
from harness.infra.sandbox import WORKSPACE, Sandbox, SandboxLost
from harness.records.budget import ComputeCategory, Ledger
from harness.records.packets import TaskPacket
from harness.text import first_lone_surrogate

# Arguments travel on the exec command line, which Linux caps at 128 KiB per argument.
MAX_EXEC_ARGUMENT_BYTES = 100_000
# What one session's tool outputs may write to artifact files on the host, all together (each
# call is also capped by SandboxLimits.artifact_output_bytes): without it, 150 calls of 256 MiB
# could fill the runs disk that other sessions share. Past it, the model still sees each
# output's head and tail, and each result says its artifact was cut.
ARTIFACT_ALLOWANCE_BYTES = 2 * 1024**3


class ToolSpec(BaseModel):
    """A tool as the model sees it: name, description and a JSON-schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]

    def api_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "parameters": self.parameters}


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def spec_of(handler: Callable[..., Any], name: str) -> ToolSpec:
    """The tool as the model sees it, read off its handler: the docstring is the description,
    each keyword parameter an argument (its type from the annotation, a description from an
    ``Annotated[..., "text"]``), required unless it has a default. One definition, so the
    schema the model gets and the arguments the handler takes cannot disagree."""
    hints = get_type_hints(handler, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(handler).parameters.items():
        if pname == "self" or param.kind is inspect.Parameter.POSITIONAL_ONLY:
            continue
        hint, notes = hints[pname], []
        if get_origin(hint) is Annotated:
            hint, *notes = get_args(hint)
        members = [a for a in get_args(hint) if a is not type(None)] or [hint]
        prop: dict[str, Any] = {"type": _JSON_TYPES[members[0]]}
        described = [n for n in notes if isinstance(n, str)]
        if described:
            prop["description"] = described[0]
        properties[pname] = prop
        if param.default is inspect.Parameter.empty:
            required.append(pname)
    description = " ".join((inspect.getdoc(handler) or "").split())
    if not description:
        raise TypeError(f"tool handler {handler.__qualname__} needs a docstring: the model "
                        "reads it as the tool's description")
    return ToolSpec(name=name, description=description,
                    parameters=_schema(properties, required))


_PATH = Annotated[str, "path relative to /workspace"]


class ToolResult(BaseModel):
    """What a tool call did; ``output`` is what the model sees."""

    ok: bool
    output: str
    exit_code: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    output_bytes: int = 0
    output_truncated: bool = False
    artifact: str | None = None
    artifact_truncated: bool = False
    artifact_bytes: int = 0
    kill: str = "none"
    ends_session: bool = False
    details: dict[str, Any] = Field(default_factory=dict)


class ToolError(Exception):
    """The call cannot be carried out as asked; the message goes back to the model."""


# The handler of an extra tool: called with the runner and the model's arguments as keywords;
# each handler declares its own, so the type cannot name them.
ExtraTool = Callable[..., "ToolResult"]


def _lone_surrogate(value: Any, where: str) -> str | None:
    """Where a lone surrogate sits in a tool argument, as a line for the model; else None."""
    if isinstance(value, str):
        found = first_lone_surrogate(value)
        if found is None:
            return None
        index, codepoint = found
        return (f"argument {where} is not valid Unicode text: it holds a lone surrogate "
                f"{codepoint} at character {index} (an unpaired \\u escape in the tool call's "
                "JSON); the call was not run. Send it again without that escape")
    if isinstance(value, dict):
        items = [(f"{where}.{key}" if where else str(key), item) for key, item in value.items()]
    elif isinstance(value, list):
        items = [(f"{where}[{i}]", item) for i, item in enumerate(value)]
    else:
        return None
    return next((p for w, item in items if (p := _lone_surrogate(item, w))), None)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number" if math.isfinite(value) else "a non-finite number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _fits(value: Any, json_type: str) -> bool:
    got = _json_type(value)
    return got == json_type or (json_type == "number" and got == "integer")


def argument_problem(spec: ToolSpec, args: Mapping[str, Any]) -> str | None:
    """Why the model's arguments do not fit the schema it was shown for the tool, as a line
    for the model; None when they fit. Checked before any handler runs, so a handler only ever
    sees the types it declares: a model's mistake is a failed call, never a harness error."""
    if UNPARSED_ARGUMENTS in args:
        text = str(args[UNPARSED_ARGUMENTS])
        return (f"the arguments are not a JSON object of finite values ({text[:200]!r}); the "
                "call was not run")
    properties: dict[str, Any] = spec.parameters["properties"]
    required: list[str] = spec.parameters["required"]
    unknown = sorted(set(args) - set(properties))
    if unknown:
        return f"unknown argument(s) {unknown}; {spec.name} takes {sorted(properties)}"
    missing = [name for name in required if args.get(name) is None]
    if missing:
        return f"missing required argument(s) {missing}"
    for name, value in args.items():
        want = properties[name]["type"]
        if value is not None and not _fits(value, want):
            return f"argument {name} must be a {want}, not {_json_type(value)}"
    return None


@functools.cache
def _spec_for(handler: Callable[..., Any], name: str) -> ToolSpec:
    return spec_of(handler, name)


def workspace_path(path: Any) -> str:
    """An absolute container path under /workspace, or ToolError."""
    if not isinstance(path, str) or not path.strip():
        raise ToolError("path must be a non-empty string")
    joined = posixpath.normpath(posixpath.join(WORKSPACE, path))
    if joined != WORKSPACE and not joined.startswith(WORKSPACE + "/"):
        raise ToolError(f"path {path!r} is outside /workspace")
    return joined


class ToolRunner:
    """Executes tool calls for one session."""

    def __init__(
        self,
        sandbox: Sandbox,
        packet: TaskPacket,
        ledger: Ledger,
        artifacts_dir: Path,
        *,
        default_timeout_s: float = 300.0,
        gpus_available: bool = False,
        extra_tools: Mapping[str, ExtraTool] | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.packet = packet
        self.ledger = ledger
        self.artifacts_dir = artifacts_dir
        self.default_timeout_s = default_timeout_s
        self.gpus_available = gpus_available
        # Only the arm's own extra tools; any other name is an unknown tool.
        self.extra_tools = dict(extra_tools or {})
        self._count = 0
        self.artifact_bytes = 0  # written so far, against ARTIFACT_ALLOWANCE_BYTES

    def is_candidate_run(self, name: str) -> bool:
        return name == "run_candidate"

    def has_tool(self, name: str) -> bool:
        """Whether this session's arm has the tool (any other name is an unknown tool)."""
        return name in self.extra_tools or hasattr(type(self), f"_tool_{name}")

    def artifact_path(self, label: str) -> Path:
        """Where the current call keeps a whole output: ``artifacts/NNNN-<label>.log``."""
        path = self.artifacts_dir / f"{self._count:04d}-{label}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def run(self, name: str, args: dict[str, Any]) -> ToolResult:
        if not self.has_tool(name):
            return ToolResult(ok=False, output=f"unknown tool {name!r}")
        extra = self.extra_tools.get(name)
        self._count += 1
        # The schema the model was shown, read off the same handler (an extra tool is a
        # callable object: its __call__).
        declared = getattr(type(self), f"_tool_{name}") if extra is None else type(extra).__call__
        problem = argument_problem(_spec_for(declared, name), args)
        if problem is not None:
            return ToolResult(ok=False, output=f"error: bad arguments for {name}: {problem}")
        # No command, file or exec can carry such a string as it is: refuse, never mangle.
        problem = _lone_surrogate(args, "")
        if problem is not None:
            return ToolResult(ok=False, output=f"error: {problem}")
        # Optional arguments sent as null are the defaults, as the schema's "required" implies.
        given = {key: value for key, value in args.items() if value is not None}
        try:
            if extra is not None:
                return extra(self, **given)
            result: ToolResult = declared(self, **given)
            return result
        except ToolError as exc:
            return ToolResult(ok=False, output=f"error: {exc}")

    # --- command tools ------------------------------------------------------------------

    def _exec(
        self, command: list[str] | str, timeout_s: float, category: ComputeCategory, label: str
    ) -> ToolResult:
        artifact = self.artifact_path(label)
        timeout = self.ledger.bounded_timeout(timeout_s)
        result = self.sandbox.exec(command, timeout_s=timeout, artifact=artifact,
                                   artifact_cap=ARTIFACT_ALLOWANCE_BYTES - self.artifact_bytes)
        self.artifact_bytes += result.artifact_bytes
        self.ledger.add_compute(category, result.duration_s)
        output = result.output
        if result.timed_out:
            output += f"\n[harness: command timed out after {timeout:.0f} s and was killed]"
        else:
            output += f"\n[exit code {result.exit_code}]"
        return ToolResult(
            ok=not result.timed_out and result.exit_code == 0,
            output=output,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            duration_s=result.duration_s,
            output_bytes=result.output_bytes,
            output_truncated=result.output_truncated,
            artifact=str(artifact),
            artifact_truncated=result.artifact_truncated,
            artifact_bytes=result.artifact_bytes,
            kill=result.kill,
            details={"call_id": result.call_id, "kill_note": result.kill_note},
        )

    def _tool_bash(self, command: str,
                   timeout_s: Annotated[float | None, "default 300"] = None) -> ToolResult:
        """Run a bash command in /workspace (no network). Output is cut head-and-tail when
        long; the cut is marked."""
        if len(command.encode()) > MAX_EXEC_ARGUMENT_BYTES:
            raise ToolError(f"command too long for one exec (over {MAX_EXEC_ARGUMENT_BYTES} "
                            "bytes); write it to a file with write_file and run that")
        return self._exec(command, timeout_s or self.default_timeout_s, "agent_tools", "bash")

    def _tool_run_public_tests(self) -> ToolResult:
        """Run the task's public test suite."""
        spec = self.packet.spec
        return self._exec(spec.public_test_command, spec.public_test_timeout_s, "agent_tools",
                          "public-tests")

    def _tool_run_candidate(self, configuration: str) -> ToolResult:
        """Launch one full training run of a declared configuration (counted against the
        candidate-run budget)."""
        spec = self.packet.spec
        if configuration not in spec.candidate_commands:
            raise ToolError(f"configuration {configuration!r} is not declared; "
                            f"declared: {sorted(spec.candidate_commands)}")
        if configuration in CUDA_CONFIGURATIONS and not self.gpus_available:
            raise ToolError(f"{configuration} needs GPUs and this session has none")
        return self._exec(spec.candidate_commands[configuration], spec.candidate_timeout_s,
                          "candidate_runs", f"candidate-{configuration}")

    # --- file tools ---------------------------------------------------------------------

    def _tool_read_file(
        self, path: _PATH, start_line: int | None = None, end_line: int | None = None
    ) -> ToolResult:
        """Show a text file with line numbers, optionally a line range."""
        cmd = ["harness-tool", "read", workspace_path(path), "--start", str(start_line or 1)]
        if end_line is not None:
            cmd += ["--end", str(end_line)]
        return self._exec(cmd, 60, "agent_tools", "read")

    def _tool_edit_file(self, path: _PATH, old: str, new: str) -> ToolResult:
        """Replace one exact, unique occurrence of `old` with `new` in a file."""
        if max(len(old.encode()), len(new.encode())) > MAX_EXEC_ARGUMENT_BYTES:
            raise ToolError(f"edit too large for edit_file (over {MAX_EXEC_ARGUMENT_BYTES} "
                            "bytes); use write_file")
        return self._exec(["harness-tool", "edit", workspace_path(path), old, new], 60,
                          "agent_tools", "edit")

    def _tool_write_file(self, path: _PATH, content: str) -> ToolResult:
        """Create or overwrite a file with the given content."""
        target = workspace_path(path)
        if target == WORKSPACE:
            raise ToolError("path must name a file")
        started = time.monotonic()
        data = content.encode()
        try:
            self.sandbox.put_file(WORKSPACE, posixpath.relpath(target, WORKSPACE), data)
        except SandboxLost:
            raise
        except Exception as exc:  # docker refuses e.g. writing over a directory, or a full disk
            self.sandbox.check_alive()
            raise ToolError(f"cannot write {path}: {exc}") from exc
        duration = time.monotonic() - started
        self.ledger.add_compute("agent_tools", duration)
        return ToolResult(ok=True, output=f"wrote {len(data)} bytes to {path}",
                          duration_s=round(duration, 4))

    def _tool_submit(self, summary: str) -> ToolResult:
        """Finish the session; your workspace as it is now is what gets graded."""
        return ToolResult(ok=True, output="submitted", ends_session=True,
                          details={"summary": summary})


# The tools every arm has, in the order the model is shown them.
COMMON_TOOLS: list[ToolSpec] = [
    spec_of(getattr(ToolRunner, f"_tool_{name}"), name)
    for name in ("bash", "read_file", "write_file", "edit_file", "run_public_tests",
                 "run_candidate", "submit")
]
