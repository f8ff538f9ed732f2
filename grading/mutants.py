"""``python -m grading.mutants``: grade a task's reference, then mutants of it, in one container.

Oracle mutation analysis (``harness oracle-strength``) asks one question per mutant: does any
contract fail? Grading each in a fresh container would cost minutes per mutant. Here one
grader container grades many in turn (the host may run several such containers side by side,
each process given mutants with ``--only``), and each grade:

- is the real one (``grading.grade.grade``: diff applied as an agent's would be, locked paths
  restored, public tests and hidden checks run as the candidate uid, per-check isolation from
  the rerun-after-crash loop), with a fresh work folder per mutant, so nothing carries over;
- stops at the first failing contract (``GradeOptions.stop_at_first_failure``): a killed
  mutant costs its cheapest killing check, a survivor one full grade;
- gives each hidden test a wall limit from the reference's own timings (3x its slowest check,
  at least 60 s), so a mutant that deadlocks a process group costs one limit, not the default;
- runs every contract, those that executed the mutated statement while the reference was
  graded first (line coverage per check from ``grading.trace``), cheapest first by the
  reference's timings; the public tests go first only when they executed it and cost no
  more than the cheapest check that did, else last. A check that never runs a statement
  cannot see a change to it, so a kill almost always comes from the first group; the others
  still run, after them and in the same grade, so every survivor has passed every contract.
  A mutant no check covers is flagged ``covered: false``;
- is checked in a setup the reference passed before it counts (``_confirm``): a kill after
  other checks in the same pytest process, by a crash or hang (which the host alone can
  cause), or by the public tests (whose own runs hide such a crash) is graded again with the
  killing contract alone; one that does not hold alone is not counted, and the contracts its
  grade never reached are graded then.

The unmutated reference is graded first, in full, one hidden check per pytest process so each
check's coverage is its own (shared session fixtures and caches would otherwise file a run
under whichever check filled them first): an oracle that fails the reference would "kill"
every mutant, so the run stops there with the reason. Several containers may share it
(``--reference-part k/n``: every n-th collected check from the k-th, the public tests in the
last part); the host merges their headers (``merge_reference_parts``). Its header
(``reference.json``: verdict, timings, coverage, the judge's collection) lets a later process
grade mutants without grading it again (``--reference``), as long as the grading code and the
hidden tree are the same.
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

from grading import sealed, trace, warm_judge
from grading.errors import GraderError
from grading.grade import grade
from grading.hashing import grader_source_sha256, tree_sha256
from grading.hidden import collected_ids, remember_collection
from grading.layout import GradeOptions, Layout
from grading.models import (
    BUDGET_RAN_OUT,
    HIDDEN_PREFIX,
    PUBLIC_CONTRACT_ID,
    ContractResult,
    contract_configurations,
)
from grading.mutant_report import (
    DETECTED,
    PASSING_REFERENCE,
    PROGRESS_NAME,
    REFERENCE_NAME,
    RESULTS_NAME,
    UNSTEADY_OUTCOMES,
    MutantResult,
    MutantSpec,
    MutantsReport,
    MutantStatus,
    reference_header,
)
from grading.packet import PacketSpec, load_packet_spec
from grading.warm_start import read_tally

EXCERPT_LIMIT = 600

# pytest's words for a test module that could not be imported.
_IMPORT_FAILURE = re.compile(
    r"ImportError while importing|ERROR collecting|errors during collection")
# A traceback and its frames as Python prints them (a log's tail or a probe's, which pytest
# may prefix with "E").
_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'File "([^"\n]*)", line \d+, in (\S+)')


def classify(mutant_id: str, contracts: list[ContractResult], applied: bool,
             tree: str = "") -> MutantResult:
    """The mutant's status from its (first-failure) grade of the graded tree ``tree``."""
    ran = [c for c in contracts if c.outcome not in ("not_run", "diff_rejected")]
    hidden_run = sum(c.kind == "hidden_check" for c in ran)
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
                            reason=f"{len(unfinished)} check(s) not run: the time budget for "
                            "one mutant's checks ran out" if unfinished else None)
    text = "\n".join(str(killer.evidence.get(k, "")) for k in ("excerpt", "message", "details"))
    status: MutantStatus = "killed"
    if killer.outcome == "hang":
        status = "timed_out"
    elif (killer.id == PUBLIC_CONTRACT_ID and _IMPORT_FAILURE.search(text)) or \
            _raised_at_module_level(text, tree):
        status = "crashed_at_import"
    excerpt = text.strip()
    return MutantResult(
        id=mutant_id, status=status, killed_by=killer.id, outcome=killer.outcome,
        configurations=contract_configurations(killer), reason=killer.reason,
        excerpt=excerpt[-EXCERPT_LIMIT:] if excerpt else None,
        contracts_run=len(ran), hidden_run=hidden_run)


