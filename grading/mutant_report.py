"""The mutation-analysis records the host reads: each mutant's result, the run's report.

``grading.mutants`` (the in-container program) writes them; ``harness oracle-strength`` reads
them back, merges the reference's parts and rescores a stopped run, so they live here, apart
from the program's machinery, in a module the host may import.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, Field

from grading.errors import GraderError
from grading.models import (
    NOT_SELECTED,
    ContractResult,
    Verdict,
    configuration_results,
    verdict_for,
)
from grading.packet import CUDA_CONFIGURATIONS, PacketSpec

MUTANTS_SCHEMA_VERSION = 1
RESULTS_NAME = "mutants.json"
# Written as the run goes, so a run stopped halfway still has what it graded: the reference's
# header (a MutantsReport without mutants) once it is graded, then one MutantResult per line.
REFERENCE_NAME = "reference.json"
PROGRESS_NAME = "mutants.jsonl"

MutantStatus = Literal["killed", "timed_out", "crashed_at_import", "survived", "not_applied"]
# What counts as detected in the score: every status but ``survived`` (``not_applied`` never
# reaches a score: the generator only writes diffs that apply).
DETECTED: frozenset[str] = frozenset({"killed", "timed_out", "crashed_at_import"})
# A killer's outcomes that the host alone can cause: such a kill counts only once the killer
# fails again, graded alone (_confirm).
UNSTEADY_OUTCOMES: frozenset[str] = frozenset({"crash", "hang"})
# An oracle that fails the reference would "kill" every mutant: nothing is graded then.
PASSING_REFERENCE: frozenset[str] = frozenset({"complete", "complete_on_cpu"})


class MutantResult(BaseModel):
    """How one mutant fared: which contract killed it, on which configurations, and why."""

    id: str
    status: MutantStatus
    killed_by: str | None = None
    outcome: str | None = None
    configurations: list[str] = Field(default_factory=list)
    reason: str | None = None
    excerpt: str | None = None
    contracts_run: int = 0
    # Hidden checks among them (all in one pytest process; a hidden killer is the last).
    hidden_run: int = 0
    # Contracts that never ran the mutated statement in the reference's grade (they run after
    # the others; see the module doc).
    contracts_not_covering: int = 0
    # How the result was checked (_confirm): "first" (the killer ran first in its process, as
    # in the reference's per-check grade, and failed, not crashed or hung), "alone" (the
    # killer graded again alone and failed again: it had run after other checks, crashed or
    # hung, or was the public tests; runs before 2026-12-02's last took a crash or hang on a
    # first check, and the public tests run first, as "first"),
    # "every_contract" (a survivor: every contract ran on it and passed; runs of 2026-12-01
    # graded the contracts coverage left out in a second grade), "full_grade" (runs before
    # 2026-12-01: a survivor graded again with every contract in one grade); None: not checked.
    confirmed: Literal["first", "alone", "every_contract", "full_grade"] | None = None
    # Seconds, and below the processes, over every grade the result took (its confirmations
    # too; before 2026-12-02 a confirmation's processes and judge were not counted).
    duration_s: float = 0.0
    # False: no line of the mutated statement ran in any process of the reference's grade
    # (graded with every contract all the same, in case coverage missed something).
    covered: bool = True
    # Candidate Python processes started warm (grading.warm_start) and fresh.
    processes_warm: int = 0
    processes_fresh: int = 0
    # Judge processes (the hidden checks' pytest) forked from the worker's warm judge daemon
    # (grading.warm_judge) rather than started fresh.
    judges_warm: int = 0


class MutantSpec(BaseModel):
    """One entry of the mutants folder's ``index.json``: the mutant and its statement's lines."""

    id: str
    path: str
    first_line: int
    last_line: int


class MutantsReport(BaseModel):
    """``mutants.json``: the reference's grade and every mutant's result, in grading order."""

    schema_version: int = MUTANTS_SCHEMA_VERSION
    task_id: str
    reference_verdict: Verdict
    reference_failing: list[str] = Field(default_factory=list)
    reference_duration_s: float
    hidden_test_timeout_s: float
    grader_source_sha256: str
    hidden_tree_sha256: str
    # Whether line coverage of the reference was recorded, per contract (if not, every mutant
    # runs every contract).
    coverage_recorded: bool = False
    # Contract id -> the reference's wall time for it (one process per hidden check).
    reference_durations_s: dict[str, float] = Field(default_factory=dict)
    # The reference's coverage (check -> file -> lines that ran) and the hidden node ids pytest
    # collected: what a later process needs to grade mutants without grading the reference.
    coverage: dict[str, dict[str, list[int]]] = Field(default_factory=dict)
    collected: list[str] = Field(default_factory=list)
    mutants: list[MutantResult] = Field(default_factory=list)
    # The run's wall time, the reference's grade included unless it was reused.
    duration_s: float = 0.0
    # Set by the host: the reference's header came from an earlier run of the same inputs,
    # how many grader containers graded the mutants side by side, and whether the mutants'
    # candidate processes were forked from a warm interpreter (grading.warm_start).
    reference_reused: bool = False
    workers: int = 1
    warm_start: bool = False
    # How many grader containers graded the reference side by side (``--reference-part``),
    # and what merging their parts needs (merge_reference_parts): each contract as graded (in
    # a part, those of the other parts are not_run, NOT_SELECTED) and the declared
    # configurations the grader could not run.
    reference_parts: int = 1
    # Which of them this header is (0-based), before the parts are merged.
    reference_part: int = 0
    reference_contracts: list[ContractResult] = Field(default_factory=list)
    configurations_not_run: dict[str, str] = Field(default_factory=dict)

    def results_json(self) -> str:
        """``mutants.json``: the header without what only a grading process needs."""
        return self.model_dump_json(
            indent=1, exclude={"coverage", "collected", "reference_contracts"}) + "\n"


def reference_header(task_id: str, verdict: Verdict, contracts: list[ContractResult], *,
                      duration_s: float, test_timeout_s: float, not_run: dict[str, str],
                      coverage: Mapping[str, Mapping[str, Iterable[int]]], collected: list[str],
                      part: tuple[int, int], grader_sha256: str,
                      hidden_sha256: str) -> MutantsReport:
    """The header of the reference's grade, or of its ``part`` (k, n)."""
    durations = {c.id: float(c.evidence.get("duration_s") or 0.0) for c in contracts}
    test_timeout = test_timeout_s or max(60.0, 3 * max(durations.values(), default=0.0))
    return MutantsReport(
        task_id=task_id, reference_verdict=verdict,
        reference_failing=[c.id for c in contracts if c.outcome not in ("pass", "not_run")],
        reference_duration_s=duration_s, hidden_test_timeout_s=round(test_timeout, 1),
        grader_source_sha256=grader_sha256, hidden_tree_sha256=hidden_sha256,
        coverage_recorded=bool(coverage), reference_durations_s=durations,
        coverage={check: {path: sorted(lines) for path, lines in files.items()}
                  for check, files in coverage.items()},
        collected=collected, reference_part=part[0], reference_parts=part[1],
        reference_contracts=contracts, configurations_not_run=not_run)


