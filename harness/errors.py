"""What the CLI turns into a single clear line and a non-zero exit, and how the messages
of YAML and pydantic failures become one line."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class HarnessError(Exception):
    """A problem the user can fix: what went wrong, and what to do about it.

    The CLI prints ``error: <problem> (fix: <fix>)`` and exits non-zero; nothing else in the
    harness prints tracebacks for these.
    """

    def __init__(self, problem: str, fix: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix

    def line(self) -> str:
        return f"error: {self.problem}" + (f" (fix: {self.fix})" if self.fix else "")


class Interrupted(BaseException):
    """A signal (SIGTERM, SIGHUP, Ctrl-C) stopping the harness.

    Raised, not handled in place, so that every cleanup path runs; a BaseException so that no
    ``except Exception`` swallows it. The CLI prints :meth:`line` and exits 128 + the signal.
    """

    def __init__(self, signum: int, detail: str = "") -> None:
        self.signum = signum
        self.detail = detail
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    def line(self) -> str:
        return f"{self}" + (f": {self.detail}" if self.detail else "")


@contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise :class:`Interrupted` (as Ctrl-C raises
    KeyboardInterrupt), so ``with`` blocks holding containers remove them on the way out."""

    def handler(signum: int, _frame: Any) -> None:
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
