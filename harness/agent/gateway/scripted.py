"""The offline provider behind a CLI agent's gateway when the study's model is ``scripted:``.

A real HTTP server on the host's loopback that answers the CLIs' real requests (Anthropic
Messages for Claude Code, OpenAI Responses for Codex, Chat Completions too; streamed as the
CLIs ask) by playing a loop agent's script (harness/agent/providers/scripted.py), each step
translated into the CLI's own tools: ``write_file`` becomes Claude Code's Write (after the Read
it insists on) or a Codex shell command, ``run_candidate`` the ``harness-run-candidate`` command,
``submit`` the final answer. So one script drives every agent kind, and a study switches its
agent with one line. The gateway forwards to it exactly as to a real provider (with a dummy
key), and ``sent`` keeps the usage each answer reported, so tests compare the two.

Which step comes next is read from the request itself (the number of tool results in it),
so a retried request gets the same answer. Codex hands a command that outlives its wait
(``yield_time_ms``, at most 30 s) back as a running session; a result that says so is no step
done, and the answer is to wait on that session (``write_stdin`` with nothing to write), as a
model would, until the command has ended.
"""

from __future__ import annotations

import base64
import json
import posixpath
import re
import shlex
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harness.agent.providers.scripted import Script, ScriptStep, load_script
from harness.infra.sandbox import WORKSPACE

HEREDOC_END = "HARNESS_SCRIPTED_EOF"
# Codex's words for a command still running when its wait ended (0.169's unified exec).
RUNNING = re.compile(r"Process running with session ID (\d+)")
# How long Codex waits on a command before handing it back (its most), and on a poll.
EXEC_YIELD_MS = 30_000
POLL_YIELD_MS = 300_000


@dataclass(frozen=True)
class Turn:
    """One answer: a single tool call in the CLI's own terms, or the final text."""

    tool: str | None
    args: dict[str, Any]
    text: str
    step: ScriptStep | None


def _path(rel: Any) -> str:
    return posixpath.normpath(posixpath.join(WORKSPACE, str(rel)))


def claude_turns(step: ScriptStep) -> list[Turn]:
    """A loop step as Claude Code's tools (Bash, Read, Write, Edit)."""
    a = step.args
    if step.tool == "submit":
        return [Turn(None, {}, str(a.get("summary", "done")), step)]
    if step.tool == "bash":
        args: dict[str, Any] = {"command": str(a.get("command", "")),
                                "description": "scripted step"}
        if a.get("timeout_s"):
            args["timeout"] = int(min(float(a["timeout_s"]), 600) * 1000)
        return [Turn("Bash", args, step.text, step)]
    if step.tool == "read_file":
        args = {"file_path": _path(a.get("path"))}
        if a.get("start_line"):
            args["offset"] = int(a["start_line"])
        if a.get("end_line"):
            args["limit"] = int(a["end_line"]) - int(a.get("start_line") or 1) + 1
        return [Turn("Read", args, step.text, step)]
    if step.tool in ("write_file", "edit_file"):
        target = _path(a.get("path"))
        # Claude Code refuses to overwrite or edit a file it has not read in full first.
        read = Turn("Read", {"file_path": target}, "", None)
        if step.tool == "write_file":
            return [read, Turn("Write", {"file_path": target, "content": str(a.get("content", ""))},
                               step.text, step)]
        return [read, Turn("Edit", {"file_path": target, "old_string": str(a.get("old", "")),
                                    "new_string": str(a.get("new", ""))}, step.text, step)]
    return [Turn("Bash", {"command": _harness_command(step), "description": "scripted step"},
                 step.text, step)]


def _harness_command(step: ScriptStep) -> str:
    """The harness's tools as the commands a CLI agent has instead."""
    config = shlex.quote(str(step.args.get("configuration", "")))
    return {"run_public_tests": "harness-run-public-tests",
            "run_candidate": f"harness-run-candidate {config}",
            "traincheck": f"traincheck {config}"}.get(
        step.tool, f"echo {shlex.quote(f'scripted tool {step.tool} has no CLI equivalent')}")


