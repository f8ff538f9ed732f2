"""``python -m grading.mutants``: grade many mutants of a task's reference in one container.

Oracle mutation analysis (``harness oracle-strength``) asks one question per mutant: does any
contract fail? Grading each in a fresh container, with every contract run, would cost minutes
per mutant. Here one grader container grades them all in turn, and each grade:

- is the real one (``grading.grade.grade``: diff applied as an agent's would be, locked paths
  restored, public tests and hidden checks run as the candidate uid, per-check isolation from
  the rerun-after-crash loop), with a fresh work folder per mutant, so nothing carries over;
- stops at the first failing contract (``GradeOptions.stop_at_first_failure``): a killed
  mutant costs its cheapest killing check, a survivor one full grade;
- gives each hidden test a wall limit from the reference's own timings (3x its slowest check,
  at least 60 s), so a mutant that deadlocks a process group costs one limit, not the default;
- runs only the contracts that executed the mutated statement while the reference was graded
  (line coverage per check from ``grading.trace``), cheapest first by the reference's timings:
  a check that never runs a statement cannot see a change to it, since everything else it runs
  is the reference's own code, whose result the reference's grade already gave. Checks that
  ran no line of the graded code at all are always run. A mutant no check covers is flagged
  ``covered: false``;
- is checked in a setup the reference passed before it counts (``_confirm``): a kill after
  other checks in the same process is graded again with the killing check alone, and every
  survivor is graded again with the contracts coverage left out, so every contract runs on it.

The unmutated reference is graded first, in full, one hidden check per pytest process so each
check's coverage is its own (shared session fixtures and caches would otherwise file a run
under whichever check filled them first): an oracle that fails the reference would "kill"
every mutant, so the run stops there with the reason.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from grading import sealed, trace
from grading.grade import grade
from grading.hashing import grader_source_sha256, tree_sha256
from grading.hidden import BUDGET_RAN_OUT, NOT_SELECTED
from grading.layout import HIDDEN_PREFIX, PUBLIC_CONTRACT_ID, GradeOptions, GraderError
from grading.models import ContractResult, Verdict, contract_configurations
from grading.packet import PacketSpec, load_packet_spec

MUTANTS_SCHEMA_VERSION = 1
RESULTS_NAME = "mutants.json"
# Written as the run goes, so a run stopped halfway still has what it graded: the reference's
# header (a MutantsReport without mutants) once it is graded, then one MutantResult per line.
REFERENCE_NAME = "reference.json"
PROGRESS_NAME = "mutants.jsonl"
EXCERPT_LIMIT = 600

MutantStatus = Literal["killed", "timed_out", "crashed_at_import", "survived", "not_applied"]
# What counts as detected in the score: every status but ``survived`` (``not_applied`` never
# reaches a score: the generator only writes diffs that apply).
DETECTED: frozenset[str] = frozenset({"killed", "timed_out", "crashed_at_import"})

# pytest's words for a test module that could not be imported.
_IMPORT_FAILURE = re.compile(
    r"ImportError while importing|ERROR collecting|errors during collection")


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
    # Hidden checks among them (all in one pytest process, the killer last).
    hidden_run: int = 0
    # Contracts left out because they never ran the mutated statement (see the module doc).
    contracts_not_covering: int = 0
    # How the result was checked (_confirm): "first" (the killer ran first in its process, as
    # in the reference's per-check grade), "alone" (the killer graded again alone),
    # "every_contract" (a survivor: the contracts coverage left out graded too, so every
    # contract ran on it and passed), "full_grade" (runs before 2026-12-01: a survivor graded
    # again with every contract in one grade); None: not checked.
    confirmed: Literal["first", "alone", "every_contract", "full_grade"] | None = None
    duration_s: float = 0.0
    # False: no line of the mutated statement ran in any process of the reference's grade
    # (graded with every contract all the same, in case coverage missed something).
    covered: bool = True


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
    mutants: list[MutantResult] = Field(default_factory=list)
    duration_s: float = 0.0


def classify(mutant_id: str, contracts: list[ContractResult], applied: bool) -> MutantResult:
    """The mutant's status from its (first-failure) grade."""
    ran = [c for c in contracts if c.outcome not in ("not_run", "diff_rejected")]
    hidden_run = sum(c.kind == "hidden_check" for c in ran)
    left_out = sum(c.reason == NOT_SELECTED for c in contracts)
    if not applied:
        return MutantResult(id=mutant_id, status="not_applied",
                            reason="the mutant's diff does not apply to the baseline")
    killer = next((c for c in ran if c.outcome != "pass"), None)
    if killer is None:
        # A survivor whose checks did not all run is a weaker claim: say so (it still counts as
        # survived, which can only lower the score).
        unfinished = [c for c in contracts if c.outcome == "not_run"
                      and (c.reason or "").startswith(BUDGET_RAN_OUT)]
        return MutantResult(id=mutant_id, status="survived", contracts_run=len(ran),
                            hidden_run=hidden_run,
                            contracts_not_covering=left_out,
                            reason=f"{len(unfinished)} check(s) not run: the time budget for "
                            "one mutant's checks ran out" if unfinished else None)
    text = "\n".join(str(killer.evidence.get(k, "")) for k in ("excerpt", "message", "details"))
    status: MutantStatus = "killed"
    if killer.outcome == "hang":
        status = "timed_out"
    elif killer.id == PUBLIC_CONTRACT_ID and _IMPORT_FAILURE.search(text):
        status = "crashed_at_import"
    excerpt = text.strip()
    return MutantResult(
        id=mutant_id, status=status, killed_by=killer.id, outcome=killer.outcome,
        configurations=contract_configurations(killer), reason=killer.reason,
        excerpt=excerpt[-EXCERPT_LIMIT:] if excerpt else None,
        contracts_run=len(ran), hidden_run=hidden_run, contracts_not_covering=left_out)


