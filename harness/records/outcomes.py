"""Which session outcomes a matrix retries: the one place that decides.

An *agent outcome* is what the agent did with its session (it submitted, stopped, ran out of a
budget, filled its workspace, produced an unusable diff, a coding-agent CLI crashed or exited
early, or the provider refused the request as malformed or unauthorised). It is the datum the
study measures: final, never retried, since a retry would give that arm a second draw.

An *infrastructure failure* says nothing about the agent (the harness failed, the Docker
daemon failed under it, its sandbox was lost, the provider stayed unreachable through every
retry, or answered garbage). It is retried as a new attempt, up to the study's
``matrix.max_attempts``.

``interrupted`` (Ctrl-C, SIGTERM, a cancelled Slurm job, a SIGKILLed harness found by
cleanup) is an operator's stop: the next ``matrix run`` resumes it, and it does not count
against the attempt limit.
"""

from __future__ import annotations

from typing import Literal, get_args

from harness.records.budget import BudgetKind

OutcomeKind = Literal["agent", "infra", "interrupted"]

# agent_exited: a coding-agent CLI that crashed or ended without finishing its run (its own
# doing, like a loop agent that stops without submitting).
AGENT_OUTCOMES = frozenset({"submitted", "agent_stopped", "workspace_full", "diff_failed",
                            "agent_exited"})
AGENT_PREFIXES = ("budget_exhausted:",)
# Provider errors the agent's own requests cause, or that no retry can fix.
AGENT_PROVIDER_ERRORS = frozenset({"auth", "permission", "not_found", "bad_request"})
INFRA_OUTCOMES = frozenset({"harness_error", "sandbox_lost"})
INFRA_PROVIDER_ERRORS = frozenset({"retries_exhausted", "malformed_response"})
INTERRUPTED = "interrupted"


def outcome_kind(outcome: str | None) -> OutcomeKind | None:
    """The kind of a session's outcome; None for one this module does not know (a new
    outcome must be classified here before a matrix will treat it as anything)."""
    if outcome is None:
        return None
    if outcome == INTERRUPTED:
        return "interrupted"
    if outcome in AGENT_OUTCOMES or outcome.startswith(AGENT_PREFIXES):
        return "agent"
    if outcome in INFRA_OUTCOMES:
        return "infra"
    kind, _, detail = outcome.partition(":")
    if kind == "provider_error":
        if detail in AGENT_PROVIDER_ERRORS:
            return "agent"
        if detail in INFRA_PROVIDER_ERRORS:
            return "infra"
    return None


def require_known(outcome: str) -> str:
    """A record holds only outcomes classified above (pydantic validator for SessionRecord)."""
    if outcome_kind(outcome) is None:
        raise ValueError(f"unclassified session outcome {outcome!r}: classify it in "
                         "harness/records/outcomes.py")
    return outcome


def known_outcomes() -> list[str]:
    """Every outcome a record may hold, for docs/records.md."""
    budgets = [f"budget_exhausted:{k}" for k in get_args(BudgetKind)]
    providers = [f"provider_error:{k}" for k in sorted(AGENT_PROVIDER_ERRORS
                                                       | INFRA_PROVIDER_ERRORS)]
    return sorted(AGENT_OUTCOMES | INFRA_OUTCOMES | {INTERRUPTED}) + budgets + providers