def _raised_at_module_level(text: str, tree: str) -> bool:
    """The last traceback in ``text`` ends in the top-level code of a file of the graded tree
    ``tree``: that module raised while it was imported (or run as a script), whichever
    contract showed it. Read from text, so only a label: it never changes what is detected."""
    start = text.rfind(_TRACEBACK)
    frames = _FRAME.findall(text[start:]) if tree and start >= 0 else []
    return bool(frames) and frames[-1][1] == "<module>" and \
        frames[-1][0].startswith(tree.rstrip("/") + "/")


@dataclass(frozen=True)
class Selection:
    """The contracts one mutant's grade runs, in order: the public tests or not (first, or last
    with ``public_last``), hidden node ids; ``covering``: those of them (contract ids) that ran
    the mutated statement while the reference was graded."""

    public: bool
    hidden: tuple[str, ...]
    public_last: bool = False
    covering: frozenset[str] = frozenset()

    def not_covering(self) -> int:
        ids = [PUBLIC_CONTRACT_ID] if self.public else []
        return sum(c not in self.covering for c in ids + [HIDDEN_PREFIX + h for h in self.hidden])

    def after(self, contract: str) -> Selection | None:
        """What a grade stopped at ``contract`` never reached: the hidden checks after it, and
        the public tests if they were to run last (None: nothing)."""
        if contract == PUBLIC_CONTRACT_ID:
            public, hidden = False, () if self.public_last else self.hidden
        else:
            name = contract[len(HIDDEN_PREFIX):]
            if name not in self.hidden:
                return None
            public = self.public and self.public_last
            hidden = self.hidden[self.hidden.index(name) + 1:]
        if not public and not hidden:
            return None
        return Selection(public=public, hidden=hidden, public_last=True,
                         covering=self.covering)


@dataclass
class CoverageMap:
    """What each contract of the reference's grade ran, and what it cost.

    ``by_check`` is keyed as the tracer files it (a hidden node id, or ``trace.PUBLIC_KEY``);
    ``durations`` by hidden node id; ``public_s``: the public tests' (None: not timed).
    """

    by_check: trace.CoverageByCheck
    durations: dict[str, float]
    public_s: float | None = None

    @classmethod
    def of(cls, header: MutantsReport) -> CoverageMap:
        """The map the reference's header records."""
        times = header.reference_durations_s
        return cls({check: {path: set(lines) for path, lines in files.items()}
                    for check, files in header.coverage.items()},
                   {c[len(HIDDEN_PREFIX):]: s for c, s in times.items()
                    if c.startswith(HIDDEN_PREFIX)}, times.get(PUBLIC_CONTRACT_ID))

    def covers(self, check: str, path: str, lines: set[int]) -> bool:
        ran = self.by_check.get(check, {})
        # A check that ran no graded code at all (it only reads files, say) cannot be judged
        # by its coverage: it always counts as covering.
        return not any(ran.values()) or bool(trace.lines_of(ran, path) & lines)

    def select(self, spec: MutantSpec) -> Selection:
        """Every contract, cheapest first: those that ran the statement, by the reference's
        timings, then the others (only a survivor gets that far). The public tests can only
        run before or after all the hidden checks (these share one judge process): first when
        they ran the statement and cost the reference no more than the cheapest hidden check
        that ran it, else last. Measured on moe-router and hybrid-arch, every mutant the
        public tests killed first was also killed by a covering hidden check, in 1.4-7.5 s
        against their 8-40 s."""
        lines = set(range(spec.first_line, spec.last_line + 1))
        by_cost = sorted(self.durations, key=lambda c: self.durations[c])
        covering = [c for c in by_cost if self.covers(c, spec.path, lines)]
        public = self.covers(trace.PUBLIC_KEY, spec.path, lines)
        public_first = public and (not covering or self.public_s is None
                                   or self.public_s <= self.durations[covering[0]])
        ids = {HIDDEN_PREFIX + c for c in covering} | ({PUBLIC_CONTRACT_ID} if public else set())
        return Selection(public=True,
                         hidden=tuple(covering + [c for c in by_cost if c not in covering]),
                         public_last=not public_first, covering=frozenset(ids))


