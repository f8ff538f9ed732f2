"""Budget limits and the ledger that enforces them on the host.

Every budget is checked before the thing it limits starts, and the ledger reports each
change through a callback (the session writes it to the transcript). Time-based budgets
(wall clock, GPU-hours, CPU-hours) become one deadline: GPU-hours are allocated GPUs x wall
seconds, so with GPUs held for the whole session a GPU-hour cap is a wall-clock cap too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

BudgetKind = Literal[
    "tokens_input", "tokens_output", "tokens_total", "wall_seconds", "gpu_hours",
    "cpu_hours", "tool_calls", "candidate_runs",
]
# Where compute went; each is also reported on its own line in the session record.
ComputeCategory = Literal["inference", "agent_tools", "candidate_runs", "diagnostics", "retries"]


class Budget(BaseModel):
    """Limits of one session; ``None`` means unlimited (only allowed for what is not time)."""

    model_config = ConfigDict(extra="forbid")

    tokens_input: int | None = Field(default=None, ge=0)
    tokens_output: int | None = Field(default=None, ge=0)
    tokens_total: int | None = Field(default=None, ge=0)
    wall_seconds: float = Field(default=1800.0, gt=0)
    gpu_hours: float | None = Field(default=None, ge=0)
    cpu_hours: float | None = Field(default=None, ge=0)
    tool_calls: int | None = Field(default=None, ge=0)
    candidate_runs: int | None = Field(default=None, ge=0)


class Usage(BaseModel):
    tokens_input: int = 0
    tokens_output: int = 0
    tokens_total: int = 0
    wall_seconds: float = 0.0
    gpu_hours: float = 0.0
    cpu_hours: float = 0.0
    tool_calls: int = 0
    candidate_runs: int = 0
    diagnostic_runs: int = 0
    # Seconds per category; queue time is kept apart and never counts against a budget.
    compute_seconds: dict[str, float] = Field(default_factory=dict)
    queue_seconds: float = 0.0
    # The harness's own work inside the session (trajectory snapshots): kept apart, never
    # counted against a budget, so it cannot cost either arm its time.
    harness_seconds: float = 0.0


class BudgetExhausted(Exception):
    """A budget ran out; ``outcome`` is the session outcome string that names it."""

    def __init__(self, kind: BudgetKind, detail: str = "") -> None:
        super().__init__(f"budget exhausted: {kind}" + (f" ({detail})" if detail else ""))
        self.kind = kind

    @property
    def outcome(self) -> str:
        return f"budget_exhausted:{self.kind}"


OnChange = Callable[[str, dict[str, Any]], object]  # what it returns is ignored


def deadline(budget: Budget, *, gpus: int, cpus: float) -> tuple[float, BudgetKind]:
    """The session's time limit in seconds and the budget that sets it: the wall clock, or
    the GPU-/CPU-hours divided by the GPUs/CPUs held, whichever is shortest."""
    seconds, kind = budget.wall_seconds, "wall_seconds"
    for name, cap, units in (("gpu_hours", budget.gpu_hours, gpus),
                             ("cpu_hours", budget.cpu_hours, cpus)):
        if cap is not None and units > 0 and cap * 3600 / units < seconds:
            seconds, kind = cap * 3600 / units, name
    return seconds, kind  # type: ignore[return-value]


def worst_case_hours(budget: Budget, *, gpus: int, cpus: float) -> tuple[float, float]:
    """(CPU-hours, GPU-hours) a session with this budget can use at most."""
    seconds, _kind = deadline(budget, gpus=gpus, cpus=cpus)
    return cpus * seconds / 3600, gpus * seconds / 3600


class Ledger:
    """Counts usage against a Budget; thread-safe (a watchdog thread reads the deadline)."""

    def __init__(
        self, budget: Budget, *, gpus: int = 0, cpus: float = 1.0, on_change: OnChange | None = None
    ) -> None:
        self.budget = budget
        self.gpus = gpus
        self.cpus = cpus
        self.usage = Usage()
        self._on_change = on_change or (lambda _event, _data: None)
        self._lock = threading.Lock()
        self._started: float | None = None
        self._seconds, self.deadline_kind = deadline(budget, gpus=gpus, cpus=cpus)

    # --- time -------------------------------------------------------------------------

    def start(self) -> None:
        self._started = time.monotonic()
        self._on_change("budget_start", {"budget": self.budget.model_dump(mode="json"),
                                         "deadline_s": self._seconds,
                                         "deadline_kind": self.deadline_kind})

    def elapsed(self) -> float:
        """Session time on the budget's clock: wall time less the harness's own work."""
        if self._started is None:
            return 0.0
        return time.monotonic() - self._started - self.usage.harness_seconds

    def add_harness_time(self, seconds: float) -> None:
        with self._lock:
            self.usage.harness_seconds = round(self.usage.harness_seconds + seconds, 4)

    def time_left(self) -> float:
        return max(0.0, self._seconds - self.elapsed())

    def bounded_timeout(self, requested: float) -> float:
        """A tool call gets ``min(its own timeout, time left)``."""
        return max(0.0, min(requested, self.time_left()))

    def check_time(self) -> None:
        if self.time_left() <= 0:
            raise BudgetExhausted(self.deadline_kind, f"{self._seconds:.0f} s used")

    # --- counters ---------------------------------------------------------------------

    def begin_tool_call(self, *, candidate_run: bool = False) -> None:
        """Count one tool call (and a candidate run); refuse it when a cap is reached."""
        with self._lock:
            self.check_time()
            cap = self.budget.tool_calls
            if cap is not None and self.usage.tool_calls >= cap:
                raise BudgetExhausted("tool_calls", f"cap {cap}")
            run_cap = self.budget.candidate_runs
            if candidate_run and run_cap is not None and self.usage.candidate_runs >= run_cap:
                raise BudgetExhausted("candidate_runs", f"cap {run_cap}")
            self.usage.tool_calls += 1
            if candidate_run:
                self.usage.candidate_runs += 1
            counts = {"tool_calls": self.usage.tool_calls,
                      "candidate_runs": self.usage.candidate_runs}
        self._on_change("budget", counts)

    def begin_candidate_run(self) -> None:
        """Count one candidate run that is not a tool call of its own: a coding-agent CLI's
        command that asks the harness for one (its shell call was counted as the tool call)."""
        with self._lock:
            self.check_time()
            run_cap = self.budget.candidate_runs
            if run_cap is not None and self.usage.candidate_runs >= run_cap:
                raise BudgetExhausted("candidate_runs", f"cap {run_cap}")
            self.usage.candidate_runs += 1
            counts = {"candidate_runs": self.usage.candidate_runs}
        self._on_change("budget", counts)

    def reserve_model_call(self, input_bound: int, requested_output: int) -> int:
        """The ``max_tokens`` the next model call may use, so that its worst case fits.

        ``input_bound`` is an upper bound on the call's input tokens. Raises BudgetExhausted
        naming the budget when not even one output token would fit.
        """
        u, b = self.usage, self.budget
        if b.tokens_input is not None and u.tokens_input + input_bound > b.tokens_input:
            raise BudgetExhausted("tokens_input", f"{u.tokens_input} used, next call up to "
                                                  f"{input_bound}, cap {b.tokens_input}")
        allowed = requested_output
        limiting: BudgetKind | None = None
        if b.tokens_output is not None and b.tokens_output - u.tokens_output < allowed:
            allowed, limiting = b.tokens_output - u.tokens_output, "tokens_output"
        if b.tokens_total is not None:
            room = b.tokens_total - u.tokens_total - input_bound
            if room < allowed:
                allowed, limiting = room, "tokens_total"
        if allowed < 1:
            if limiting == "tokens_output":
                raise BudgetExhausted("tokens_output", f"{u.tokens_output} output tokens used, "
                                                       f"cap {b.tokens_output}")
            raise BudgetExhausted(limiting or "tokens_total",
                                  f"{u.tokens_total} tokens used; the next call could need "
                                  f"{input_bound} input tokens")
        return allowed

    def add_tokens(self, input_tokens: int, output_tokens: int) -> None:
        with self._lock:
            self.usage.tokens_input += input_tokens
            self.usage.tokens_output += output_tokens
            self.usage.tokens_total += input_tokens + output_tokens
            u, b = self.usage, self.budget
            data: dict[str, Any] = {"tokens_input": u.tokens_input,
                                    "tokens_output": u.tokens_output,
                                    "tokens_total": u.tokens_total}
            overruns = {kind: {"used": used, "cap": cap} for kind, used, cap in (
                ("tokens_input", u.tokens_input, b.tokens_input),
                ("tokens_output", u.tokens_output, b.tokens_output),
                ("tokens_total", u.tokens_total, b.tokens_total),
            ) if cap is not None and used > cap}
        self._on_change("budget", data)
        if overruns:  # the provider reported more than the bound allowed: say so, loudly
            self._on_change("budget_overrun", overruns)

    def add_compute(self, category: ComputeCategory, seconds: float) -> None:
        with self._lock:
            current = self.usage.compute_seconds.get(category, 0.0)
            self.usage.compute_seconds[category] = round(current + seconds, 4)
            if category == "diagnostics":
                self.usage.diagnostic_runs += 1

    def add_model_event(self, kind: str, data: dict[str, Any]) -> None:
        """Charge a model call's retry-policy event: an attempt's time is inference, a wait
        between attempts is retries (the loop's providers and the CLIs' gateway alike)."""
        if kind == "model_attempt":
            self.add_compute("inference", data["duration_s"])
        elif kind == "model_retry_wait":
            self.add_compute("retries", data["wait_s"])

    def add_queue(self, seconds: float) -> None:
        with self._lock:
            self.usage.queue_seconds += seconds

    def snapshot(self) -> Usage:
        with self._lock:
            usage = self.usage.model_copy(deep=True)
        usage.wall_seconds = round(self.elapsed(), 4)
        usage.gpu_hours = round(self.gpus * usage.wall_seconds / 3600, 8)
        usage.cpu_hours = round(self.cpus * usage.wall_seconds / 3600, 8)
        return usage
