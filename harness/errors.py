"""The one error type the CLI turns into a single clear line and a non-zero exit."""

from __future__ import annotations


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