def _options(args: argparse.Namespace, packet_spec: PacketSpec, diff: Path, out: Path,
             work: Path, *, test_timeout_s: float, selection: Selection | None,
             part: tuple[int, int] | None = None,
             not_run: dict[str, str] | None = None) -> GradeOptions:
    """The reference's grade (``selection`` None: every contract, one process per hidden
    check; ``part`` (k, n): only its k-th share of them, the public tests in the last) or a
    mutant's (the selected contracts, stopped at the first failure)."""
    reference = selection is None
    public = selection.public if selection is not None else (
        part is None or part[0] == part[1] - 1)
    return GradeOptions(
        baseline=args.baseline.resolve(), packet=packet_spec,
        diff=diff.resolve(), hidden=args.hidden.resolve(), out=out, submission_id=diff.stem,
        work=work, hidden_timeout_s=args.mutant_timeout_s, hidden_test_timeout_s=test_timeout_s,
        expect_hidden_sha256=args.expect_hidden_sha256, stop_at_first_failure=not reference,
        hidden_tests=None if selection is None else selection.hidden,
        public_tests=public,
        public_tests_last=selection is not None and selection.public_last,
        trace_each_hidden_test=reference, hidden_share=part if reference else None,
        warm_start=not reference and not args.cold_start,
        warm_start_daemons=None if reference else _warm_daemons(args),
        configurations_not_run=not_run,
        # A kill by a crash or hang is confirmed with the killing contract alone (_confirm).
        confirm_unsteady=False)


def _warm_daemons(args: argparse.Namespace) -> Path | None:
    """``--warm-daemon-dir``, where the worker's daemons listen (``grading.warm_start.
    connect_daemon``), made a folder only this uid may reach: the candidate must not connect to
    a root process, nor plant a socket of its own there. None (no daemons) when it is not ours.
    """
    folder: Path | None = args.warm_daemon_dir
    if folder is None or args.cold_start:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    if folder.is_symlink() or folder.stat().st_uid != os.getuid():
        return None
    folder.chmod(0o700)
    return folder


def _grade_mutant(args: argparse.Namespace, packet: PacketSpec, scratch: Path,
                  header: MutantsReport, mutant_id: str, grades: list[MutantResult],
                  selection: Selection) -> MutantResult:
    """One grade of the mutant with these contracts (the per-test limit and the
    configurations this grader cannot run are the reference's), added to ``grades``."""
    m0 = time.monotonic()
    work = _fresh(scratch / "work")
    judges = warm_judge.started()
    graded = grade(_options(args, packet, args.mutants / f"{mutant_id}.diff",
                            _fresh(scratch / "out"), work,
                            selection=selection, test_timeout_s=header.hidden_test_timeout_s,
                            not_run=header.configurations_not_run))
    elapsed = time.monotonic() - m0
    if why := warm_judge.failure():
        # Its judge was killed with the session: the checks it left read as crashes, which
        # would count as a kill.
        raise GraderError(f"{mutant_id}: {why}; grade it again (or with --cold-start)")
    tally = read_tally(Layout(work).warm_tally)
    result = classify(mutant_id, graded.contracts, graded.diff.applied,
                      str(Layout(work).graded)).model_copy(
        update={"duration_s": round(elapsed, 2), "processes_warm": tally.warm,
                "processes_fresh": tally.fresh, "judges_warm": warm_judge.started() - judges})
    grades.append(result)
    return result


