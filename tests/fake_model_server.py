"""A local HTTP server that speaks the OpenAI Chat Completions and Anthropic Messages APIs.

It replays scripted replies in order (tool calls, text, errors with headers, slow replies,
dropped connections, malformed bodies) and records every request, so tests drive the real
``openai`` and ``anthropic`` SDKs over real HTTP on loopback.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted reply. ``body`` may be a dict (sent as JSON) or raw text."""

    status: int = 200
    body: dict[str, Any] | str = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    drop: bool = False  # close the connection without answering


def openai_tool_reply(name: str, args: dict[str, Any], *, prompt_tokens: int,
                      completion_tokens: int, call_id: str = "call_1", text: str = "") -> Reply:
    return Reply(body={
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "fake-gpt",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": text or None,
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)}}]}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })


def openai_text_reply(text: str, *, prompt_tokens: int, completion_tokens: int) -> Reply:
    return Reply(body={
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "fake-gpt",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })


def anthropic_tool_reply(name: str, args: dict[str, Any], *, input_tokens: int,
                         output_tokens: int, call_id: str = "toolu_1", text: str = "") -> Reply:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
    return Reply(body={
        "id": "msg_test", "type": "message", "role": "assistant", "model": "fake-claude",
        "content": content, "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    })


def anthropic_text_reply(text: str, *, input_tokens: int, output_tokens: int) -> Reply:
    return Reply(body={
        "id": "msg_test", "type": "message", "role": "assistant", "model": "fake-claude",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    })


def tool_reply(kind: str, name: str, args: dict[str, Any], inp: int, out: int,
               call_id: str = "c1") -> Reply:
    """A tool call in the API named by ``kind`` (``openai`` or ``anthropic``)."""
    if kind == "openai":
        return openai_tool_reply(name, args, prompt_tokens=inp, completion_tokens=out,
                                 call_id=call_id)
    return anthropic_tool_reply(name, args, input_tokens=inp, output_tokens=out,
                                call_id=call_id)


def text_reply(kind: str, text: str, inp: int, out: int) -> Reply:
    if kind == "openai":
        return openai_text_reply(text, prompt_tokens=inp, completion_tokens=out)
    return anthropic_text_reply(text, input_tokens=inp, output_tokens=out)


class FakeModelServer:
    """``with FakeModelServer() as server: server.replies += [...]; server.url``."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                with outer._lock:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    outer.requests.append({"path": self.path, "headers": headers,
                                           "body": json.loads(raw or b"{}"),
                                           "time": time.monotonic()})
                    reply = outer.replies.pop(0) if outer.replies else Reply(
                        status=500, body={"error": {"message": "no scripted reply left"}})
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.drop:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.connection.close()
                    self.close_connection = True
                    return
                data = (reply.body if isinstance(reply.body, str)
                        else json.dumps(reply.body)).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout): that is what the test looks at

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
