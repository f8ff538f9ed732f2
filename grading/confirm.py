"""No verdict rests on one run a host fault can flip: a contract that crashed or hung is run
again, and the two runs settle its outcome.

A crash or a hang can be the host's doing, not the submission's: a gloo rank aborting in its
shutdown under load, a time limit reached while other graders hold the cores. So a contract
that ends ``crash`` or ``hang`` (or ``fail`` with a crash or a hang in its log: the public tests
report a two-rank run that aborted, or one that never exited and met the test's own timeout, as
a failing test) runs once more, and

- the same failure again counts as it is, with both runs' evidence;
- a pass on the rerun makes the contract ``flaky``: never a pass (the verdict stays not
  complete), and a finding of its own, with both runs' evidence;
- a rerun that could not run (the hidden checks' time budget ran out) leaves the first outcome,
  saying it was not confirmed.

Mutation analysis confirms its kills its own way (``grading.mutants``) and turns this off.
"""

from __future__ import annotations

import re
from typing import Any

from grading.models import ContractResult

UNSTEADY_OUTCOMES = frozenset({"crash", "hang"})

# What a process killed by a signal leaves in a log a test runner captured: torch.distributed's
# elastic agent ("exitcode  : -6", "Signal 6 (SIGABRT)"), libstdc++ ("terminate called"),
# CPython ("Fatal Python error"), a shell ("Segmentation fault", "core dumped") and
# subprocess ("died with <Signals.SIGSEGV").
_CRASH_MARKS = (
    r"terminate called|Fatal Python error|Segmentation fault|core dumped|"
    r"exitcode\s*:\s*-\d+|Signal \d+ \(SIG[A-Z]+\)|died with <Signals\.SIG[A-Z]+|"
    r"Signals\.SIG(?:ABRT|SEGV|BUS|ILL|FPE|KILL)"
)
# What a process that did not end in its time leaves: subprocess's TimeoutExpired (a packet
# test's two-rank torchrun that printed its result and then never exited, seen once under load)
# and pytest-timeout's banner.
_HANG_MARKS = r"TimeoutExpired|timed out after [\d.]+ seconds|\+{5,} Timeout \+{5,}"
# A candidate that prints one of these only buys a rerun, and a rerun can only keep a failure
# or make it flaky: never a pass.
_UNSTEADY_MARKS = re.compile(f"{_CRASH_MARKS}|{_HANG_MARKS}")


def crash_or_hang_in_log(text: str) -> bool:
    """Whether a failing run's log shows a process killed by a signal or one that overran."""
    return _UNSTEADY_MARKS.search(text) is not None


def wants_rerun(contract: ContractResult, log_text: str = "") -> bool:
    """A crash or hang; or a failure whose log shows a crash or a hang."""
    if contract.outcome in UNSTEADY_OUTCOMES:
        return True
    return contract.outcome == "fail" and crash_or_hang_in_log(log_text)


def _run_record(contract: ContractResult) -> dict[str, Any]:
    return {"outcome": contract.outcome, "reason": contract.reason,
            "evidence": contract.evidence, "log": contract.log}


def settle(first: ContractResult, rerun: ContractResult | None) -> ContractResult:
    """The contract's outcome from its first run and its rerun (None: the rerun never ran)."""
    evidence = dict(first.evidence)
    if rerun is None or rerun.outcome == "not_run":
        why = rerun.reason if rerun is not None else "no rerun"
        evidence["rerun"] = {"outcome": "not_run", "reason": why}
        reason = f"{first.reason or first.outcome}; not confirmed by a rerun ({why})"
        return first.model_copy(update={"evidence": evidence, "reason": reason})
    evidence["rerun"] = _run_record(rerun)
    first_run = f"{first.outcome} ({first.reason})" if first.reason else first.outcome
    if rerun.outcome == "pass":
        return first.model_copy(update={
            "outcome": "flaky", "evidence": evidence,
            "reason": f"{first_run} on the first run, pass on the rerun: not a pass",
        })
    return first.model_copy(update={
        "evidence": evidence,
        "reason": f"{first_run}; the rerun ended {rerun.outcome} too",
    })