def _confirm(result: MutantResult, ran: Selection,
             regrade: Callable[[Selection], MutantResult]) -> MutantResult:
    """Check a result in a setup the reference was graded in, before it is counted.

    A survivor ran every contract (``CoverageMap.select``) and passed them all. A kill by a
    hidden check that ran after other checks in the same pytest process is graded again with
    that check alone (the reference passed each check alone), and a kill by the public tests
    with the public tests alone wherever they ran: state another check left behind must not
    count as a kill. So is a kill by a crash or a hang, wherever it ran: one failure of that
    kind may be the host's (and the public tests' own runs report one as a plain failure). If
    the same contract does not fail again alone, the kill is not counted and the contracts
    that grade never reached (``Selection.after``) are graded, their result checked the same
    way: the mutant is killed by one of them or survives having run every contract. A kill by
    a contract that coverage said never runs the statement is kept, with a note: coverage can
    miss code run without Python line events.
    """
    if result.status == "survived":
        return result if result.reason else result.model_copy(
            update={"confirmed": "every_contract"})
    if result.status not in DETECTED:
        return result
    if ran.covering and result.killed_by not in ran.covering:
        result = result.model_copy(update={
            "reason": "killed by a check that coverage said never runs the statement "
                      f"({result.killed_by})"})
    killer = result.killed_by or ""
    if killer == PUBLIC_CONTRACT_ID:
        # The reference's grade ran them before any hidden check.
        after_others = ran.public_last and result.hidden_run > 0
        alone = Selection(public=True, hidden=())
    else:
        after_others = result.hidden_run > 1
        alone = Selection(public=False, hidden=(killer[len(HIDDEN_PREFIX):],))
    # A crash or a hang can come from the host rather than the mutant: a rank aborting in
    # gloo's shutdown under load (seen in code derived from the reference), a time limit
    # reached while other graders compete for the cores. One failure of that kind is not yet
    # a kill, wherever the killer ran. The public tests are the packet's own: they start
    # training runs themselves and assert on the result, so a run the host crashed or timed
    # out reaches us as a plain failure.
    unsteady = result.outcome in UNSTEADY_OUTCOMES or killer == PUBLIC_CONTRACT_ID
    if not after_others and not unsteady:
        return result.model_copy(update={"confirmed": "first"})
    again = regrade(alone)
    if again.status in DETECTED and again.killed_by == killer:
        # The grade alone is the reference's setup, so its evidence is the report's: a first
        # grade the host disturbed would show the host's failure.
        return result.model_copy(update={
            "confirmed": "alone", "status": again.status, "outcome": again.outcome,
            "excerpt": again.excerpt, "configurations": again.configurations})
    how = f"ended in a {result.outcome}" if result.outcome in UNSTEADY_OUTCOMES else "failed"
    when = "after other checks had run" if after_others else "once"
    not_counted = f"{killer} {how} {when}; graded again alone it passes, so the kill is not counted"
    rest = ran.after(killer)
    later = _confirm(regrade(rest), rest, regrade) if rest is not None else None
    if later is not None and later.status in DETECTED:
        return later.model_copy(update={"reason": "; ".join(
            r for r in (not_counted, later.reason) if r)})
    return result.model_copy(update={
        "status": "survived", "confirmed": "alone", "killed_by": None, "outcome": None,
        "configurations": [], "reason": "; ".join(
            r for r in (not_counted, later.reason if later else None) if r)})