def shell_command(step: ScriptStep) -> str:
    """A loop step as one shell command (Codex's exec_command)."""
    a = step.args
    if step.tool == "bash":
        return str(a.get("command", ""))
    if step.tool == "read_file":
        start = int(a.get("start_line") or 1)
        end = f"{int(a['end_line'])}" if a.get("end_line") else "$"
        return f"cat -n {shlex.quote(_path(a.get('path')))} | sed -n '{start},{end}p'"
    if step.tool == "write_file":
        target = _path(a.get("path"))
        content = str(a.get("content", ""))
        folder = f"mkdir -p {shlex.quote(posixpath.dirname(target))} && "
        lines = content.split("\n")
        if content.endswith("\n") and HEREDOC_END not in lines:
            return f"{folder}cat > {shlex.quote(target)} <<'{HEREDOC_END}'\n{content}{HEREDOC_END}"
        encoded = base64.b64encode(content.encode()).decode()
        return f"{folder}printf %s {encoded} | base64 -d > {shlex.quote(target)}"
    if step.tool == "edit_file":
        return (f"harness-tool edit {shlex.quote(_path(a.get('path')))} "
                f"{shlex.quote(str(a.get('old', '')))} {shlex.quote(str(a.get('new', '')))}")
    return _harness_command(step)


def codex_turns(step: ScriptStep) -> list[Turn]:
    if step.tool == "submit":
        return [Turn(None, {}, str(step.args.get("summary", "done")), step)]
    return [Turn("exec_command", {"cmd": shell_command(step), "yield_time_ms": EXEC_YIELD_MS},
                 step.text, step)]


def _output_text(item: dict[str, Any]) -> str:
    output = item.get("output")
    if isinstance(output, list):  # content parts
        return "".join(str(p.get("text", "")) for p in output if isinstance(p, dict))
    return str(output or "")


def _responses_outputs(body: dict[str, Any]) -> list[str]:
    items = body.get("input")
    return [_output_text(i) for i in items if isinstance(i, dict) and i.get("type") in (
        "function_call_output", "custom_tool_call_output")] if isinstance(items, list) else []


def running_session(api: str, body: dict[str, Any]) -> int | None:
    """The Codex session whose command the last tool result left running, if it did."""
    outputs = _responses_outputs(body) if api == "openai-responses" else []
    found = RUNNING.search(outputs[-1]) if outputs else None
    return int(found.group(1)) if found else None


def _tool_results(api: str, body: dict[str, Any]) -> int:
    """How many tool results the conversation holds (a command still running is none yet):
    the index of the next turn."""
    if api == "openai-responses":
        return sum(1 for text in _responses_outputs(body) if not RUNNING.search(text))
    count = 0
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool":
            count += 1
        content = message.get("content")
        if isinstance(content, list):
            count += sum(1 for b in content if isinstance(b, dict)
                         and b.get("type") == "tool_result")
    return count


def _usage_for(raw: bytes, reply: str, step: ScriptStep | None) -> tuple[int, int, int]:
    """(uncached input, cached input, output) an answer reports: the step's own figures, or
    figures derived from the sizes (about four bytes a token), half the input as cached."""
    if step is not None and (step.usage.input_tokens or step.usage.output_tokens):
        return step.usage.input_tokens, 0, step.usage.output_tokens
    total = len(raw) // 4 + 1
    return total - total // 2, total // 2, len(reply) // 4 + 1


def _sse(events: list[dict[str, Any]], named: bool = True) -> bytes:
    out = []
    for event in events:
        head = f"event: {event['type']}\n" if named and "type" in event else ""
        out.append(f"{head}data: {json.dumps(event)}\n\n")
    return "".join(out).encode()


@dataclass
class ScriptedUpstream:
    """The server; ``url`` is its base (Anthropic style, no /v1)."""

    script: Script
    cli: str  # claude-code | codex
    sent: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    # The credential each request carried (x-api-key or authorization), so a test can see
    # that the gateway added the host's key.
    credentials: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.turns: list[Turn] = []
        for step in self.script.steps:
            self.turns += claude_turns(step) if self.cli == "claude-code" else codex_turns(step)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @classmethod
    def from_file(cls, path: Path, cli: str) -> ScriptedUpstream:
        return cls(load_script(path), cli)

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ScriptedUpstream:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.credentials.append(self.headers.get("x-api-key")
                                         or self.headers.get("authorization") or "")
                status, content_type, body = outer.answer(self.path.split("?")[0], raw)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="scripted-upstream",
                         daemon=True).start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def answer(self, path: str, raw: bytes) -> tuple[int, str, bytes]:
        api = {"/v1/messages": "anthropic-messages", "/v1/responses": "openai-responses",
               "/v1/chat/completions": "openai-chat"}.get(path)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if api is None or not isinstance(body, dict):
            return 400, "application/json", b'{"error": {"message": "not a request"}}'
        with self._lock:
            self.requests += 1
            index = _tool_results(api, body)
            waiting = running_session(api, body)
            if waiting is not None:
                turn = Turn("write_stdin", {"session_id": waiting, "chars": "",
                                            "yield_time_ms": POLL_YIELD_MS}, "", None)
            else:
                turn = (self.turns[index] if index < len(self.turns)
                        else Turn(None, {}, "(script finished)", None))
            reply_text = json.dumps({"tool": turn.tool, "args": turn.args, "text": turn.text})
            fresh, cached, output = _usage_for(raw, reply_text, turn.step)
            model = str(body.get("model", "scripted"))
            stream = bool(body.get("stream"))
            # Unique within the conversation: a poll is a call of its own.
            calls = len(_responses_outputs(body)) if api == "openai-responses" else index
            call_id = f"call_{calls + 1}"
            if api == "anthropic-messages":
                usage = {"input_tokens": fresh, "cache_read_input_tokens": cached,
                         "cache_creation_input_tokens": 0, "output_tokens": output}
                data = _anthropic(turn, model, usage, call_id, stream)
            elif api == "openai-responses":
                usage = {"input_tokens": fresh + cached, "cached_tokens": cached,
                         "output_tokens": output}
                data = _responses(turn, model, usage, call_id, stream)
            else:
                usage = {"prompt_tokens": fresh + cached, "completion_tokens": output}
                data = _chat(turn, model, usage, call_id, stream)
            self.sent.append({"api": api, "turn": index, "usage": usage})
        return 200, "text/event-stream" if stream else "application/json", data


