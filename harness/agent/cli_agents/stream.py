"""A CLI's own event stream (its JSONL stdout) into the transcript.

Claude Code (``--output-format stream-json``): ``assistant`` events hold the model's
``tool_use`` blocks, ``user`` events the ``tool_result`` blocks the CLI sends back, and the
last ``result`` event says how the run ended. Codex (``exec --json``): ``item.started`` /
``item.completed`` for each command, file change, MCP or web call, ``turn.completed`` /
``turn.failed`` and ``error``. Each tool use becomes a ``tool_call`` event and its result a
``tool_result`` (``details.source`` says it came from the CLI), so replay, the viewer and
audits read a CLI session as they read the loop's.

Every line is hostile until parsed: one over MAX_LINE_BYTES is dropped (counted), one that is
not a JSON object is counted, never raised. The whole stream is also kept as an artifact.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from harness.agent.providers.base import MAX_TURN_DEPTH, ToolCall, nesting
from harness.infra.images.cli_binaries import CliKind
from harness.records.transcript import TranscriptWriter

MAX_LINE_BYTES = 8 * 1024**2
# Codex item types that are tool uses.
CODEX_TOOL_ITEMS = frozenset({"command_execution", "file_change", "mcp_tool_call",
                              "web_search"})
# What of a result event the record keeps (the rest is in the stream artifact).
RESULT_FIELDS = ("type", "subtype", "is_error", "result", "num_turns", "duration_ms",
                 "stop_reason", "terminal_reason", "usage", "total_cost_usd",
                 "api_error_status", "permission_denials")


def _text_of(content: Any) -> str:
    """A tool result's content: a string, or a list of text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content
                         if isinstance(b, dict) and b.get("type") == "text")
    return "" if content is None else json.dumps(content)[:100_000]


