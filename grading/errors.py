"""The grader's error types, shared by the in-container program and the host that reads it."""

from __future__ import annotations


class GraderError(Exception):
    """Bad input the grader cannot produce a grade for; the CLI prints it as one line."""


class JudgeLimitation(Exception):
    """The judge's own machinery cannot evaluate something it accepted.

    An example is an operation the judge runs but cannot differentiate. This is a defect of
    the grader, never the submission's outcome. The judge plugin turns the grade into a
    `grader_error` that names the limitation. A study counts that grade as not complete until
    the judge is fixed and the submission graded again. Checks raise it only where the gap is
    the judge's. What the contract refuses still fails by assertion, so a submission cannot
    trade a `fail` for a verdict by raising this.
    """