def _anthropic(turn: Turn, model: str, usage: dict[str, int], call_id: str,
               stream: bool) -> bytes:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
    if turn.tool is not None:
        blocks.append({"type": "tool_use", "id": f"toolu_{call_id}", "name": turn.tool,
                       "input": turn.args})
    stop = "tool_use" if turn.tool else "end_turn"
    message = {"id": f"msg_{call_id}", "type": "message", "role": "assistant", "model": model,
               "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage}
    if not stream:
        return json.dumps(message).encode()
    start = {**message, "content": [], "stop_reason": None,
             "usage": {**usage, "output_tokens": 1}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            events += [{"type": "content_block_start", "index": index,
                        "content_block": {"type": "text", "text": ""}},
                       {"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": block["text"]}}]
        else:
            events += [{"type": "content_block_start", "index": index,
                        "content_block": {**block, "input": {}}},
                       {"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta",
                                  "partial_json": json.dumps(block["input"])}}]
        events.append({"type": "content_block_stop", "index": index})
    events += [{"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]}},
               {"type": "message_stop"}]
    return _sse(events)


def _responses(turn: Turn, model: str, usage: dict[str, int], call_id: str,
               stream: bool) -> bytes:
    if turn.tool is not None:
        item: dict[str, Any] = {"type": "function_call", "id": f"fc_{call_id}",
                                "call_id": call_id, "name": turn.tool,
                                "arguments": json.dumps(turn.args), "status": "completed"}
    else:
        item = {"type": "message", "id": f"msg_{call_id}", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}]}
    response = {"id": f"resp_{call_id}", "object": "response", "model": model,
                "status": "completed", "output": [item],
                "usage": {"input_tokens": usage["input_tokens"],
                          "input_tokens_details": {"cached_tokens": usage["cached_tokens"]},
                          "output_tokens": usage["output_tokens"],
                          "output_tokens_details": {"reasoning_tokens": 0},
                          "total_tokens": usage["input_tokens"] + usage["output_tokens"]}}
    if not stream:
        return json.dumps(response).encode()
    return _sse([
        {"type": "response.created", "sequence_number": 0,
         "response": {**response, "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
         "item": {**item, "status": "in_progress"}},
        {"type": "response.output_item.done", "sequence_number": 2, "output_index": 0,
         "item": item},
        {"type": "response.completed", "sequence_number": 3, "response": response}])


def _chat(turn: Turn, model: str, usage: dict[str, int], call_id: str, stream: bool) -> bytes:
    usage_body = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
    calls = ([{"id": call_id, "type": "function",
               "function": {"name": turn.tool, "arguments": json.dumps(turn.args)}}]
             if turn.tool else [])
    message = {"role": "assistant", "content": turn.text or None, **(
        {"tool_calls": calls} if calls else {})}
    finish = "tool_calls" if calls else "stop"
    if not stream:
        return json.dumps({"id": f"chatcmpl-{call_id}", "object": "chat.completion",
                           "model": model, "choices": [{"index": 0, "message": message,
                                                        "finish_reason": finish}],
                           "usage": usage_body}).encode()
    delta: dict[str, Any] = {"role": "assistant", "content": turn.text or ""}
    if calls:
        delta["tool_calls"] = [{**calls[0], "index": 0}]
    head = {"id": f"chatcmpl-{call_id}", "object": "chat.completion.chunk", "model": model}
    chunks: list[dict[str, Any]] = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**head, "choices": [], "usage": usage_body}]
    return _sse(chunks, named=False) + b"data: [DONE]\n\n"