@dataclass(frozen=True)
class Selection:
    """The contracts one mutant's grade runs: the public tests or not, and hidden node ids."""

    public: bool
    hidden: tuple[str, ...]


@dataclass
class CoverageMap:
    """What each contract of the reference's grade ran, and what it cost.

    ``by_check`` is keyed as the tracer files it (a hidden node id, or ``trace.PUBLIC_KEY``);
    ``durations`` by hidden node id.
    """

    by_check: trace.CoverageByCheck
    durations: dict[str, float]

    def covers(self, check: str, path: str, lines: set[int]) -> bool:
        ran = self.by_check.get(check, {})
        # A check that ran no graded code at all (it only reads files, say) cannot be judged
        # by its coverage: it always runs.
        return not any(ran.values()) or bool(trace.lines_of(ran, path) & lines)

    def select(self, spec: MutantSpec) -> Selection:
        lines = set(range(spec.first_line, spec.last_line + 1))
        hidden = sorted((c for c in self.durations if self.covers(c, spec.path, lines)),
                        key=lambda c: self.durations[c])
        return Selection(public=self.covers(trace.PUBLIC_KEY, spec.path, lines),
                         hidden=tuple(hidden))


def _options(args: argparse.Namespace, packet_spec: PacketSpec, diff: Path, out: Path,
             work: Path, *, test_timeout_s: float, selection: Selection | None) -> GradeOptions:
    """The reference's grade (``selection`` None: every contract, one process per hidden
    check) or a mutant's (the selected contracts, stopped at the first failure)."""
    reference = selection is None
    return GradeOptions(
        baseline=args.baseline.resolve(), packet=packet_spec,
        diff=diff.resolve(), hidden=args.hidden.resolve(), out=out, submission_id=diff.stem,
        work=work, hidden_timeout_s=args.mutant_timeout_s, hidden_test_timeout_s=test_timeout_s,
        expect_hidden_sha256=args.expect_hidden_sha256, stop_at_first_failure=not reference,
        hidden_tests=None if selection is None else selection.hidden,
        public_tests=True if selection is None else selection.public,
        trace_each_hidden_test=reference)


