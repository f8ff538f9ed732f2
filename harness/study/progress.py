"""A running session, as one line: read from its transcript's events as they are written.

The line says where the session is (turn, tool calls, candidate runs, tokens and wall time
against the budget, the tool running now, and what it is waiting for); the command line shows
it live on a terminal and as a plain line once a minute otherwise.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from harness.records.transcript import Event


def _of(used: float | int | None, cap: Any) -> str:
    shown = "-" if used is None else f"{used:g}" if isinstance(used, float) else str(used)
    return f"{shown}/{cap}" if isinstance(cap, int | float) and cap else shown


class SessionProgress:
    """The state of one session, updated by its transcript's events (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.session = ""
        self.started = time.monotonic()
        self.budget: dict[str, Any] = {}
        self.turn = 0
        self.counts: dict[str, int] = {}
        self.running: str | None = None
        self.running_since = 0.0
        self.phase = "starting"
        self.ended = False

    def observe(self, event: Event) -> None:
        data = event.data
        with self._lock:
            if event.kind == "session_start":
                self.session = str(data.get("session", ""))
            elif event.kind == "budget_start":
                self.budget = dict(data.get("budget") or {})
            elif event.kind == "sandbox_start":
                self.phase = "agent"
            elif event.kind == "model_request":
                self.turn = int(data.get("turn") or self.turn + 1)
                self.running, self.running_since = "the model", time.monotonic()
            elif event.kind == "model_response":
                self.running = None
            elif event.kind == "budget":
                for key, value in data.items():
                    if isinstance(value, int):
                        self.counts[key] = value
            elif event.kind == "tool_call":
                self.running, self.running_since = str(data.get("name")), time.monotonic()
            elif event.kind == "tool_result":
                self.running = None
            elif event.kind == "agent_end":
                self.phase, self.running = "copying the final tree out", None
            elif event.kind == "session_end":
                self.phase, self.ended = "ended", True

    def waiting(self, what: str) -> None:
        """Say what the session waits for (GPU slots, a grader)."""
        with self._lock:
            self.phase = what

    def line(self) -> str:
        with self._lock:
            wall = time.monotonic() - self.started
            b, c = self.budget, self.counts
            parts = [self.session or "session", self.phase]
            if self.phase == "agent":
                parts.append(f"turn {self.turn}")
                parts += [f"{name} {_of(c.get(key, 0), b.get(key))}" for name, key in (
                    ("tool calls", "tool_calls"), ("candidate runs", "candidate_runs"),
                    ("tokens", "tokens_total"))]
            parts.append(f"wall {_of(round(wall), b.get('wall_seconds'))} s")
            if self.running:
                parts.append(f"running {self.running} "
                             f"({time.monotonic() - self.running_since:.0f} s)")
            return " | ".join(parts)