def over_every_grade(result: MutantResult, grades: list[MutantResult]) -> MutantResult:
    """``result`` with its time and process counts summed over ``grades``, every grade the
    mutant took (the first, and those ``_confirm`` asked for)."""
    return result.model_copy(update={
        "duration_s": round(sum(g.duration_s for g in grades), 2),
        "processes_warm": sum(g.processes_warm for g in grades),
        "processes_fresh": sum(g.processes_fresh for g in grades),
        "judges_warm": sum(g.judges_warm for g in grades)})


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def grade_reference(args: argparse.Namespace, packet: PacketSpec,
                    scratch: Path) -> MutantsReport:
    """The unmutated reference, every contract (or ``--reference-part``'s share of them), one
    process per hidden check, traced: the header every mutant's grade starts from (its
    verdict, timings, coverage, collection)."""
    part: tuple[int, int] | None = args.reference_part
    trace_dir = _fresh(scratch / "trace")
    # The candidate uid creates its trace files here but cannot list or read the others'.
    trace_dir.chmod(0o1733)
    os.environ[trace.TRACE_DIR_VAR] = str(trace_dir)
    os.environ[trace.TRACE_ROOT_VAR] = str(scratch)
    try:
        ref = grade(_options(args, packet, args.reference_diff, _fresh(scratch / "ref-out"),
                             _fresh(scratch / "ref-work"), selection=None, part=part,
                             test_timeout_s=args.reference_test_timeout_s))
    finally:
        os.environ.pop(trace.TRACE_DIR_VAR, None)
        os.environ.pop(trace.TRACE_ROOT_VAR, None)
    by_check = trace.read_lines_by_check(str(trace_dir))
    return reference_header(
        packet.id, ref.verdict, ref.contracts, duration_s=ref.duration_s,
        test_timeout_s=args.test_timeout_s, not_run=ref.configurations_not_run,
        coverage=by_check, collected=collected_ids(args.hidden / "checks") or [],
        part=part or (0, 1),
        grader_sha256=grader_source_sha256(), hidden_sha256=tree_sha256(args.hidden))


def load_reference(path: Path, hidden: Path) -> MutantsReport:
    """An earlier process's reference header, refused unless it was made by this grading
    code on this hidden tree and the reference passed."""
    header = MutantsReport.model_validate_json(path.read_bytes())
    if header.grader_source_sha256 != grader_source_sha256():
        raise GraderError(f"{path} was graded by other grading code; grade the reference again")
    if header.hidden_tree_sha256 != tree_sha256(hidden):
        raise GraderError(f"{path} was graded on another hidden tree; grade the reference again")
    if header.reference_verdict not in PASSING_REFERENCE:
        raise GraderError(f"{path}: the reference graded {header.reference_verdict}, so every "
                          "mutant would count as killed")
    return header


def grade_mutants(args: argparse.Namespace, packet: PacketSpec, scratch: Path,
                  header: MutantsReport, specs: list[MutantSpec],
                  on_result: Callable[[int, MutantResult], None]) -> list[MutantResult]:
    """Grade each mutant in turn (see the module doc) against the reference's header."""
    coverage = CoverageMap.of(header)
    durations = coverage.durations
    if header.collected:
        remember_collection(args.hidden / "checks", header.collected)
    # Mutant grades only: their judges fork from the worker's warm judge daemon.
    warm_judge.configure(_warm_daemons(args))
    # Without coverage (a tracer that wrote nothing), every contract runs, cheapest first.
    every = Selection(public=True, hidden=tuple(sorted(durations, key=lambda c: durations[c])))
    results = []
    for n, spec in enumerate(specs, 1):
        grades: list[MutantResult] = []
        regrade = functools.partial(_grade_mutant, args, packet, scratch, header, spec.id,
                                    grades)
        selection = coverage.select(spec) if coverage.by_check else every
        result = _confirm(regrade(selection), selection, regrade)
        if coverage.by_check:
            # Set on the confirmed result: a kill that did not hold alone is replaced by a
            # later grade's result, which knows nothing of the mutant's coverage.
            result = result.model_copy(update={
                "contracts_not_covering": selection.not_covering(),
                "covered": bool(selection.covering)})
        result = over_every_grade(result, grades)
        results.append(result)
        on_result(n, result)
    return results


