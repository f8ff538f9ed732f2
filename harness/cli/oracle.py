"""Faces of the hidden checks: gold validation and mutation analysis."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from harness.cli.common import (
    DEFAULT_RUNS,
    TaskOption,
    clear_errors,
    console,
    err_console,
    log,
)
from harness.errors import HarnessError
from harness.paths import REPO_ROOT


@clear_errors
def oracle_strength_cmd(
    task: TaskOption,
    packet: Annotated[Path | None, typer.Option(metavar="DIR", help="packet folder")] = None,
    hidden: Annotated[Path | None, typer.Option(metavar="DIR", help="hidden folder")] = None,
    report_dir: Annotated[Path, typer.Option(
        metavar="DIR", help="where <task>.json/.md go (and where "
                                             "<task>.equivalent.yaml is read)")] =
    REPO_ROOT / "reports" / "oracle-strength",
    limit: Annotated[int | None, typer.Option(
        metavar="N", help="at most this many mutants, sampled "
                                              "evenly across operators")] = None,
    seed: Annotated[int, typer.Option(metavar="N", help="sampling seed")] = 0,
    operator: Annotated[list[str] | None, typer.Option(
        metavar="OPERATOR", help="only these operators")] = None,
    mutant: Annotated[list[str] | None, typer.Option(
        metavar="ID",
        help="only these mutant ids (e.g. to re-check survivors)")] = None,
    rescore: Annotated[Path | None, typer.Option(
        metavar="DIR",
        help="rewrite the report of this earlier run (runs/oracle-strength/T/run-N) with the "
        "current equivalence marks; grades nothing")] = None,
    # harness.oracle.strength.DEFAULT_WORKERS (imported lazily, like every command's module)
    workers: Annotated[int, typer.Option(
        metavar="N",
        min=1, max=8, help="grader containers grading mutants side by side")] = 2,
    fresh_reference: Annotated[bool, typer.Option(
        help="grade the reference again even when an earlier run graded the same grading "
        "code, image, hidden tree and reference")] = False,
    scope: Annotated[str, typer.Option(
        metavar="SCOPE",
        help="which lines are mutated: the reference's own (diff), the other editable lines "
        "its grade executed (beyond), or both, scored apart")] = "both",
    cold_start: Annotated[bool, typer.Option(
        help="start every candidate process of a mutant's grade as a fresh interpreter "
        "(default: forked from a warm one that imported torch once; grading/warm_start.py)")]
    = False,
    resume: Annotated[bool, typer.Option(
        help="go on with the task's newest run that was stopped: keep each mutant it graded "
        "(bound to the same grading code, image, hidden tree, baseline, reference and "
        "packet), grade the rest of its sample")] = False,
) -> None:
    """Mutation analysis of the hidden checks: mutants of the reference, graded for real."""
    from harness.oracle.strength import (
        SCOPE_CHOICES,
        OracleStrengthOptions,
        oracle_strength,
        resume_oracle_strength,
        stopped_run,
    )
    from harness.oracle.strength import rescore as rescore_report
    from harness.records.tasks import task_paths

    chosen = next((c for c in SCOPE_CHOICES if c == scope), None)
    if chosen is None:
        raise HarnessError(f"--scope {scope!r} is not a scope",
                           f"use one of {', '.join(SCOPE_CHOICES)}")
    sample = {"--limit": limit is not None, "--seed": seed != 0, "--operator": bool(operator),
              "--mutant": bool(mutant), "--scope": scope != "both",
              "--rescore": rescore is not None, "--fresh-reference": fresh_reference,
              "--cold-start": cold_start}
    if resume and any(sample.values()):
        raise HarnessError(f"--resume goes on with the stopped run's own sample and settings: "
                           f"it cannot be combined with "
                           f"{', '.join(k for k, v in sample.items() if v)}",
                           "resume it alone, or start a new run without --resume")
    paths = task_paths(task, packet=packet, hidden=hidden, needs=("reference/solution.patch",))
    options = OracleStrengthOptions(
        task=task, packet_dir=paths.packet, hidden_dir=paths.hidden,
        runs_root=DEFAULT_RUNS / "oracle-strength" / task, report_dir=report_dir,
        limit=limit, seed=seed, operators=set(operator) if operator else None,
        ids=set(mutant) if mutant else None, workers=workers,
        reuse_reference=not fresh_reference, warm_start=not cold_start, scope=chosen)
    if rescore is not None:
        report = rescore_report(task, paths.hidden, rescore, report_dir, log=log)
    elif resume:
        report = resume_oracle_strength(options, stopped_run(options.runs_root), log=log)
    else:
        report = oracle_strength(options, log=log)
    table = Table(title=f"oracle strength: {task}")
    for column in ("scope", "operator", "family", "mutants", "detected", "survived",
                   "equivalent"):
        table.add_column(column)
    for row in report.by_operator:
        table.add_row(row.scope, row.operator, row.family, str(row.mutants), str(row.detected),
                      str(row.survived), str(row.equivalent))
    console.print(table)
    scores = ", ".join(f"{r.scope} {'n/a' if r.score is None else f'{r.score:.1%}'}"
                       for r in report.by_scope) or "n/a"
    console.print(f"score {scores} (goal {report.goal:.0%} in each); {report.survived} unmarked "
                  f"survivor(s); report in {report_dir / (task + '.md')}")


@clear_errors
def validate(
    task: TaskOption,
    packet: Annotated[Path | None, typer.Option(metavar="DIR", help="packet folder")] = None,
    hidden: Annotated[Path | None, typer.Option(metavar="DIR", help="hidden folder")] = None,
    report_dir: Annotated[Path, typer.Option(metavar="DIR", help="where the summary goes")] =
    REPO_ROOT / "reports" / "validation",
    variant: Annotated[list[str] | None, typer.Option(
        metavar="VARIANT",
        help="grade only these variants (e.g. fault:<id>, regression:<id>), keep the others "
        "from the summary")]
    = None,
    resume: Annotated[bool, typer.Option(
        help="go on with the task's newest validation that was stopped: keep each variant "
        "whose grading finished with the same inputs, grade the others")] = False,
) -> None:
    """Gold validation: reference passes, baseline and every fault fail exactly as documented."""
    from harness.oracle.validate import previous_report, validate_task, write_report
    from harness.records.tasks import task_paths

    if resume and variant:
        raise HarnessError("--resume and --variant cannot be combined",
                           "resume the stopped validation first, then grade variants again")
    paths = task_paths(task, packet=packet, hidden=hidden, needs=("validation.yaml",))
    previous = previous_report(report_dir, task) if variant else None
    result = validate_task(task, paths.packet, paths.hidden, DEFAULT_RUNS / "validation",
                           log=log, only=variant, previous=previous, resume=resume)
    table = Table(title=f"gold validation: {task}")
    table.add_column("contract")
    for graded in result.variants:
        table.add_column(graded.variant)
    for contract in result.contracts:
        cells = []
        for graded in result.variants:
            outcome = graded.outcomes.get(contract, "-")
            bad = any(contract in m for m in graded.mismatches)
            cells.append(f"[red]{outcome}![/red]" if bad else outcome)
        table.add_row(contract, *cells)
    console.print(table)
    summary = write_report(result, report_dir)
    for graded in result.variants:
        for mismatch in graded.mismatches:
            err_console.print(mismatch, markup=False, highlight=False)
    console.print(f"validation {'passed' if result.ok else 'FAILED'}; summary in {summary}")
    if not result.ok:
        sys.exit(1)
