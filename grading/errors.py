"""The grader's one error type, shared by the in-container program and the host that reads it."""

from __future__ import annotations


class GraderError(Exception):
    """Bad input the grader cannot produce a grade for; the CLI prints it as one line."""
