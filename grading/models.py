"""The grader's persisted records: one ``ContractResult`` per contract, one ``GradeReport``.

``grade.json`` is read back by the harness on the host (and by auditors), so every field here
is part of an interface: add fields rather than change their meaning, and bump
``GRADE_SCHEMA_VERSION`` when a reader would have to care.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

GRADE_SCHEMA_VERSION = 4
GRADER_VERSION = "0.1.0"

# flaky: a crash or hang on one run and a pass on its rerun (grading.confirm); never a pass.
Outcome = Literal["pass", "fail", "crash", "hang", "flaky", "not_run", "diff_rejected"]
OUTCOMES: tuple[Outcome, ...] = ("pass", "fail", "crash", "hang", "flaky", "not_run",
                                 "diff_rejected")

# complete: every declared configuration ran and every contract passed. complete_on_cpu: every
# contract passed, but declared CUDA configurations could not run here, so nothing is known
# of them (CPU multi-process success is no evidence of CUDA/NCCL behaviour). incomplete: a
# contract did not pass, or a declared CPU configuration was exercised by no contract.
# diff_rejected: the diff does not apply; nothing was run.
Verdict = Literal["complete", "complete_on_cpu", "incomplete", "diff_rejected"]
VERDICTS: tuple[Verdict, ...] = ("complete", "complete_on_cpu", "incomplete", "diff_rejected")
ConfigurationOutcomeName = Literal["pass", "fail", "not_run"]

ContractKind = Literal["public_tests", "hidden_check"]
# Contract ids: the public tests, and each hidden check as "hidden:<pytest node id>".
PUBLIC_CONTRACT_ID = "public-tests"
HIDDEN_PREFIX = "hidden:"

# Reasons a contract ends not_run without a fault of the submission.
BUDGET_RAN_OUT = "the hidden checks' time budget ran out"
STOPPED_AT_FAILURE = "not run: grading stopped at the first failing contract"
NOT_SELECTED = ("not run: not among the contracts this grade was asked to run (mutation "
                "analysis grades a kill again with its killing check alone, and the reference "
                "in parts side by side)")


class ContractResult(BaseModel):
    """How one contract ended, with the evidence an auditor needs to believe it."""

    model_config = ConfigDict(extra="forbid")

    # "public-tests" or "hidden:<pytest node id relative to hidden/<task>/checks>".
    id: str
    kind: ContractKind
    statement: str
    outcome: Outcome
    # Why a contract did not run or was not judged on its own result (not_run, diff_rejected,
    # and crash/hang when the cause was another test's process dying).
    reason: str | None = None
    # Exit code, signal, duration, failure excerpt, recorded properties, run id, ...
    evidence: dict[str, Any] = Field(default_factory=dict)
    # Path of the log file relative to --out, when a command ran for this contract.
    log: str | None = None


class ConfigurationResult(BaseModel):
    """One declared configuration: how the contracts that exercise it ended."""

    model_config = ConfigDict(extra="forbid")

    outcome: ConfigurationOutcomeName
    # The contracts that exercise it (a check's recorded ``configurations``; cpu-1 when a
    # check declares none).
    contracts: list[str] = Field(default_factory=list)
    # Why it did not run (no GPUs here, no contract exercises it), or which contracts failed.
    reason: str | None = None


class DiffInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sha256: str
    size_bytes: int
    empty: bool
    applied: bool
    # git's message when the diff did not apply.
    apply_error: str | None = None
    # The hidden canary inside the diff means hidden material reached the agent: a leak to
    # investigate, whatever the grade says.
    canary_found: bool = False


class RestoreInfo(BaseModel):
    """What the grader undid before grading: changes outside what the agent may edit."""

    model_config = ConfigDict(extra="forbid")

    # Baseline files put back (changed or deleted by the diff), repo-relative posix paths.
    restored: list[str] = Field(default_factory=list)
    # Files the diff added where it may not add files; removed.
    removed: list[str] = Field(default_factory=list)


class SealInfo(BaseModel):
    """How the judge was kept apart from the judged (``grading.sealed``)."""

    model_config = ConfigDict(extra="forbid")

    judge_uid: int
    # Every process that ran candidate code ran as one of ``candidate_uids`` uids from this
    # one, each job as the next in turn (a uid of its own per job; ``grading.sealed``).
    candidate_uid: int
    candidate_uids: int = 1
    # Candidate processes still alive when the checks were done, killed before the verdict.
    candidate_processes_killed_at_end: int = 0
    # How each candidate job was ended: by freezing and killing its own cgroup (a kernel
    # container per job), or by the uid reaper alone, with the reason (grading.jobcgroup).
    job_kill: str = "uid reaper"


class GradeReport(BaseModel):
    """``grade.json``. It never carries the agent's arm: the grader is not told it."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = GRADE_SCHEMA_VERSION
    submission_id: str
    task_id: str
    verdict: Verdict
    contracts: list[ContractResult]
    # Every outcome is present (zero when unused), so readers need no default.
    counts: dict[Outcome, int]
    diff: DiffInfo
    restore: RestoreInfo
    started_at: str
    finished_at: str
    duration_s: float
    grader_version: str = GRADER_VERSION
    # SHA-256 over the grading package's source, so a frozen study can tell if it changed.
    grader_source_sha256: str
    # Content hashes of the inputs actually graded against (see grading.hashing).
    baseline_tree_sha256: str
    hidden_tree_sha256: str
    # The graded tree after the restore (None when the diff did not apply); checked unchanged
    # after the public tests and after the hidden run.
    graded_tree_sha256: str | None = None
    seal: SealInfo
    python_version: str
    torch_version: str | None
    # Declared configurations this grader could not run (e.g. CUDA on a CPU machine), with
    # the reason. Listed in the verdict, never counted as passed.
    configurations_not_run: dict[str, str] = Field(default_factory=dict)
    # Every declared configuration, in the packet's order, and how it ended.
    configurations: dict[str, ConfigurationResult] = Field(default_factory=dict)