def run(args: argparse.Namespace) -> MutantsReport:
    t0 = time.monotonic()
    packet = load_packet_spec(args.packet)
    scratch = args.work.resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    if args.reference is not None:
        report = load_reference(args.reference, args.hidden)
    else:
        report = grade_reference(args, packet, scratch)
        (args.out / REFERENCE_NAME).write_text(report.model_dump_json(indent=1) + "\n")
        share = "" if args.reference_part is None else " (part {}/{})".format(
            *args.reference_part)
        print(f"reference{share}: {report.reference_verdict} in "
              f"{report.reference_duration_s:.0f} s, one process per hidden check; per-test "
              f"limit for mutants {report.hidden_test_timeout_s:.0f} s", flush=True)
    if report.reference_verdict not in PASSING_REFERENCE or args.mutants is None:
        return report

    specs = [MutantSpec.model_validate(e)
             for e in json.loads((args.mutants / "index.json").read_text())]
    if args.only:
        wanted = set(args.only)
        specs = [s for s in specs if s.id in wanted]
    progress = args.out / PROGRESS_NAME

    def on_result(n: int, result: MutantResult) -> None:
        with progress.open("a") as fh:
            fh.write(result.model_dump_json() + "\n")
        print(f"mutant {n}/{len(specs)} {result.id}: {result.status}"
              + (f" by {result.killed_by}" if result.killed_by else ""), flush=True)

    report.mutants = grade_mutants(args, packet, scratch, report, specs, on_result)
    report.duration_s = round(time.monotonic() - t0, 2)
    shutil.rmtree(scratch, ignore_errors=True)
    return report


def _part(text: str) -> tuple[int, int]:
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N with 0 <= K < N")
    return int(k), int(n)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m grading.mutants",
                                description="Grade a task's reference and its mutants.")
    p.add_argument("--baseline", type=Path, required=True)
    p.add_argument("--packet", type=Path, required=True)
    p.add_argument("--hidden", type=Path, required=True)
    p.add_argument("--reference-diff", type=Path, required=True)
    p.add_argument("--mutants", type=Path, default=None,
                   help="folder with index.json (MutantSpec entries, in grading order) and "
                   "<id>.diff; without it only the reference is graded")
    p.add_argument("--only", action="append", default=[],
                   help="grade only this mutant id (repeatable)")
    p.add_argument("--reference", type=Path, default=None,
                   help="an earlier run's reference.json (same grading code and hidden tree): "
                   "the reference is not graded again")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--expect-hidden-sha256", default=None)
    # Each hidden test has its own limit (--test-timeout-s); this one only bounds a mutant
    # whose many checks each stay just under it.
    p.add_argument("--mutant-timeout-s", type=float, default=5400.0,
                   help="wall time for one mutant's hidden checks together")
    p.add_argument("--reference-test-timeout-s", type=float, default=300.0)
    p.add_argument("--reference-part", type=_part, default=None, metavar="K/N",
                   help="grade only the K-th of N shares of the reference's hidden checks (the "
                        "public tests in the last); the host merges the N headers")
    p.add_argument("--test-timeout-s", type=float, default=0.0,
                   help="per hidden test limit for mutants (0: 3x the reference's slowest)")
    p.add_argument("--warm-daemon-dir", type=Path, default=None,
                   help="a folder kept between this worker's grading.mutants runs, where its "
                        "warm daemons (judge and candidate servers) listen")
    p.add_argument("--cold-start", action="store_true",
                   help="start every candidate process of a mutant's grade as a fresh "
                        "interpreter (default: forked from a warm server, grading.warm_start)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        sealed.candidate_uids()
        args.out.mkdir(parents=True, exist_ok=True)
        report = run(args)
    except (GraderError, sealed.SealError, ValueError, OSError) as exc:
        print(f"grading.mutants: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    (args.out / RESULTS_NAME).write_text(report.results_json())
    print(f"grading.mutants: {len(report.mutants)} mutants graded in {report.duration_s:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
