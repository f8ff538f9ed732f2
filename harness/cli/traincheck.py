"""Faces of the diagnostic track: the frozen reference, transparency, capabilities,
calibration."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.table import Table

from harness.cli.common import (
    TaskOption,
    clear_errors,
    console,
    log,
)
from harness.errors import HarnessError

app = typer.Typer(no_args_is_help=True,
                  help="TrainCheck's diagnostic capability on a task: the frozen reference, "
                  "transparency, capabilities.")


ConfigOption = Annotated[list[str] | None, typer.Option(
    "--config", metavar="CONFIG", help="CPU configuration (default: all)")]


@app.command("reference")
@clear_errors
def traincheck_reference(task: TaskOption,
                         config: ConfigOption = None,
                         resume_only: Annotated[bool, typer.Option(
                             help="add the resume rules to the frozen invariants, keeping "
                             "them as they are")] = False,
                         selective_only: Annotated[bool, typer.Option(
                             help="apply the policy again to frozen configurations with runs "
                             "collected as the agent's tool collects (selectively), and "
                             "switch them to that collection")] = False) -> None:
    """Learn and freeze the reference invariants and resume rules (once per study build)."""
    from harness.traincheck.reference import build_reference
    from harness.traincheck.track import cpu_configs
    from harness.traincheck.variants import task_files

    manifest = build_reference(task_files(task), cpu_configs(config), resume_only=resume_only,
                               selective_only=selective_only, log=log)
    for name, entry in manifest.configs.items():
        resume = (f"  resume rules kept {entry.resume.n_kept} of {entry.resume.n_learned}"
                  if entry.resume is not None else "")
        console.print(f"{name:<12} learned {entry.n_learned:>5}  dropped {entry.n_dropped:>4}  "
                      f"kept {entry.n_kept:>5}  violated by healthy runs "
                      f"{len(entry.control_violations)}  collection {entry.collection}{resume}")


@app.command("transparency")
@clear_errors
def traincheck_transparency(task: TaskOption,
                            config: ConfigOption = None) -> None:
    """Plain vs traced healthy runs: outputs, state, RNG, exceptions, checkpoint resume."""
    from harness.traincheck.track import cpu_configs
    from harness.traincheck.transparency import (
        PAIR_NAMES,
        report_digest,
        run_transparency,
        status_cell,
    )
    from harness.traincheck.variants import task_files

    files = task_files(task)
    configs = cpu_configs(config)
    command = "harness traincheck transparency --task " + task + "".join(
        f" --config {c}" for c in config or [])
    report = run_transparency(files, configs, command=command, log=log)
    digest = report_digest(report)
    table = Table(title=f"TrainCheck transparency: {task} (vs the plain run)")
    table.add_column("run")
    table.add_column("aspect")
    for name in digest:
        table.add_column(name)
    keys = list(dict.fromkeys(key for rows in digest.values() for key in rows))
    for run, aspect in keys:
        cells = []
        for rows in digest.values():
            row = rows.get((run, aspect))
            cells.append("-" if row is None else status_cell(row).replace("**", ""))
        table.add_row(PAIR_NAMES.get(run, run), aspect, *cells)
    console.print(table)
    for name, cfg in report.configs.items():
        c = cfg.costs
        console.print(f"{name:<12} plain {c.plain_s} s, traced {c.traced_s} s "
                      f"(x{c.traced_over_plain}); container {c.container_s} s")
    deviations = report.deviations
    console.print(f"{len(deviations)} deviation(s); report in "
                  f"{files.reports / 'transparency.md'}")
    if deviations:
        sys.exit(1)


@app.command("capabilities")
@clear_errors
def traincheck_capabilities(
    task: TaskOption,
    config: ConfigOption = None,
    reuse_probe: Annotated[bool, typer.Option(
        help="keep the committed probe results; only redo the contract mapping")] = False,
) -> None:
    """Capability matrix from probe traces, and each contract's TrainCheck support."""
    from harness.traincheck.track import build_capabilities, cpu_configs
    from harness.traincheck.variants import task_files

    files = task_files(task)
    build_capabilities(files, cpu_configs(config), reuse_probe=reuse_probe, log=log)
    log(f"wrote {files.reports / 'capabilities.md'} and .json")


@clear_errors
def calibrate(task: TaskOption,
              config: ConfigOption = None,
              rejudge: Annotated[bool, typer.Option(
                  help="re-derive the verdicts of the committed calibration, run nothing")]
              = False,
              resume_only: Annotated[bool, typer.Option(
                  help="add the resume probe to the committed calibration's rows (after "
                  "`harness traincheck reference --resume-only`)")] = False,
              regressions: Annotated[bool, typer.Option(
                  help="run the oracle's regressions as held-out variants instead of the "
                  "calibration faults (a separate report: heldout-regressions.md)")] = False,
              ) -> None:
    """Calibration: every calibration fault, the oracle's verdict vs TrainCheck's, with costs."""
    from harness.traincheck.track import (
        add_resume_to_calibration,
        cpu_configs,
        rejudge_calibration,
        run_calibration,
        run_heldout_regressions,
    )
    from harness.traincheck.variants import task_files

    if sum((rejudge, resume_only, regressions)) > 1:
        raise HarnessError("--rejudge, --resume-only and --regressions are separate runs",
                           "choose one of them")
    files = task_files(task)
    if regressions:
        report = run_heldout_regressions(files, cpu_configs(config), log=log)
        log(f"wrote {files.reports / 'heldout-regressions.md'} and .json")
        s = report.summary
        console.print(f"regressions detected {s.faults_detected}/{s.faults_confirmed}; false "
                      f"alarms {s.false_alarms}/{s.controls}")
        return
    if rejudge:
        report = rejudge_calibration(files)
    elif resume_only:
        report = add_resume_to_calibration(files, cpu_configs(config), log=log)
    else:
        report = run_calibration(files, cpu_configs(config), log=log)
    log(f"wrote {files.reports / 'calibration.md'} and .json")
    s = report.summary
    console.print(f"faults detected {s.faults_detected}/{s.faults_confirmed}; false alarms "
                  f"{s.false_alarms}/{s.controls}")
