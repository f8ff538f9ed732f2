"""The gateway: an HTTP server on a unix socket, the one channel out of a CLI agent's sandbox.

The socket's folder is bind-mounted read-only into the container (the container has no
network); a forwarder inside relays the CLI's loopback connections to it. Two kinds of route
exist and nothing else:

* model calls (``/v1/messages``, ``/v1/responses``, ``/v1/chat/completions``): parsed, checked
  against the session's budgets before anything is forwarded (time left; the worst case of
  the call's tokens, with its output cap lowered to what the budget leaves), forwarded with
  the host's key under the study's retry policy, and recorded (request, attempts, answer,
  usage by category). The answer is read in full before the CLI sees it: its tool calls are
  counted against the tool-call budget first, and an answer holding one call too many is
  withheld. One model call runs at a time, so two calls can never both fit a budget that
  holds only one.
* harness commands (``/harness/tools/NAME``): a candidate run, the public tests or (treatment)
  TrainCheck, run by the host as the loop agent's tool of the same name.

Every refusal (a request that is not JSON, too large, an unknown path, a spent budget) is a
``gateway_refused`` event and an error in the API's own format that the CLI does not retry;
when a budget or the provider ends the session, ``ended`` says how and the driver stops the
CLI.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socketserver
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness.agent.gateway.apis import (
    API_PATHS,
    PROVIDER_OF,
    ApiName,
    ModelAnswer,
    ModelCall,
    RequestRefused,
    load_json_object,
    parse_answer,
    parse_request,
)
from harness.agent.gateway.upstream import Upstream, UpstreamReply, forward_once
from harness.agent.providers.base import (
    DeadlineReached,
    ProviderError,
    call_with_retries,
)
from harness.infra.sandbox import host_id, process_alive
from harness.records.budget import BudgetExhausted, Ledger
from harness.records.study import RetryPolicy
from harness.records.transcript import TranscriptWriter
from harness.text import json_dumps

SOCKET_NAME = "gateway.sock"
SOCKET_DIR_PREFIX = "harness-gateway-"


def _boot_digest() -> str:
    return hashlib.sha256(host_id().encode()).hexdigest()[:12]


def socket_dir_prefix() -> str:
    """The owner's pid and a digest of this boot's id, in the socket folder's name: `harness
    cleanup` removes the folders of a harness that died without closing its gateway, and never
    judges a pid of another boot. A name, not a file: the folder is mounted into the agent's
    container."""
    return f"{SOCKET_DIR_PREFIX}{os.getpid()}-{_boot_digest()}-"


def remove_orphan_socket_dirs(parent: Path | None = None) -> list[Path]:
    """Remove the socket folders (under ``parent``, default the system's temp folder) whose
    harness process no longer runs on this boot; returns them."""
    removed: list[Path] = []
    boot = _boot_digest()
    for folder in sorted(Path(parent or tempfile.gettempdir()).glob(f"{SOCKET_DIR_PREFIX}*")):
        pid, _, rest = folder.name[len(SOCKET_DIR_PREFIX):].partition("-")
        if not pid.isdigit() or folder.is_symlink() or not folder.is_dir():
            continue
        if not rest.startswith(f"{boot}-"):
            continue  # another boot's (or an older harness's): not judged from here
        if not process_alive(int(pid), host_id()):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


# Where the socket's folder appears inside the container.
CONTAINER_SOCKET_DIR = "/run/harness-gateway"
# The largest request the gateway reads (a CLI's whole conversation is resent each call;
# Claude Code's first request is ~90 KB).
MAX_REQUEST_BYTES = 32 * 1024**2
# What of a refused body the record keeps.
REFUSED_BODY_BYTES = 4096
# Framing tokens a provider adds per message and per request beyond the bytes sent (the
# loop's figures: harness/agent/loop.py).
MESSAGE_OVERHEAD_TOKENS = 16
REQUEST_OVERHEAD_TOKENS = 256
HARNESS_TOOL_PREFIX = "/harness/tools/"

# A harness command's handler: (name, arguments) -> (output, exit status).
ToolBridge = Callable[[str, dict[str, Any]], tuple[str, int]]


@dataclass(frozen=True)
class GatewayEnd:
    """Why the gateway ended the session: a budget, or the provider."""

    outcome: str  # budget_exhausted:<kind> | provider_error:<kind>
    error: str


@dataclass(frozen=True)
class GatewaySettings:
    upstream: Upstream
    retry: RetryPolicy
    # The output cap a call gets when it names none (the study's agent.max_output_tokens).
    default_output_tokens: int
    provider_label: str  # e.g. anthropic:claude-sonnet-4-5, recorded with each call


def input_bound(call: ModelCall) -> int:
    """An upper bound on the call's input tokens: every token is at least one byte of the
    request, plus the provider's framing per message and per request."""
    return (len(call.raw) + REQUEST_OVERHEAD_TOKENS
            + MESSAGE_OVERHEAD_TOKENS * len(call.messages))


def refusal_body(api: ApiName | None, message: str, *, budget: bool) -> tuple[int, bytes]:
    """(status, body) of an error the CLI reads as final: Anthropic's invalid_request_error,
    OpenAI's invalid_request_error, or for a spent budget the quota error each API sends when
    an account's credit is gone."""
    if api is None or PROVIDER_OF[api] == "anthropic":
        body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        return 400, json.dumps(body).encode()
    if budget:
        return 429, json.dumps({"error": {"message": message, "type": "insufficient_quota",
                                          "code": "insufficient_quota"}}).encode()
    return 400, json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                      "code": "invalid_request"}}).encode()


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    gateway: Gateway


class Gateway:
    """One session's gateway; ``start`` creates the socket, ``close`` removes it."""

    def __init__(self, settings: GatewaySettings, ledger: Ledger, transcript: TranscriptWriter,
                 tools: ToolBridge | None = None, *, socket_parent: Path | None = None) -> None:
        self.settings = settings
        self.ledger = ledger
        self.transcript = transcript
        self.tools = tools
        self.socket_parent = socket_parent
        self.socket_dir: Path | None = None
        self.ended: GatewayEnd | None = None
        self.end_event = threading.Event()
        self.calls = 0
        self.requests_refused = 0
        self.commands_closed = False
        self._model_lock = threading.Lock()
        self._tool_lock = threading.Lock()
        self._record_lock = threading.Lock()
        self._closed = False
        self._previous_messages: list[Any] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def socket_path(self) -> Path:
        assert self.socket_dir is not None
        return self.socket_dir / SOCKET_NAME

    def start(self) -> Gateway:
        self.socket_dir = Path(tempfile.mkdtemp(prefix=socket_dir_prefix(),
                                                dir=self.socket_parent))
        self.socket_dir.chmod(0o755)
        server = _Server(str(self.socket_path), _Handler, bind_and_activate=True)
        server.gateway = self
        # Only the container's agent (uid 1000) needs to connect; where the harness cannot
        # give the socket to that uid (not root), any local user may.
        try:
            os.chown(self.socket_path, 1000, 1000)
            self.socket_path.chmod(0o600)
        except PermissionError:
            self.socket_path.chmod(0o666)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="gateway",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        with self._record_lock:
            self._closed = True
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what a request does ---------------------------------------------------------------

    def record(self, kind: str, data: dict[str, Any]) -> bool:
        """Append to the transcript unless the session has ended (a late answer is dropped)."""
        with self._record_lock:
            if self._closed:
                return False
            self.transcript.append(kind, data)
            return True

    def end(self, outcome: str, error: str) -> None:
        if self.ended is None:
            self.ended = GatewayEnd(outcome=outcome, error=error)
        self.end_event.set()

    def refuse(self, method: str, path: str, status: int, reason: str, body: bytes,
               ) -> None:
        self.requests_refused += 1
        shown = body[:REFUSED_BODY_BYTES].decode("utf-8", errors="replace") if body else None
        self.record("gateway_refused", {"method": method, "path": path, "status": status,
                                        "reason": reason[:2000], "body": shown,
                                        "body_bytes": len(body)})

    def model_call(self, api: ApiName, path: str, query: str, headers: dict[str, str],
                   raw: bytes) -> tuple[int, str, bytes]:
        """(status, content type, body) for the CLI."""
        try:
            call = parse_request(api, raw)
        except RequestRefused as exc:
            self.refuse("POST", path, exc.status, exc.reason, raw)
            status, body = refusal_body(api, f"harness gateway: {exc.reason}", budget=False)
            return status, "application/json", body
        with self._model_lock:
            if self.ended is not None:
                message = f"the session has ended ({self.ended.outcome})"
                self.refuse("POST", path, 400, message, b"")
                status, body = refusal_body(api, f"harness gateway: {message}",
                                            budget=self.ended.outcome.startswith("budget"))
                return status, "application/json", body
            try:
                return self._forward(call, api, path, query, headers)
            except BudgetExhausted as exc:
                return self._budget_refusal(api, path, exc.outcome, str(exc))
            except DeadlineReached as exc:
                outcome = f"budget_exhausted:{self.ledger.deadline_kind}"
                return self._budget_refusal(api, path, outcome, str(exc))
            except ProviderError as exc:
                self.record("provider_error", {"kind": exc.kind, "status": exc.status,
                                               "message": str(exc)})
                self.end(exc.outcome, str(exc))
                status, body = refusal_body(api, f"harness gateway: the provider failed: {exc}",
                                            budget=False)
                return status, "application/json", body

    def _budget_refusal(self, api: ApiName, path: str, outcome: str,
                        message: str) -> tuple[int, str, bytes]:
        kind = outcome.split(":", 1)[1]
        self.record("budget_exhausted", {"kind": kind, "message": message})
        self.end(outcome, message)
        status, body = refusal_body(api, f"harness gateway: {message}", budget=True)
        self.refuse("POST", path, status, message, b"")
        return status, "application/json", body

    def _forward(self, call: ModelCall, api: ApiName, path: str, query: str,
                 headers: dict[str, str]) -> tuple[int, str, bytes]:
        ledger = self.ledger
        ledger.check_time()
        bound = input_bound(call)
        requested = call.requested_output or self.settings.default_output_tokens
        allowed = ledger.reserve_model_call(bound, requested)
        if call.requested_output is None or allowed < call.requested_output:
            call.cap_output(allowed)
        call.ask_for_usage()
        wire = call.wire_bytes()
        messages = call.messages
        start = _common_prefix(self._previous_messages, messages)
        self._previous_messages = messages
        turn = self.calls
        self.calls += 1
        self.record("model_request", {
            "turn": turn, "provider": self.settings.provider_label,
            "settings": {"model": call.model, "stream": call.stream},
            "max_output_tokens": allowed, "input_tokens_bound": bound,
            "messages": [m if isinstance(m, dict) else {"content": m} for m in messages[start:]],
            "message_count": len(messages), "api": api, "path": path,
            "frame": json_dumps(call.frame(), sort_keys=True, compact=True),
            "messages_from": start, "sha256": hashlib.sha256(wire).hexdigest(),
            "changed": call.changed or None,
        })

        def on_event(kind: str, data: dict[str, Any]) -> None:
            self.record(kind, data)
            ledger.add_model_event(kind, data)

        started = time.monotonic()

        def attempt(timeout_s: float) -> tuple[UpstreamReply, ModelAnswer | None]:
            reply = forward_once(self.settings.upstream, api, path, query, headers, wire,
                                 timeout_s)
            if reply.status >= 400:
                return reply, None
            streamed = call.stream and "text/event-stream" in reply.content_type
            return reply, parse_answer(api, reply.body, streamed)

        reply, answer = call_with_retries(attempt, self.settings.retry,
                                          time_left=ledger.time_left, on_event=on_event)
        duration = round(time.monotonic() - started, 4)
        if answer is None:
            return self._provider_refusal(reply)
        self.record("model_response", {
            "text": answer.text, "tool_calls": [c.model_dump(mode="json")
                                               for c in answer.tool_calls],
            "usage": {**answer.usage, "input_tokens_counted": answer.input_tokens,
                      "output_tokens_counted": answer.output_tokens},
            "stop_reason": answer.stop_reason, "model": answer.model,
            "provider_content": answer.content, "duration_s": duration, "api": api,
            "raw": reply.body.decode("utf-8", errors="replace"),
        })
        ledger.add_tokens(answer.input_tokens, answer.output_tokens)
        # The CLI has not seen the answer yet: a tool call past the cap is never handed over.
        for _call in answer.tool_calls:
            ledger.begin_tool_call()
        return reply.status, reply.content_type or "application/json", reply.body

    def _provider_refusal(self, reply: UpstreamReply) -> tuple[int, str, bytes]:
        """A 4xx from the provider goes to the CLI as it came (it may recover, e.g. from a
        context too long); one the CLI cannot fix ends the session as the loop's would."""
        kind = {401: "auth", 403: "permission", 404: "not_found"}.get(reply.status,
                                                                      "bad_request")
        detail = reply.body[:300].decode("utf-8", errors="replace")
        self.record("provider_error", {"kind": kind, "status": reply.status,
                                       "message": f"HTTP {reply.status}: {detail}"})
        if kind != "bad_request":
            self.end(f"provider_error:{kind}", f"HTTP {reply.status}: {detail}")
        return reply.status, reply.content_type or "application/json", reply.body

    def harness_tool(self, name: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        if self.tools is None:
            return 404, {"output": "no harness commands in this session", "exit_code": 3}
        try:
            body = load_json_object(raw, "the command's request")
            args = body.get("args", {})
            if not isinstance(args, dict):
                raise ValueError("`args` is not an object")
        except ValueError as exc:
            self.refuse("POST", HARNESS_TOOL_PREFIX + name, 400, str(exc), raw)
            return 400, {"output": f"error: {exc}", "exit_code": 3}
        if self.ended is not None or self.commands_closed:
            why = self.ended.outcome if self.ended is not None else "the agent's run is over"
            return 409, {"output": f"the session has ended ({why})", "exit_code": 3}
        try:
            with self._tool_lock:
                output, code = self.tools(name, args)
        except Exception as exc:  # answered and recorded, never a server traceback
            if self.ended is not None or self.commands_closed:
                # The agent left the command running when its run ended (Codex hands a long
                # command back and may finish without waiting): the session stopped the
                # container under it.
                return 409, {"output": "the session has ended", "exit_code": 3}
            self.refuse("POST", HARNESS_TOOL_PREFIX + name, 500,
                        f"the harness command failed: {type(exc).__name__}: {exc}", raw)
            return 500, {"output": f"error: the harness command failed: {exc}", "exit_code": 3}
        return 200, {"output": output, "exit_code": code}

    def close_commands(self) -> None:
        """The agent's run is over: no harness command starts, and one still running (the
        agent left it behind) ends quietly when the session stops the container."""
        self.commands_closed = True


def _common_prefix(before: list[Any], now: list[Any]) -> int:
    """How many leading messages ``now`` shares with ``before``."""
    count = 0
    for old, new in zip(before, now, strict=False):
        if old != new:
            break
        count += 1
    return count


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # every request is recorded in the transcript instead

    def address_string(self) -> str:
        return "container"

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if status >= 400:
                self.send_header("x-should-retry", "false")
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _refuse(self, status: int, reason: str, body: bytes = b"") -> None:
        gateway = self.server.gateway
        gateway.refuse(self.command, self.path[:2000], status, reason, body)
        api = API_PATHS.get(urlsplit(self.path).path)
        _code, payload = refusal_body(api, f"harness gateway: {reason}", budget=False)
        self.close_connection = True
        self._send(status, "application/json", payload)

    def _read_body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding"):
            self._refuse(411, "only requests with a Content-Length are accepted")
            return None
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            self._refuse(400, "Content-Length is not a number")
            return None
        if length < 0 or length > MAX_REQUEST_BYTES:
            self._refuse(413, f"the request is {length} bytes (the limit is "
                              f"{MAX_REQUEST_BYTES})")
            return None
        return self.rfile.read(length)

    def do_POST(self) -> None:
        body = self._read_body()
        if body is None:
            return
        gateway = self.server.gateway
        parts = urlsplit(self.path)
        api = API_PATHS.get(parts.path)
        if api is not None and PROVIDER_OF[api] == gateway.settings.upstream.provider:
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, content_type, payload = gateway.model_call(api, parts.path, parts.query,
                                                               headers, body)
            self._send(status, content_type, payload)
            return
        if parts.path.startswith(HARNESS_TOOL_PREFIX) and not parts.query:
            status, result = gateway.harness_tool(parts.path[len(HARNESS_TOOL_PREFIX):], body)
            self._send(status, "application/json", json.dumps(result).encode())
            return
        self._refuse(404, f"no such route: POST {parts.path[:200]}", body)

    def _other(self) -> None:
        body = self._read_body() if self.headers.get("Content-Length") else b""
        if body is None:
            return
        self._refuse(405, f"method {self.command} is not served", body)

    do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _other