def count_outcomes(contracts: list[ContractResult]) -> dict[Outcome, int]:
    counts: dict[Outcome, int] = dict.fromkeys(OUTCOMES, 0)
    for c in contracts:
        counts[c.outcome] += 1
    return counts


def contract_configurations(contract: ContractResult) -> list[str]:
    """The configurations a contract exercises, as its check recorded them (cpu-1 if none)."""
    props = contract.evidence.get("properties") or {}
    declared = props.get("configurations") if isinstance(props, dict) else None
    if not isinstance(declared, str) or not declared.strip():
        return ["cpu-1"]
    return [c.strip() for c in declared.split(",") if c.strip()]


def configuration_results(contracts: list[ContractResult], declared: list[str],
                          not_run: dict[str, str]) -> dict[str, ConfigurationResult]:
    """Each declared configuration's outcome: not_run when it could not run here or no
    contract exercises it, fail when any contract exercising it did not pass, else pass."""
    results: dict[str, ConfigurationResult] = {}
    for name in declared:
        ids = [c.id for c in contracts if name in contract_configurations(c)]
        failed = [c.id for c in contracts if c.id in ids and c.outcome != "pass"]
        if name in not_run:
            results[name] = ConfigurationResult(outcome="not_run", contracts=ids,
                                                reason=not_run[name])
        elif not ids:
            results[name] = ConfigurationResult(outcome="not_run",
                                                reason="no contract exercises it")
        elif failed:
            results[name] = ConfigurationResult(outcome="fail", contracts=ids,
                                                reason="not passed: " + ", ".join(failed[:8]))
        else:
            results[name] = ConfigurationResult(outcome="pass", contracts=ids)
    return results


def verdict_for(contracts: list[ContractResult], *, diff_applied: bool,
                configurations: dict[str, ConfigurationResult] | None = None,
                cuda: frozenset[str] = frozenset()) -> Verdict:
    """The honest verdict: ``complete`` only when everything declared was shown.

    A contract that exercises only CUDA configurations this grader could not run (it records
    them, then skips) is not a failure here: it is part of what is not determined for CUDA, so
    the grade can still be ``complete_on_cpu``, never ``complete``.
    """
    if not diff_applied:
        return "diff_rejected"
    configurations = configurations or {}
    unrunnable = {n for n in cuda if n in configurations
                  and configurations[n].outcome == "not_run"}

    def for_cuda_only(c: ContractResult) -> bool:
        named = set(contract_configurations(c))
        return c.outcome == "not_run" and bool(named) and named <= unrunnable

    judged = [c for c in contracts if not for_cuda_only(c)]
    # No contracts at all proves nothing, so it cannot be complete.
    if not judged or any(c.outcome != "pass" for c in judged):
        return "incomplete"
    unshown = [n for n, r in configurations.items() if r.outcome != "pass"]
    if not unshown:
        return "complete"
    if all(n in cuda for n in unshown):
        return "complete_on_cpu"
    return "incomplete"