def _grade_mutant(args: argparse.Namespace, packet: PacketSpec, scratch: Path,
                  test_timeout: float, mutant_id: str, spent: list[float],
                  selection: Selection) -> MutantResult:
    """One grade of the mutant with these contracts, its time added to ``spent``."""
    m0 = time.monotonic()
    graded = grade(_options(args, packet, args.mutants / f"{mutant_id}.diff",
                            _fresh(scratch / "out"), _fresh(scratch / "work"),
                            selection=selection, test_timeout_s=test_timeout))
    spent.append(time.monotonic() - m0)
    return classify(mutant_id, graded.contracts, graded.diff.applied)


def _confirm(result: MutantResult, ran: Selection, every: Selection,
             regrade: Callable[[Selection], MutantResult]) -> MutantResult:
    """Check a result in a setup the reference was graded in, before it is counted.

    A kill by a hidden check that ran after other checks in the same pytest process is graded
    again with that check alone (the reference passed each check alone): state another check
    left behind must not count as a kill; if it passes alone the mutant is recorded as
    survived, which can only lower the score. A survivor that skipped contracts by coverage is
    graded again with every contract its first grade left out, in file order: coverage can miss
    code run without Python line events or in processes that drop the tracer's environment, and
    a survivor is what a person reads. The contracts its first grade ran all passed already; a
    second run of them would show nothing new and costs most of a full grade.
    """
    if result.status == "survived":
        rest = Selection(public=every.public and not ran.public,
                         hidden=tuple(c for c in every.hidden if c not in ran.hidden))
        if rest.public or rest.hidden:
            second = regrade(rest)
            if second.status == "survived":
                return result.model_copy(update={
                    "confirmed": "every_contract",
                    "contracts_run": result.contracts_run + second.contracts_run,
                    "hidden_run": result.hidden_run + second.hidden_run})
            result = second.model_copy(update={
                "covered": result.covered,
                "reason": "killed by a check that coverage said never runs the statement "
                          f"({second.killed_by})"})
        else:
            return result.model_copy(update={"confirmed": "every_contract"})
    if result.status not in DETECTED:
        return result
    if result.killed_by == PUBLIC_CONTRACT_ID or result.hidden_run <= 1:
        return result.model_copy(update={"confirmed": "first"})
    killer = (result.killed_by or "")[len(HIDDEN_PREFIX):]
    if regrade(Selection(public=False, hidden=(killer,))).status in DETECTED:
        return result.model_copy(update={"confirmed": "alone"})
    return result.model_copy(update={
        "status": "survived", "confirmed": "alone",
        "reason": f"{result.killed_by} failed only after other checks in the same process; "
                  "alone it passes, so the kill is not counted"})


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def run(args: argparse.Namespace) -> MutantsReport:
    t0 = time.monotonic()
    packet = load_packet_spec(args.packet)
    scratch = args.work.resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    hidden_sha = tree_sha256(args.hidden)

    # The unmutated reference, every contract, traced: the baseline of the whole analysis.
    trace_dir = _fresh(scratch / "trace")
    # The candidate uid creates its trace files here but cannot list or read the others'.
    trace_dir.chmod(0o1733)
    os.environ[trace.TRACE_DIR_VAR] = str(trace_dir)
    os.environ[trace.TRACE_ROOT_VAR] = str(scratch)
    try:
        ref = grade(_options(args, packet, args.reference_diff, _fresh(scratch / "ref-out"),
                             _fresh(scratch / "ref-work"), selection=None,
                             test_timeout_s=args.reference_test_timeout_s))
    finally:
        os.environ.pop(trace.TRACE_DIR_VAR, None)
        os.environ.pop(trace.TRACE_ROOT_VAR, None)
    durations = {c.id: float(c.evidence.get("duration_s") or 0.0) for c in ref.contracts}
    coverage = CoverageMap(trace.read_lines_by_check(str(trace_dir)), {
        c[len(HIDDEN_PREFIX):]: s for c, s in durations.items() if c.startswith(HIDDEN_PREFIX)})
    test_timeout = args.test_timeout_s or max(60.0, 3 * max(durations.values(), default=0.0))
    report = MutantsReport(
        task_id=packet.id, reference_verdict=ref.verdict,
        reference_failing=[c.id for c in ref.contracts if c.outcome not in ("pass", "not_run")],
        reference_duration_s=ref.duration_s, hidden_test_timeout_s=round(test_timeout, 1),
        grader_source_sha256=grader_source_sha256(), hidden_tree_sha256=hidden_sha,
        coverage_recorded=bool(coverage.by_check), reference_durations_s=durations)
    (args.out / REFERENCE_NAME).write_text(report.model_dump_json(indent=1) + "\n")
    print(f"reference: {ref.verdict} in {ref.duration_s:.0f} s, one process per hidden check; "
          f"per-test limit for mutants {test_timeout:.0f} s", flush=True)
    if ref.verdict not in ("complete", "complete_on_cpu"):
        return report

    specs = [MutantSpec.model_validate(e)
             for e in json.loads((args.mutants / "index.json").read_text())]
    progress = args.out / PROGRESS_NAME
    every = Selection(public=True, hidden=tuple(coverage.durations))
    for n, spec in enumerate(specs, 1):
        mutant_id = spec.id
        spent: list[float] = []
        regrade = functools.partial(_grade_mutant, args, packet, scratch, test_timeout,
                                    mutant_id, spent)
        # Without coverage (a tracer that wrote nothing), every contract runs.
        selection = coverage.select(spec) if coverage.by_check else every
        if not selection.public and not selection.hidden:
            result = MutantResult(id=mutant_id, status="survived", covered=False,
                                  reason="no line of the mutated statement ran in any check")
        else:
            result = regrade(selection)
        result = _confirm(result, selection, every, regrade)
        result.duration_s = round(sum(spent), 2)
        report.mutants.append(result)
        with progress.open("a") as fh:
            fh.write(result.model_dump_json() + "\n")
        print(f"mutant {n}/{len(specs)} {mutant_id}: {result.status}"
              + (f" by {result.killed_by}" if result.killed_by else ""), flush=True)
    report.duration_s = round(time.monotonic() - t0, 2)
    shutil.rmtree(scratch, ignore_errors=True)
    return report


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
    # The run's own wall time was never written: the reference's and the mutants' grades.
    report.duration_s = round(report.reference_duration_s
                              + sum(m.duration_s for m in report.mutants), 2)
    return report


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m grading.mutants",
                                description="Grade a task's reference mutants.")
    p.add_argument("--baseline", type=Path, required=True)
    p.add_argument("--packet", type=Path, required=True)
    p.add_argument("--hidden", type=Path, required=True)
    p.add_argument("--reference-diff", type=Path, required=True)
    p.add_argument("--mutants", type=Path, required=True,
                   help="folder with index.json (MutantSpec entries, in grading order) and "
                   "<id>.diff")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--expect-hidden-sha256", default=None)
    # Each hidden test has its own limit (--test-timeout-s); this one only bounds a mutant
    # whose many checks each stay just under it.
    p.add_argument("--mutant-timeout-s", type=float, default=5400.0,
                   help="wall time for one mutant's hidden checks together")
    p.add_argument("--reference-test-timeout-s", type=float, default=300.0)
    p.add_argument("--test-timeout-s", type=float, default=0.0,
                   help="per hidden test limit for mutants (0: 3x the reference's slowest)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        sealed.candidate()
        args.out.mkdir(parents=True, exist_ok=True)
        report = run(args)
    except (GraderError, sealed.SealError, ValueError, OSError) as exc:
        print(f"grading.mutants: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    (args.out / RESULTS_NAME).write_text(report.model_dump_json(indent=1) + "\n")
    print(f"grading.mutants: {len(report.mutants)} mutants graded in {report.duration_s:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

