"""``harness oracle-strength``: how many realistic mistakes in the reference do the checks catch?

Gold validation shows each check fails the faults its authors wrote. Mutation analysis asks
about the mistakes nobody wrote down: mutants of the reference's own lines
(``harness.oracle.mutation``) are graded by the real hidden checks in the grader image, on every CPU
configuration the checks run, all in one grader container (``grading.mutants``). The score
is detected / (mutants not marked equivalent). A surviving mutant is either a blind spot of
the oracle, or equivalent to the reference (no observable difference): a human decides, in
``reports/oracle-strength/<task>.equivalent.yaml`` with the reason, and the report lists every
survivor with its change so they can.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from grading.hashing import grader_source_sha256, tree_sha256
from grading.models import PUBLIC_CONTRACT_ID
from grading.mutant_report import (
    DETECTED,
    MUTANTS_SCHEMA_VERSION,
    PASSING_REFERENCE,
    PROGRESS_NAME,
    REFERENCE_NAME,
    RESULTS_NAME,
    MutantResult,
    MutantSpec,
    MutantsReport,
    read_partial,
)
from grading.packet import PacketSpec, load_packet_spec
from grading.yamlfile import YamlFileError, load_model
from harness.errors import HarnessError
from harness.infra import images
from harness.infra.workspace import apply_patch, snapshot_baseline
from harness.oracle.grade import GraderFailed
from harness.oracle.mutant_pool import MutantInputs, grade_in_pool, grade_reference
from harness.oracle.mutation import (
    OPERATORS,
    SCOPES,
    Mutant,
    Scope,
    beyond_lines,
    generate_mutants,
)
from harness.records.attempt import new_numbered_dir, newest_numbered_dir, set_aside
from harness.records.clock import utc_timestamp

REPORT_SCHEMA_VERSION = 1
# Which lines a run mutates: harness.oracle.mutation's scopes, or both (scored apart).
ScopeChoice = Literal["diff", "beyond", "both"]
SCOPE_CHOICES: tuple[ScopeChoice, ...] = ("diff", "beyond", "both")
GOAL = 0.9
# Grader containers side by side (docs/oracle-strength.md: measured on this 2-core machine).
DEFAULT_WORKERS = 2
# The reference's grade, one process per hidden check, in full.
REFERENCE_TIMEOUT_S = 3600.0


class RunSettings(BaseModel):
    """``run.json``: what a run set out to grade, and the inputs it was bound to, written
    before grading."""

    seed: int = 0
    limit: int | None = None
    selected: bool = False
    scope: ScopeChoice = "both"
    grader_source_sha256: str
    hidden_tree_sha256: str
    workers: int = 1
    warm_start: bool = False
    # ``_cache_key`` of the run's inputs (grading code, grader image, hidden tree, baseline,
    # reference, packet); None in runs made before 2026-12-07.
    inputs_sha256: str | None = None


class ResumeRecord(BaseModel):
    """One ``--resume`` of a stopped run."""

    at: str
    kept: int
    of: int
    workers: int


class Equivalents(RootModel[dict[str, str]]):
    """``<task>.equivalent.yaml``: mutant id -> why it cannot be told from the reference."""


class MutantEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mutant: Mutant
    result: MutantResult
    equivalent: str | None = None  # the reason, when a human marked it equivalent


class OperatorRow(BaseModel):
    operator: str
    family: str
    # Where the operator's mutants are (harness.oracle.mutation: "diff" or "beyond").
    scope: Scope = "diff"
    mutants: int
    detected: int
    survived: int
    equivalent: int


class ScopeRow(BaseModel):
    scope: Scope
    mutants: int
    detected: int
    survived: int
    equivalent: int
    score: float | None


class OracleStrengthReport(BaseModel):
    """``reports/oracle-strength/<task>.json``."""

    schema_version: int = REPORT_SCHEMA_VERSION
    task: str
    generated_at: str
    seed: int
    limit: int | None
    grader_source_sha256: str
    hidden_tree_sha256: str
    reference_verdict: str
    hidden_test_timeout_s: float
    duration_s: float
    # The unmutated reference's grade, one process per hidden check (part of duration_s
    # unless reference_reused: an earlier run graded the same inputs).
    reference_duration_s: float = 0.0
    reference_reused: bool = False
    # Grader containers that graded the reference's checks side by side (its wall time is the
    # slowest one's).
    reference_parts: int = 1
    # Grader containers that graded the mutants side by side, and whether the mutants'
    # candidate processes were forked from a warm interpreter (grading.warm_start).
    workers: int = 1
    warm_start: bool = False
    coverage_recorded: bool = False
    # Coverage filed per check (the reference graded one process per hidden check), so each
    # mutant ran only the checks that execute it; False in runs made before that existed.
    coverage_per_check: bool = False
    mutants_total: int
    # Mutants the run set out to grade; more than mutants_total when it was stopped early.
    mutants_generated: int = 0
    detected: int
    survived: int
    equivalent: int
    score: float | None
    goal: float = GOAL
    # The score of each scope apart (the operators' rows summed per scope); the goal holds for
    # each. Empty in reports made before scopes existed (every mutant then was "diff").
    by_scope: list[ScopeRow] = Field(default_factory=list)
    by_operator: list[OperatorRow]
    # Contract id -> how many mutants it was the first to kill.
    kills_by_contract: dict[str, int]
    entries: list[MutantEntry] = Field(default_factory=list)
    # Each time the run stopped and was resumed (``--resume``): the mutants it had graded were
    # kept, and duration_s estimates the stopped parts from those grades.
    resumes: list[ResumeRecord] = Field(default_factory=list)


def load_equivalents(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    try:
        marked = load_model(path, Equivalents, what="equivalent-mutants file")
    except YamlFileError as exc:
        raise HarnessError(str(exc), "each entry is `<mutant id>: <why it is equivalent>`"
                           ) from None
    assert isinstance(marked, Equivalents)
    short = [k for k, why in marked.root.items() if len(why.strip()) < 10]
    if short:
        raise HarnessError(f"{path}: mutant(s) {short} are marked equivalent without a reason",
                           "give each one sentence saying why no check can tell it apart")
    return marked.root


def _redact(text: str, canary: str) -> str:
    return text.replace(canary, "[canary]") if canary else text


def score_report(task: str, mutants: list[Mutant], graded: MutantsReport,
                 equivalents: dict[str, str], *, seed: int, limit: int | None,
                 canary: str = "") -> OracleStrengthReport:
    """Join mutants with their results and the human equivalence marks; compute the score."""
    results = {r.id: r for r in graded.mutants}
    entries: list[MutantEntry] = []
    for mutant in mutants:
        result = results.get(mutant.id)
        if result is None:
            continue  # the run stopped before it (reported as fewer mutants)
        shown = mutant.model_copy(update={"change": _redact(mutant.change, canary),
                                          "original": _redact(mutant.original, canary),
                                          "mutated": _redact(mutant.mutated, canary)})
        if result.excerpt:
            result = result.model_copy(update={"excerpt": _redact(result.excerpt, canary)})
        reason = equivalents.get(mutant.id) if result.status == "survived" else None
        entries.append(MutantEntry(mutant=shown, result=result, equivalent=reason))
    rows = []
    for scope in SCOPES:
        for op in OPERATORS:
            mine = [e for e in entries if e.mutant.operator == op and e.mutant.scope == scope]
            if mine:
                rows.append(OperatorRow(
                    operator=op, family=OPERATORS[op][0], scope=scope, mutants=len(mine),
                    detected=sum(e.result.status in DETECTED for e in mine),
                    survived=sum(e.result.status == "survived" and e.equivalent is None
                                 for e in mine),
                    equivalent=sum(e.equivalent is not None for e in mine)))
    by_scope = []
    for scope in SCOPES:
        mine_rows = [r for r in rows if r.scope == scope]
        if mine_rows:
            n, found, same = (sum(r.mutants for r in mine_rows),
                              sum(r.detected for r in mine_rows),
                              sum(r.equivalent for r in mine_rows))
            by_scope.append(ScopeRow(scope=scope, mutants=n, detected=found,
                                     survived=sum(r.survived for r in mine_rows),
                                     equivalent=same,
                                     score=round(found / (n - same), 4) if n > same else None))
    detected = sum(r.detected for r in rows)
    equivalent = sum(r.equivalent for r in rows)
    scored = len(entries) - equivalent
    kills = Counter(e.result.killed_by for e in entries if e.result.killed_by)
    return OracleStrengthReport(
        task=task, generated_at=utc_timestamp(), seed=seed, limit=limit,
        grader_source_sha256=graded.grader_source_sha256,
        hidden_tree_sha256=graded.hidden_tree_sha256,
        reference_verdict=graded.reference_verdict,
        hidden_test_timeout_s=graded.hidden_test_timeout_s, duration_s=graded.duration_s,
        reference_duration_s=graded.reference_duration_s,
        reference_reused=graded.reference_reused, reference_parts=graded.reference_parts,
        workers=graded.workers,
        warm_start=graded.warm_start,
        coverage_per_check=graded.coverage_recorded and bool(graded.reference_durations_s),
        coverage_recorded=graded.coverage_recorded,
        mutants_total=len(entries), mutants_generated=len(mutants), detected=detected,
        survived=sum(r.survived for r in rows), equivalent=equivalent,
        score=round(detected / scored, 4) if scored else None,
        by_scope=by_scope, by_operator=rows, kills_by_contract=dict(kills.most_common()),
        entries=entries)


def _started(report: OracleStrengthReport) -> str:
    warm = sum(e.result.processes_warm for e in report.entries)
    fresh = sum(e.result.processes_fresh for e in report.entries)
    judges = sum(e.result.judges_warm for e in report.entries)
    return (f"{warm} of the hidden checks' candidate processes warm and {fresh} fresh (the "
            "public test command, a shell, always starts fresh and is not counted), and "
            f"{judges} judges (the hidden checks' pytest) forked from the worker's judge daemon")


def _containers(n: int) -> str:
    return "one grader container" if n == 1 else f"{n} grader containers"


class BlindRound(BaseModel):
    """One measured round of blind faults (``scripts/qualify/blind_faults.py``'s JSON)."""

    task: str
    date: str
    caught: int
    total: int


def blind_line(report_dir: Path, task: str) -> str:
    """The latest blind-fault round's line for the report, or what says there is none."""
    rounds = []
    for path in sorted((report_dir / "blind").glob(f"{task}-*.json")):
        try:
            rounds.append((BlindRound.model_validate_json(path.read_bytes()), path))
        except ValueError:
            return f"Blind faults: `{path.name}` is unreadable; measure the round again."
    if not rounds:
        return "Blind faults: no round measured yet (docs/oracle-strength.md, \"Blind faults\")."
    latest, path = max(rounds, key=lambda r: r[0].date)
    return (f"Blind faults: caught {latest.caught} of {latest.total} ({latest.date}; written "
            f"from the packet and the reference only, [the round](blind/{path.stem}.md)).")


SCOPE_WORDS = {"diff": "lines the reference adds or changes",
               "beyond": "other editable lines its grade executed"}


def goal_met(report: OracleStrengthReport) -> bool:
    """The goal holds for every scope apart (for the whole score in reports without scopes)."""
    scores = [r.score for r in report.by_scope] if report.by_scope else [report.score]
    return all(s is not None and s >= report.goal for s in scores)


def render_markdown(report: OracleStrengthReport, blind: str = "") -> str:
    score = "n/a" if report.score is None else f"{report.score:.1%}"
    met = goal_met(report)
    apart = "; ".join(f"{r.scope} {'n/a' if r.score is None else f'{r.score:.1%}'}"
                      for r in report.by_scope)
    mutant_minutes = max(0.0, report.duration_s - (
        0.0 if report.reference_reused else report.reference_duration_s)) / 60
    rate = (f"{report.mutants_total / mutant_minutes:.1f} mutants per minute"
            if mutant_minutes > 0 else "none graded")
    lines = [
        f"# Oracle strength: {report.task}", "",
        f"Score: **{score}**" + (f" ({apart})" if len(report.by_scope) > 1 else "")
        + f" (detected {report.detected} of {report.mutants_total} mutants, "
        f"{report.equivalent} marked equivalent; goal {report.goal:.0%}"
        + (" in each scope" if len(report.by_scope) > 1 else "")
        + f": {'met' if met else 'NOT met'}).", "",
        *([blind, ""] if blind else []),
        f"Generated {report.generated_at} with seed {report.seed}"
        + (f", limit {report.limit}" if report.limit else "") +
        f"; grader code `{report.grader_source_sha256[:16]}`, hidden tree "
        f"`{report.hidden_tree_sha256[:16]}`; {report.duration_s / 60:.1f} min, the mutants "
        f"in {_containers(report.workers)} side by side"
        + (", their candidate processes forked from a warm interpreter (`grading.warm_start`)"
           if report.warm_start else "")
        + f" (per-test limit {report.hidden_test_timeout_s:g} s). The reference graded "
        f"`{report.reference_verdict}`"
        f"{', one process per hidden check,' if report.coverage_per_check else ''}"
        + (f" in {_containers(report.reference_parts)} side by side,"
           if report.reference_parts > 1 else "")
        + f" in {report.reference_duration_s / 60:.1f} min"
        + (" (an earlier run's grade of the same grading code, image, hidden tree and "
           "reference, not graded again)" if report.reference_reused else "")
        + f"; the mutants took {mutant_minutes:.1f} min ({rate})."
        + (f" Their grades started {_started(report)}." if report.warm_start else ""), "",
        "Detected = killed by a failing contract, timed out, or crashed at import.", "",
    ]
    if report.resumes:
        lines += [
            "**Resumed:** the run stopped and `--resume` went on with it: "
            + "; ".join(f"at {r.at}, {r.kept} of {r.of} mutants graded were kept and the rest "
                        f"graded in {_containers(r.workers)}" for r in report.resumes)
            + ". Each kept grade is bound to the same grading code, grader image, hidden tree, "
            "baseline, reference, packet and mutant; the wall time counts the stopped parts as "
            "estimated from their grades.", ""]
    if report.mutants_generated > report.mutants_total:
        lines += [
            f"**Stopped early:** {report.mutants_total} of {report.mutants_generated} mutants "
            "graded. Mutants are handed out in the seeded round-robin order over operators, so "
            f"these are the even sample `--limit {report.mutants_total} --seed {report.seed}` "
            "grades" + ("." if report.workers == 1 else
                        f", but for at most {report.workers - 1} that were still being graded "
                        "while later ones had finished."), ""]
    if report.by_scope:
        lines += ["| scope | mutants | detected | survived | equivalent | score |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {r.scope} ({SCOPE_WORDS.get(r.scope, r.scope)}) | {r.mutants} | "
                  f"{r.detected} | {r.survived} | {r.equivalent} | "
                  f"{'n/a' if r.score is None else f'{r.score:.1%}'} |" for r in report.by_scope]
        lines += [""]
    lines += [
        "| scope | operator | family | mutants | detected | survived | equivalent |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {r.scope} | {r.operator} | {r.family} | {r.mutants} | {r.detected} | "
              f"{r.survived} | {r.equivalent} |" for r in report.by_operator]
    lines += ["", "## First killing contract", "", "| contract | mutants |", "| --- | --- |"]
    lines += [f"| `{c}` | {n} |" for c, n in report.kills_by_contract.items()]
    statuses = Counter(e.result.status for e in report.entries)
    unreached = sum(not e.result.covered for e in report.entries)
    lines += ["", "Statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
              + (f" ({unreached} survivor(s) on statements no check executes)"
                 if unreached else "")
              + ("" if report.coverage_recorded else
                 "; line coverage was not recorded, so every mutant was graded")]
    kills = [e.result for e in report.entries if e.result.status in DETECTED]
    # Runs made before kills were checked: a killer that was the only contract run (or the
    # public tests, always a process of their own) was first in its process all the same.
    checked = Counter(r.confirmed or ("first" if r.killed_by == PUBLIC_CONTRACT_ID
                                      or r.contracts_run == 1 else None) for r in kills)
    lines += ["", f"Kills checked in a setup the reference passed: {checked['first']} by the "
              f"first check of their pytest process, {checked['alone']} graded again with the "
              f"killing check alone."]
    if checked[None]:
        scored = report.mutants_total - report.equivalent
        floor = (report.detected - checked[None]) / scored if scored else 0.0
        lines[-1] += (f" **{checked[None]} not checked**: a run made before kills were "
                      "checked, whose killer ran after other checks in the same pytest process; "
                      f"if every one of them were state left by those checks, the score would "
                      f"be {floor:.1%}.")
    survivors = [e for e in report.entries if e.result.status == "survived"]
    if survivors:
        lines += ["", "## Surviving mutants", ""]
        for e in survivors:
            mark = (f"equivalent: {e.equivalent}" if e.equivalent
                    else "**not marked: a blind spot, or mark it equivalent with the reason**")
            every_ran = e.result.confirmed in ("every_contract", "full_grade")
            if not e.result.covered:
                mark += " (no check executes this statement" + (
                    "; graded with every contract all the same)" if every_ran
                    else ": not graded)")
            elif every_ran:
                mark += " (every contract ran on it: it survived them all)"
            elif e.result.confirmed == "alone" and e.result.killed_by is None:
                # _confirm since 2026-12-02: the kill did not hold alone, the rest then ran.
                mark += (f" ({e.result.reason}; the contracts its grade had not reached then "
                         "ran on it)")
            elif report.coverage_per_check:
                mark += (f" (ran the {e.result.contracts_run} contract(s) that execute this "
                         f"statement; {e.result.contracts_not_covering} never do; not graded "
                         "again with the others)")
            lines += [f"### `{e.mutant.id}` ({e.mutant.operator}, {e.mutant.path}:"
                      f"{e.mutant.line})", "", mark, "", "```diff", e.mutant.change.rstrip(),
                      "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def _cache_key(inputs: MutantInputs, image: str) -> str:
    """What the reference's grade depends on: grading code, grader image, hidden tree, baseline,
    reference diff and packet. Any change grades it again."""
    parts = {"schema": MUTANTS_SCHEMA_VERSION, "grader": inputs.grader_sha256, "image": image,
             "hidden": inputs.hidden_sha256, "baseline": tree_sha256(inputs.baseline),
             "reference": hashlib.sha256(inputs.reference_diff.read_bytes()).hexdigest(),
             "packet": hashlib.sha256(inputs.packet_yaml.read_bytes()).hexdigest()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def inputs_key(inputs: MutantInputs) -> str:
    """``_cache_key`` of ``inputs`` with this host's grader image."""
    return _cache_key(inputs, images.image_id(images.docker_client(), "grader"))


def reference_header(inputs: MutantInputs, key: str, cache_dir: Path, out_dir: Path, *,
                     reuse: bool, parts: int, log: Callable[[str], None]
                     ) -> tuple[MutantsReport, bool]:
    """The reference's header: from the cache when an earlier run graded these very inputs
    (``key``, and ``reuse``), else graded now and cached. True when it was reused."""
    cached = cache_dir / f"{key[:32]}.json"
    if reuse and cached.is_file():
        try:
            header = inputs.bound(cached.read_bytes(), f"cached {REFERENCE_NAME}")
        except GraderFailed:
            header = None  # a damaged or foreign cache entry is graded again, never trusted
        if header is not None and header.reference_verdict in PASSING_REFERENCE:
            log(f"reference: graded {header.reference_verdict} by an earlier run of the same "
                f"grading code, image, hidden tree and reference ({cached}); not graded again")
            return header, True
    header = grade_reference(inputs, out_dir, timeout_s=REFERENCE_TIMEOUT_S, parts=parts,
                             log=log)
    log(f"reference: {header.reference_verdict} in {header.reference_duration_s:.0f} s; "
        f"per-test limit for mutants {header.hidden_test_timeout_s:.0f} s")
    if header.reference_verdict in PASSING_REFERENCE:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_text(header.model_dump_json())
        tmp.replace(cached)
    return header, False


def _full_grade_s(header: MutantsReport) -> float:
    """What one grade of every contract cost the reference: its wall time, or, graded in parts
    side by side, the parts' contracts together (the slowest part alone is a fraction)."""
    return max(header.reference_duration_s, sum(header.reference_durations_s.values()))


def _grade_mutants(inputs: MutantInputs, mutants: list[Mutant], out_dir: Path,
                   header: MutantsReport, *, started: float, workers: int,
                   per_mutant_s: float, log: Callable[[str], None],
                   done: dict[str, MutantResult] | None = None,
                   earlier_s: float = 0.0) -> MutantsReport:
    """Every mutant graded in the worker pool against the reference's ``header``. Results are
    kept as they come (``out/reference.json``, ``out/mutants.jsonl``), so a run stopped
    halfway can be rescored, or resumed: then ``done`` holds what it had graded (only the
    others are graded) and ``earlier_s`` the stopped part's wall time."""
    out = out_dir / "out"
    if done is None:
        out.mkdir()
        (out / REFERENCE_NAME).write_text(header.model_dump_json(indent=1) + "\n")
        if header.reference_verdict not in PASSING_REFERENCE:
            return header
    progress = out / PROGRESS_NAME
    results: dict[str, MutantResult] = dict(done or {})
    todo = [m.id for m in mutants if m.id not in results]

    def on_result(result: MutantResult) -> None:
        results[result.id] = result
        with progress.open("a") as fh:
            fh.write(result.model_dump_json() + "\n")
        log(f"mutant {len(results)}/{len(mutants)} {result.id}: {result.status}"
            + (f" by {result.killed_by}" if result.killed_by else "")
            + f" ({result.duration_s:.0f} s)")

    try:
        if todo:
            grade_in_pool(inputs, out / REFERENCE_NAME, todo, out_dir,
                          workers=workers, on_result=on_result, log=log,
                          per_mutant_s=max(per_mutant_s, 3 * _full_grade_s(header)))
    except BaseException:
        log(f"partial results kept: `harness oracle-strength --task {header.task_id} "
            f"--rescore {out_dir}` reports the {len(results)} mutant(s) graded so far, "
            "`--resume` grades the rest")
        raise
    header.mutants = [results[m.id] for m in mutants]
    header.duration_s = round(earlier_s + time.monotonic() - started, 2)
    (out / RESULTS_NAME).write_text(header.results_json())
    return header


def editable_python_files(baseline: Path, reference_patch: bytes, packet_yaml: Path
                          ) -> dict[str, int]:
    """The reference tree's ``.py`` files an agent may edit (the packet's editable paths, not
    protected), with their line counts: where ``beyond``-scope mutants live."""
    spec = load_packet_spec(packet_yaml)
    with tempfile.TemporaryDirectory(prefix="harness-reference-") as tmp:
        tree = Path(tmp) / "reference"
        apply_patch(baseline, reference_patch, tree)
        return {rel: len(path.read_bytes().splitlines())
                for path in sorted(tree.rglob("*.py")) if path.is_file()
                and editable(rel := path.relative_to(tree).as_posix(), spec)}


def editable(rel: str, spec: PacketSpec) -> bool:
    """A path the grader keeps from the candidate's diff: it matches an ``editable_paths`` glob
    and no ``protected_paths`` glob (the rule ``grading.trees.restore_locked_paths`` applies)."""
    return (any(fnmatchcase(rel, g) for g in spec.editable_paths)
            and not any(fnmatchcase(rel, g) for g in spec.protected_paths))


def mutant_spec(mutant: Mutant) -> MutantSpec:
    """What the grader needs to know of a mutant: its id and the lines it changes."""
    return MutantSpec(id=mutant.id, path=mutant.path, first_line=mutant.first_line,
                      last_line=mutant.last_line)


def write_mutants(folder: Path, mutants: list[Mutant]) -> None:
    """``folder`` as ``grading.mutants --mutants`` reads it: ``index.json`` (the specs, in
    grading order) and ``<id>.diff``."""
    folder.mkdir()
    (folder / "index.json").write_text(json.dumps([mutant_spec(m).model_dump()
                                                   for m in mutants]))
    for m in mutants:
        (folder / f"{m.id}.diff").write_text(m.diff)


class OracleStrengthOptions(BaseModel):
    """One mutation-analysis run: the task's folders, where the run and report go, which
    mutants, and how they are graded."""

    task: str
    packet_dir: Path
    hidden_dir: Path
    runs_root: Path
    report_dir: Path
    # At most this many mutants, sampled evenly across operators, with this seed.
    limit: int | None = None
    seed: int = 0
    # Only these operators or mutant ids (None: all).
    operators: set[str] | None = None
    ids: set[str] | None = None
    # Grader containers grading mutants side by side.
    workers: int = DEFAULT_WORKERS
    # Reuse the reference's grade from an earlier run of the same inputs.
    reuse_reference: bool = True
    # Fork candidate processes from a warm interpreter (grading.warm_start).
    warm_start: bool = True
    per_mutant_s: float = 600.0
    # Which lines are mutated (harness.oracle.mutation): the reference's own ("diff"), the
    # other lines of the editable files its grade executed ("beyond"), or both, scored apart.
    scope: ScopeChoice = "both"


def _run_inputs(tmp: Path, packet_dir: Path, hidden_dir: Path, reference: bytes, *,
                warm_start: bool) -> MutantInputs:
    """The baseline snapshot and reference diff under ``tmp``, and what a run sends and is
    bound to: the grading code and hidden tree as they are now (a checkout edited while the
    run goes does not void it). The mutants go in ``tmp/mutants`` (``write_mutants``)."""
    snapshot_baseline(packet_dir / "repo", tmp / "baseline")
    (tmp / "reference.diff").write_bytes(reference)
    return MutantInputs(baseline=tmp / "baseline", packet_yaml=packet_dir / "packet.yaml",
                        hidden=hidden_dir, reference_diff=tmp / "reference.diff",
                        mutants=tmp / "mutants", grader_sha256=grader_source_sha256(),
                        hidden_sha256=tree_sha256(hidden_dir), warm_start=warm_start)


def oracle_strength(options: OracleStrengthOptions,
                    log: Callable[[str], None] = print) -> OracleStrengthReport:
    """Generate, grade and score the task's mutants; write the report under ``report_dir``
    and the run's mutants, logs and raw results in a new ``runs_root/run-N``. The reference's
    grade is kept in ``runs_root/reference-cache`` for later runs of the same inputs."""
    o = options
    task, packet_dir, hidden_dir, runs_root = o.task, o.packet_dir, o.hidden_dir, o.runs_root
    reference = (hidden_dir / "reference" / "solution.patch").read_bytes()
    equivalents = load_equivalents(o.report_dir / f"{task}.equivalent.yaml")
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-oracle-")))
        inputs = _run_inputs(tmp, packet_dir, hidden_dir, reference, warm_start=o.warm_start)
        baseline, folder = inputs.baseline, inputs.mutants

        def generate(beyond: dict[str, set[int]] | None) -> list[Mutant]:
            try:
                return generate_mutants(baseline, reference, limit=o.limit, seed=o.seed,
                                        operators=o.operators, ids=o.ids, beyond=beyond,
                                        include_diff=o.scope != "beyond")
            except ValueError as exc:
                raise HarnessError(str(exc), "pass known operator names and mutant ids (see "
                                   "the task's report)") from None

        # The diff scope needs nothing graded: refuse a bad selection before any grading.
        # The beyond scope's lines are the reference's coverage, known once it is graded; a
        # selection is checked before against every editable line (a superset).
        files: dict[str, int] = {}
        if o.scope == "diff":
            mutants = generate(None)
            if not mutants:
                raise HarnessError(f"no mutant of {task}'s reference could be generated",
                                   "the reference changes no Python line")
        else:
            mutants = []
            files = editable_python_files(baseline, reference, packet_dir / "packet.yaml")
            if o.ids or o.operators:
                generate({rel: set(range(1, n + 1)) for rel, n in files.items()})
        write_mutants(folder, mutants)
        key = inputs_key(inputs)
        out_dir = new_numbered_dir(runs_root, "run")
        stack.enter_context(_run_lock(out_dir))
        started = time.monotonic()
        # The reference's checks are shared among as many containers as will grade the mutants.
        header, reused = reference_header(inputs, key, runs_root / "reference-cache", out_dir,
                                          reuse=o.reuse_reference, parts=o.workers, log=log)
        header.reference_reused, header.workers = reused, o.workers
        header.warm_start = o.warm_start
        if o.scope != "diff" and header.reference_verdict in PASSING_REFERENCE:
            if not header.coverage_recorded:
                raise HarnessError("the reference's grade recorded no line coverage, which the "
                                   "beyond-the-diff scope is drawn from",
                                   "grade the reference again: --fresh-reference")
            mutants = generate(beyond_lines(header.coverage, reference, files))
            if not mutants:
                raise HarnessError(f"no mutant of {task}'s reference could be generated",
                                   "the reference's grade executed no editable Python line")
            shutil.rmtree(folder)
            write_mutants(folder, mutants)
        log(f"{len(mutants)} mutants of {task}'s reference ("
            + ", ".join(f"{k} {v}" for k, v in
                        Counter(f"{m.scope}:{m.operator}" for m in mutants).items()) + ")")
        (out_dir / "mutants.json").write_text(json.dumps([_dump(m) for m in mutants],
                                                         indent=1))
        # Before grading: a stopped run is rescored from these, and bound to what was sent.
        (out_dir / RUN_SETTINGS).write_text(RunSettings(
            seed=o.seed, limit=o.limit, selected=bool(o.operators or o.ids), scope=o.scope,
            grader_source_sha256=inputs.grader_sha256, hidden_tree_sha256=inputs.hidden_sha256,
            workers=o.workers, warm_start=o.warm_start, inputs_sha256=key).model_dump_json())
        graded = _grade_mutants(inputs, mutants, out_dir, header, started=started,
                                workers=o.workers, per_mutant_s=o.per_mutant_s, log=log)
    return _write_report(task, hidden_dir, mutants, graded, equivalents, o.report_dir,
                         seed=o.seed, limit=o.limit, whole=not (o.operators or o.ids), log=log)


RUN_SETTINGS = "run.json"


def rescore(task: str, hidden_dir: Path, run_dir: Path, report_dir: Path, *,
            log: Callable[[str], None] = print) -> OracleStrengthReport:
    """The report of an earlier run again, with today's equivalence marks; nothing is graded.

    The workflow for survivors: run, read the report, mark the equivalent ones with their
    reasons, rescore.
    """
    out = run_dir / "out"
    try:
        mutants = [Mutant.model_validate(m)
                   for m in json.loads((run_dir / "mutants.json").read_text())]
        settings = (json.loads((run_dir / RUN_SETTINGS).read_text())
                    if (run_dir / RUN_SETTINGS).is_file() else {})
        stopped = not (out / RESULTS_NAME).is_file()
        if stopped:
            progress = out / PROGRESS_NAME
            graded = read_partial((out / REFERENCE_NAME).read_bytes(),
                                  progress.read_text() if progress.is_file() else "")
        else:
            graded = MutantsReport.model_validate_json((out / RESULTS_NAME).read_text())
    except (OSError, ValueError) as exc:
        raise HarnessError(f"{run_dir} holds no oracle-strength results ({exc})",
                           "pass a runs/oracle-strength/<task>/run-N folder whose run graded "
                           "at least the reference") from None
    # Bound again to what the run sent (run.json, written before grading): a run stopped
    # halfway was never checked, and a finished one may have been refused after writing.
    for key in ("grader_source_sha256", "hidden_tree_sha256"):
        if key in settings or stopped:
            if settings.get(key) != getattr(graded, key):
                raise HarnessError(f"{run_dir}: the run's {key} is not the one it sent",
                                   "re-run the analysis")
    if graded.task_id != task:
        raise HarnessError(f"{run_dir} is a run of {graded.task_id}, not {task}",
                           "pass the task the run was made for")
    equivalents = load_equivalents(report_dir / f"{task}.equivalent.yaml")
    return _write_report(task, hidden_dir, mutants, graded, equivalents, report_dir,
                         seed=int(settings.get("seed", 0)), limit=settings.get("limit"),
                         whole=not settings.get("selected", False) and not stopped, log=log,
                         resumes=read_resumes(run_dir))


RUN_LOCK = "run.lock"
# Each resume of a run, one line each (ResumeRecord), before it grades: rescore reads them.
RESUMES_NAME = "resumed.jsonl"


@contextlib.contextmanager
def _run_lock(run_dir: Path) -> Iterator[None]:
    """Held while a process grades into ``run_dir``: a resume must not grade beside a run
    that is still going. An ``flock``, so the kernel drops it when the holder dies, however."""
    try:
        fd = os.open(run_dir / RUN_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise HarnessError(f"cannot lock {run_dir / RUN_LOCK} ({exc.strerror})",
                           "it must be a plain file in a folder this user can write") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HarnessError(f"{run_dir} is being graded by another process",
                               "wait for it to finish or stop it, then resume") from None
        yield
    finally:
        os.close(fd)  # closing drops the flock


def stopped_run(runs_root: Path) -> Path:
    """The task's newest analysis run, which must have stopped before its results."""
    newest = newest_numbered_dir(runs_root, "run")
    if newest is None:
        raise HarnessError(f"no oracle-strength run to resume under {runs_root}",
                           "run harness oracle-strength without --resume")
    if (newest / "out" / RESULTS_NAME).exists():
        raise HarnessError(f"the newest run, {newest}, finished: nothing to resume",
                           "run harness oracle-strength without --resume for a new one")
    return newest


# What the host sets on a reference header after its grade (workers, warm start, reuse, the
# run's duration and mutants): left out when two headers' grades are compared.
_HOST_SET = {"workers", "warm_start", "reference_reused", "duration_s", "mutants"}


def _same_grade(a: MutantsReport, b: MutantsReport) -> bool:
    return a.model_dump(exclude=_HOST_SET) == b.model_dump(exclude=_HOST_SET)


def _last_write_s_ago(folder: Path) -> float:
    """Seconds since anything under ``folder`` but its lock was last written."""
    newest = max((p.lstat().st_mtime for p in folder.rglob("*") if p.name != RUN_LOCK),
                 default=0.0)
    return time.time() - newest


def read_resumes(run_dir: Path) -> list[ResumeRecord]:
    path = run_dir / "out" / RESUMES_NAME
    if not path.is_file():
        return []
    try:
        return [ResumeRecord.model_validate_json(line)
                for line in path.read_text().splitlines() if line.strip()]
    except ValueError as exc:
        raise HarnessError(f"{path} is damaged ({exc})",
                           "restore it from the run's own copy; it is never rewritten") from None


def _dump(mutant: Mutant) -> dict[str, object]:
    return mutant.model_dump() | {"diff": mutant.diff}


def resume_oracle_strength(options: OracleStrengthOptions, run_dir: Path,
                           log: Callable[[str], None] = print) -> OracleStrengthReport:
    """Go on with a run that stopped before its results: keep every mutant it graded, grade
    the others of its own sample (``mutants.json``), and write the report as a finished run's.

    Kept grades count only if the run was bound to exactly today's inputs: the grading code
    and hidden tree it recorded (``run.json``), the whole reference-cache key (grading code,
    grader image, hidden tree, baseline, reference, packet), and its sample, generated again
    from today's baseline and reference (every mutant's id, change and graded diff; the seeded
    sample itself where the run took one). A run that predates the key in ``run.json`` is bound
    by the reference-cache entry its own grade wrote: that entry, under today's key, must be
    the grade its mutants were graded against."""
    o = options
    out = run_dir / "out"
    had_lock = (run_dir / RUN_LOCK).exists()
    with contextlib.ExitStack() as stack:
        # Before anything is read: what is read is then what no other process is changing.
        stack.enter_context(_run_lock(run_dir))
        if not had_lock and _last_write_s_ago(run_dir) < o.per_mutant_s:
            # A run started before runs held a lock, and written to within one mutant's
            # limit: it may still be grading.
            raise HarnessError(f"{run_dir} was written to in the last {o.per_mutant_s:.0f} s "
                               "and holds no lock: it may still be grading",
                               "stop it, or wait until it has been quiet that long")
        try:
            listed = json.loads((run_dir / "mutants.json").read_text())
            if not isinstance(listed, list):
                raise ValueError("mutants.json is not a list")
            mutants = [Mutant.model_validate(m) for m in listed]
            settings = RunSettings.model_validate_json((run_dir / RUN_SETTINGS).read_bytes())
            reference_raw = (out / REFERENCE_NAME).read_bytes()
            progress = out / PROGRESS_NAME
            partial = read_partial(reference_raw,
                                   progress.read_text() if progress.is_file() else "")
        except (OSError, ValueError) as exc:
            raise HarnessError(f"{run_dir} cannot be resumed: it holds no valid mutants, "
                               f"settings and reference grade ({exc})",
                               "run harness oracle-strength without --resume") from None
        resumes = read_resumes(run_dir)
        if (out / RESULTS_NAME).exists():
            raise HarnessError(f"{run_dir} finished: nothing to resume",
                               f"rescore it: --rescore {run_dir}")
        if partial.task_id != o.task:
            raise HarnessError(f"{run_dir} is a run of {partial.task_id}, not {o.task}",
                               "pass the task the run was made for")
        if partial.reference_verdict not in PASSING_REFERENCE:
            raise HarnessError(f"{run_dir}'s reference graded {partial.reference_verdict}: no "
                               "mutant of it is graded",
                               f"run harness validate --task {o.task}")
        sample = [m.id for m in mutants]
        foreign = sorted({m.id for m in partial.mutants} - set(sample))
        if len(set(sample)) != len(sample) or foreign:
            raise HarnessError(f"{run_dir}'s results name mutants its sample does not list "
                               f"({', '.join(foreign[:3]) or 'a repeated id'})",
                               "run harness oracle-strength without --resume")
        reference = (o.hidden_dir / "reference" / "solution.patch").read_bytes()
        equivalents = load_equivalents(o.report_dir / f"{o.task}.equivalent.yaml")
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-oracle-")))
        inputs = _run_inputs(tmp, o.packet_dir, o.hidden_dir, reference,
                             warm_start=settings.warm_start)
        baseline = inputs.baseline
        for name, then, now in (
                ("grading code", settings.grader_source_sha256, inputs.grader_sha256),
                ("hidden tree", settings.hidden_tree_sha256, inputs.hidden_sha256)):
            if then != now:
                raise HarnessError(f"{run_dir} was graded with another {name} than this "
                                   "checkout's", "run harness oracle-strength without --resume")
        try:
            header = inputs.bound(reference_raw, f"{run_dir.name}'s {REFERENCE_NAME}")
        except GraderFailed as exc:
            raise HarnessError(f"{run_dir} cannot be resumed: {exc.reason}", exc.fix) from None
        key = inputs_key(inputs)
        cached = o.runs_root / "reference-cache" / f"{key[:32]}.json"
        try:
            cache_grade: MutantsReport | None = MutantsReport.model_validate_json(
                cached.read_bytes())
        except (OSError, ValueError):
            cache_grade = None
        # The grade cached under today's key, where there is one, must be the run's own; a run
        # that recorded its key must match it, and for one that did not, that grade is the
        # only proof.
        same = cache_grade is None or _same_grade(cache_grade, header)
        if settings.inputs_sha256 is not None:
            bound = same and settings.inputs_sha256 == key
        else:
            bound = same and cache_grade is not None
        if not bound:
            raise HarnessError(f"{run_dir} was graded on other inputs (grader image, baseline, "
                               "reference or packet) than this checkout's",
                               "run harness oracle-strength without --resume")
        # The sample generated again from today's baseline and reference: every listed mutant
        # is what was graded under its id, and an unselected run's list is its seeded sample.
        beyond = (None if settings.scope == "diff" else beyond_lines(
            header.coverage, reference,
            editable_python_files(baseline, reference, o.packet_dir / "packet.yaml")))
        try:
            again = generate_mutants(
                baseline, reference, limit=None if settings.selected else settings.limit,
                seed=settings.seed, ids=set(sample) if settings.selected else None,
                beyond=beyond, include_diff=settings.scope != "beyond")
        except ValueError as exc:
            raise HarnessError(f"{run_dir}'s sample is not one of today's mutants ({exc})",
                               "run harness oracle-strength without --resume") from None
        regenerated = {m.id: _dump(m) for m in again}
        if (not settings.selected and [m.id for m in again] != sample) or any(
                regenerated.get(m.id) != _dump(m) for m in mutants):
            raise HarnessError(f"{run_dir}'s mutants.json is not the sample its settings and "
                               "today's reference generate",
                               "run harness oracle-strength without --resume")
        write_mutants(inputs.mutants, mutants)
        done = {m.id: m for m in partial.mutants}
        todo = [m for m in mutants if m.id not in done]
        # A mutant being graded when the run stopped left a log and maybe a folder: set aside,
        # never overwritten.
        for m in todo:
            for path in (run_dir / "logs" / f"{m.id}.log", run_dir / "graded" / m.id):
                if path.exists() or path.is_symlink():
                    set_aside(path)
        record = ResumeRecord(at=utc_timestamp(), kept=len(done), of=len(mutants),
                              workers=o.workers)
        with (out / RESUMES_NAME).open("a") as fh:
            fh.write(record.model_dump_json() + "\n")
        log(f"resuming {run_dir}: {len(done)} of {len(mutants)} mutants graded before it "
            f"stopped, kept; grading the other {len(todo)}")
        graded = _grade_mutants(inputs, mutants, run_dir, header, started=time.monotonic(),
                                workers=o.workers, per_mutant_s=o.per_mutant_s, log=log,
                                done=done, earlier_s=partial.duration_s)
    return _write_report(o.task, o.hidden_dir, mutants, graded, equivalents, o.report_dir,
                         seed=settings.seed, limit=settings.limit,
                         whole=not settings.selected, log=log,
                         resumes=[*resumes, record])


def _write_report(task: str, hidden_dir: Path, mutants: list[Mutant], graded: MutantsReport,
                  equivalents: dict[str, str], report_dir: Path, *, seed: int,
                  limit: int | None, whole: bool, log: Callable[[str], None],
                  resumes: list[ResumeRecord] | None = None) -> OracleStrengthReport:
    if graded.reference_verdict not in ("complete", "complete_on_cpu"):
        raise HarnessError(f"the hidden checks fail {task}'s unmutated reference "
                           f"({', '.join(graded.reference_failing) or graded.reference_verdict})",
                           f"run harness validate --task {task} and fix the oracle first")
    canary_file = hidden_dir / "CANARY"
    canary = canary_file.read_text().strip() if canary_file.is_file() else ""
    report = score_report(task, mutants, graded, equivalents, seed=seed, limit=limit,
                          canary=canary)
    report.resumes = resumes or []
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / f"{task}.json").write_text(report.model_dump_json(indent=1) + "\n")
    (report_dir / f"{task}.md").write_text(render_markdown(report, blind_line(report_dir, task)))
    stale = sorted(set(equivalents) - {e.mutant.id for e in report.entries
                                        if e.equivalent is not None})
    if stale and limit is None and whole:
        log(f"note: marked equivalent but not surviving (killed now, or no longer generated): "
            f"{', '.join(stale)}")
    return report