class EventStream:
    """Feeds of the CLI's stdout, turned into transcript events as lines complete."""

    def __init__(self, cli: CliKind, transcript: TranscriptWriter,
                 on_tool_result: Callable[[], None] | None = None) -> None:
        self.cli = cli
        self.transcript = transcript
        self.on_tool_result = on_tool_result or (lambda: None)
        self.events = 0
        self.unparsed = 0
        self.oversize = 0
        self.result: dict[str, Any] | None = None  # Claude Code's result event (its fields)
        self.turn_failed: str | None = None  # Codex: why its turn failed
        self.turns_completed = 0
        self.last_message = ""
        self.init: dict[str, Any] | None = None
        self._buffer = bytearray()
        self._skipping = False
        self._pending: dict[str, tuple[str, float]] = {}  # tool id -> (name, started)
        self._lock = threading.Lock()

    # --- bytes -> lines --------------------------------------------------------------------

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            self._buffer += chunk
            while True:
                end = self._buffer.find(b"\n")
                if end < 0:
                    if len(self._buffer) > MAX_LINE_BYTES:
                        self._buffer.clear()
                        if not self._skipping:
                            self.oversize += 1
                        self._skipping = True
                    return
                line = bytes(self._buffer[:end])
                del self._buffer[:end + 1]
                if self._skipping:  # the tail of a line already dropped
                    self._skipping = False
                    continue
                self._line(line)

    def close(self) -> None:
        with self._lock:
            if self._buffer and not self._skipping:
                self._line(bytes(self._buffer))
            self._buffer.clear()

    def _line(self, line: bytes) -> None:
        if not line.strip():
            return
        if len(line) > MAX_LINE_BYTES:
            self.oversize += 1
            return
        try:
            event = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            self.unparsed += 1
            return
        if not isinstance(event, dict) or nesting(event)[0] > MAX_TURN_DEPTH:
            self.unparsed += 1
            return
        self.events += 1
        try:
            if self.cli == "claude-code":
                self._claude(event)
            else:
                self._codex(event)
        except (KeyError, TypeError, ValueError, AttributeError):
            self.unparsed += 1  # a shape this version does not send: kept in the artifact only

    # --- transcript events -----------------------------------------------------------------

    def _call(self, call_id: str, name: str, args: dict[str, Any]) -> None:
        call = ToolCall(id=call_id, name=name, args=args)  # bounds nesting, NaN
        self._pending[call_id] = (name, time.monotonic())
        self.transcript.append("tool_call", call.model_dump(mode="json"))

    def _result(self, call_id: str, ok: bool, output: str, *, exit_code: int | None = None,
                details: dict[str, Any] | None = None) -> None:
        name, started = self._pending.pop(call_id, ("unknown", time.monotonic()))
        size = len(output.encode("utf-8", errors="surrogatepass"))
        self.transcript.append("tool_result", {
            "id": call_id, "name": name, "ok": ok, "output": output, "exit_code": exit_code,
            "timed_out": False, "duration_s": round(time.monotonic() - started, 4),
            "output_bytes": size, "output_truncated": False, "artifact": None,
            "artifact_truncated": False, "artifact_bytes": 0, "kill": "none",
            "ends_session": False, "details": {"source": self.cli, **(details or {})},
            "shown_to_model": output, "cut_for_model": False,
        })
        self.on_tool_result()

    def _claude(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        parent = event.get("parent_tool_use_id")
        extra = {"parent_tool_use_id": parent} if parent else {}
        if kind == "system" and event.get("subtype") == "init":
            self.init = {k: event.get(k) for k in ("model", "tools", "permissionMode",
                                                   "claude_code_version", "cwd")}
        elif kind == "assistant":
            for block in (event.get("message") or {}).get("content") or []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    args = block.get("input")
                    self._call(str(block.get("id", "")), str(block.get("name", "")),
                               args if isinstance(args, dict) else {})
                elif isinstance(block, dict) and block.get("type") == "text":
                    self.last_message = str(block.get("text", ""))
        elif kind == "user":
            content = (event.get("message") or {}).get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    self._result(str(block.get("tool_use_id", "")),
                                 not block.get("is_error", False),
                                 _text_of(block.get("content")), details=extra)
        elif kind == "result":
            self.result = {k: event[k] for k in RESULT_FIELDS if k in event}

    def _codex(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        found = event.get("item")
        item: dict[str, Any] = found if isinstance(found, dict) else {}
        item_type = item.get("type")
        if kind == "item.started" and item_type in CODEX_TOOL_ITEMS:
            self._call(str(item.get("id", "")), str(item_type), _codex_args(item))
        elif kind == "item.completed" and item_type in CODEX_TOOL_ITEMS:
            call_id = str(item.get("id", ""))
            if call_id not in self._pending:
                self._call(call_id, str(item_type), _codex_args(item))
            code = item.get("exit_code")
            code = code if isinstance(code, int) and not isinstance(code, bool) else None
            ok = item.get("status") == "completed" and code in (0, None)
            output = str(item.get("aggregated_output") or "") if item_type == \
                "command_execution" else json.dumps({k: v for k, v in item.items()
                                                     if k not in ("id", "type")})[:100_000]
            self._result(call_id, ok, output, exit_code=code,
                         details={"status": item.get("status")})
        elif kind == "item.completed" and item_type == "agent_message":
            self.last_message = str(item.get("text", ""))
        elif kind == "turn.completed":
            self.turns_completed += 1
        elif kind == "turn.failed":
            self.turn_failed = str((event.get("error") or {}).get("message", "turn failed"))
        elif kind == "error" and self.turn_failed is None:
            self.turn_failed = str(event.get("message", "error"))[:2000]


def _codex_args(item: dict[str, Any]) -> dict[str, Any]:
    if item.get("type") == "command_execution":
        return {"command": str(item.get("command", ""))}
    return {k: v for k, v in item.items()
            if k not in ("id", "type", "status", "aggregated_output", "exit_code")}