def merge_reference_parts(parts: list[MutantsReport], packet: PacketSpec) -> MutantsReport:
    """One header from the reference graded in parts side by side (``--reference-part k/n``
    for k < n, one grader container each): every contract as the part that ran it graded it,
    the verdict over them all, coverage joined; the wall time is the slowest part's.

    A contract no part ran stays ``not_run``, so the merged reference cannot pass; one that
    two parts ran, or parts that are not exactly 0..n-1 of one split by one grading code on
    one hidden tree (with the same configurations it could not run), are refused.
    """
    if not parts:
        raise GraderError("no part of the reference's grade to merge")
    first = parts[0]
    same = (first.task_id, first.grader_source_sha256, first.hidden_tree_sha256,
            first.collected, len(parts), first.configurations_not_run)
    if sorted(p.reference_part for p in parts) != list(range(len(parts))) or any(
            (p.task_id, p.grader_source_sha256, p.hidden_tree_sha256, p.collected,
             p.reference_parts, p.configurations_not_run) != same for p in parts):
        raise GraderError("the reference's parts were not graded by one grading code, on one "
                          "hidden tree, as one split; grade the reference again")
    merged: dict[str, ContractResult] = {}
    for part in parts:
        for contract in part.reference_contracts:
            if contract.reason == NOT_SELECTED and contract.outcome == "not_run":
                merged.setdefault(contract.id, contract)
            elif contract.id in merged and merged[contract.id].reason != NOT_SELECTED:
                raise GraderError(f"{contract.id} was graded by two parts of the reference; "
                                  "grade the reference again")
            else:
                merged[contract.id] = contract
    contracts = list(merged.values())
    not_run = first.configurations_not_run
    verdict: Verdict = "diff_rejected" if any(
        p.reference_verdict == "diff_rejected" for p in parts) else verdict_for(
        contracts, diff_applied=True, cuda=CUDA_CONFIGURATIONS,
        configurations=configuration_results(contracts, list(packet.configurations), not_run))
    coverage: dict[str, dict[str, set[int]]] = {}
    for part in parts:
        for check, files in part.coverage.items():
            for path, lines in files.items():
                coverage.setdefault(check, {}).setdefault(path, set()).update(lines)
    return reference_header(
        first.task_id, verdict, contracts,
        duration_s=max(p.reference_duration_s for p in parts),
        test_timeout_s=max(p.hidden_test_timeout_s for p in parts), not_run=not_run,
        coverage=coverage, collected=first.collected, part=(0, len(parts)),
        grader_sha256=first.grader_source_sha256, hidden_sha256=first.hidden_tree_sha256)


def read_partial(reference: bytes, progress: str) -> MutantsReport:
    """A stopped run's results: the reference's header and every complete progress line
    (the last one may have been cut mid-write; a repeated id keeps its first result)."""
    report = MutantsReport.model_validate_json(reference)
    seen: set[str] = set()
    for line in progress.splitlines():
        try:
            result = MutantResult.model_validate_json(line)
        except ValueError:
            continue
        if result.id not in seen:
            seen.add(result.id)
            report.mutants.append(result)
    # The run's own wall time was never written: an estimate from the reference's grade (unless
    # reused) and the mutants' grades, shared among the grader containers.
    report.duration_s = round(
        (0.0 if report.reference_reused else report.reference_duration_s)
        + sum(m.duration_s for m in report.mutants) / max(1, report.workers), 2)
    return report
