"""Faces of a study: freeze it, then plan, run and watch its matrix."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from harness.cli.common import (
    StudyOption,
    clear_errors,
    console,
    err_console,
    log,
    study_path,
)
from harness.errors import HarnessError

matrix = typer.Typer(no_args_is_help=True,
                     help="Plan, run and watch every session of a frozen study.")


@clear_errors
def freeze_cmd(
    study: StudyOption = None,
    verify: Annotated[bool, typer.Option(
        "--verify", help="recompute every digest and list each item that drifted")] = False,
) -> None:
    """Freeze a study: digests of everything its results rest on, the diagnostic gate's
    decision per task, and the assignment with its launch order (runs/<study>/locks/)."""
    from harness.infra.images import docker_client
    from harness.records.study import load_study
    from harness.study import freeze

    path = study_path(study)
    client = docker_client()
    if verify:
        loaded = load_study(path)
        frozen = freeze.latest_lock(loaded)
        if frozen is None:
            raise HarnessError(f"study {loaded.name} is not frozen",
                               f"run `harness freeze --study {path}` first")
        drifted = freeze.drift(frozen, loaded, path, client)
        if not drifted:
            console.print(f"ok: study {loaded.name} matches its lock, revision "
                          f"{frozen.lock.revision} ({len(frozen.lock.items)} items)")
            return
        table = Table(title=f"{loaded.name}: {len(drifted)} item(s) drifted from revision "
                            f"{frozen.lock.revision}")
        for column in ("item", "source", "locked", "now"):
            table.add_column(column)
        for item in drifted:
            table.add_row(item.name, item.source, item.locked[:16], item.now[:16])
        console.print(table)
        err_console.print(f"error: {len(drifted)} item(s) drifted, first: "
                          f"{drifted[0].line(frozen.lock.revision)} (fix: restore them, or "
                          f"freeze a new revision with `harness freeze --study {path}`)",
                          markup=False, highlight=False, soft_wrap=True)
        sys.exit(1)
    frozen, new = freeze.freeze(path, client)
    lock = frozen.lock
    table = Table(title=f"study {lock.study}, revision {lock.revision}: the diagnostic gate")
    for column in ("task", "rule", "why"):
        table.add_column(column)
    for gate in lock.gate:
        table.add_row(gate.task, gate.rule, gate.detail)
    console.print(table)
    state = "wrote" if new else "unchanged since"
    console.print(f"{state} {frozen.path} ({len(lock.items)} digests, {len(lock.sessions)} "
                  f"sessions; lock sha256 {frozen.sha256[:16]})", markup=False,
                  highlight=False)
    _configurations_here(load_study(path))


def _configurations_here(loaded: Any) -> None:
    """Before any session starts: which declared configurations a grade on this host will
    report as not run, and why (`harness doctor` shows the whole host)."""
    from harness.infra.host import configuration_support, host_facts
    from harness.infra.images import docker_client
    from harness.records.packets import load_packet

    facts = host_facts(docker_client(), runs_root=loaded.runs_root())
    for task in loaded.tasks:
        packet = load_packet(task.packet_dir())
        missing = {c: why for c, why in configuration_support(
            facts, list(packet.spec.configurations)).items() if why is not None}
        if missing:
            log(f"{task.id} on this host: {', '.join(missing)} will be not_run "
                f"({next(iter(missing.values()))}); its grades say complete_on_cpu at best")


def _matrix_table(rows: list[Any], title: str) -> Table:
    table = Table(title=title)
    for column in ("#", "session", "state", "attempt", "outcome", "verdict", "wall s",
                   "tokens", "CPU-h", "GPU-h", "queue s", "job", "note"):
        table.add_column(column, overflow="fold")
    colours = {"finished": "green", "failed": "red", "damaged": "red", "interrupted": "yellow",
               "running": "cyan", "grading": "cyan", "queued": "blue"}

    def num(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    for row in rows:
        colour = colours.get(row.state)
        label = row.session_id + (" (coverage audit)" if row.comparison == "coverage-audit"
                                  else "")
        table.add_row(
            str(row.order), label, f"[{colour}]{row.state}[/{colour}]" if colour else row.state,
            str(row.attempt or "-"), row.outcome or "-", row.verdict or "-", num(row.wall_s, 1),
            "-" if row.tokens is None else str(row.tokens), num(row.cpu_hours, 3),
            num(row.gpu_hours, 3), num(row.queue_s, 1), row.job or "-", row.note[:80])
    return table


@matrix.command("plan")
@clear_errors
def matrix_plan(study: StudyOption = None) -> None:
    """The frozen sessions in launch order, with resources and budgets, and the caps."""
    from harness.infra.images import docker_client
    from harness.records.study import load_study
    from harness.study import freeze
    from harness.study.matrix.slots import host_cores, local_slots, worst_case

    path = study_path(study)
    loaded = load_study(path)
    frozen = freeze.require_lock(loaded, path, docker_client())
    lock = frozen.lock
    table = Table(title=f"study {lock.study}, revision {lock.revision} (lock "
                        f"{frozen.sha256[:16]}): {len(lock.sessions)} sessions in launch order")
    for column in ("#", "session", "pair", "arm", "seed", "CPUs", "GPUs", "wall s",
                   "tokens", "tool calls", "runs", "max CPU-h", "max GPU-h"):
        table.add_column(column, overflow="fold")
    total_cpu = total_gpu = 0.0
    covered = 0
    for s in lock.sessions:
        cpu, gpu = worst_case(s)
        total_cpu, total_gpu = total_cpu + cpu, total_gpu + gpu
        if ((lock.caps.cpu_hours is None or total_cpu <= lock.caps.cpu_hours + 1e-9)
                and (lock.caps.gpu_hours is None or total_gpu <= lock.caps.gpu_hours + 1e-9)):
            covered += 1
        b = s.budget
        table.add_row(str(s.order), s.session_id, str(s.pair), s.arm, str(s.seed),
                      f"{s.cpus:g}", str(s.gpus), f"{b.wall_seconds:g}",
                      "-" if b.tokens_total is None else str(b.tokens_total),
                      "-" if b.tool_calls is None else str(b.tool_calls),
                      "-" if b.candidate_runs is None else str(b.candidate_runs),
                      f"{cpu:.2f}", f"{gpu:.2f}")
    console.print(table)
    for model in sorted({s.model for s in lock.sessions}):
        console.print(f"model: {model}", markup=False, highlight=False)
    for gate in lock.gate:
        console.print(f"{gate.task}: {gate.rule} ({gate.detail})", markup=False,
                      highlight=False)

    def cap(value: float | None) -> str:
        return "none" if value is None else f"{value:g}"

    slots, over = local_slots(lock.sessions, None, False)
    console.print(f"study caps: CPU-hours {cap(lock.caps.cpu_hours)}, GPU-hours "
                  f"{cap(lock.caps.gpu_hours)}; at their full budgets the sessions may use "
                  f"{total_cpu:.2f} CPU-h and {total_gpu:.2f} GPU-h, and the caps cover the "
                  f"first {covered} of {len(lock.sessions)}", markup=False, highlight=False)
    console.print(f"infrastructure failures retried up to {lock.max_attempts} attempts; local "
                  f"slots on this host: {slots} ({host_cores()} cores"
                  f"{', oversubscribed' if over else ''})", markup=False, highlight=False)
    _configurations_here(loaded)


@matrix.command("run")
@clear_errors
def matrix_run(
    study: StudyOption = None,
    executor: Annotated[str, typer.Option(
        metavar="local|slurm", help="where sessions run")] = "local",
    parallel: Annotated[int | None, typer.Option(
        metavar="N",
        help="session slots (default: host cores / CPUs per session, and GPUs / GPUs per "
             "session; on Slurm: no limit)", show_default=False)] = None,
    graders: Annotated[int, typer.Option(metavar="N", help="gradings at once beside the sessions "
                                              "(local)")] = 1,
    oversubscribe: Annotated[bool, typer.Option(
        help="allow --parallel to promise more CPUs than the host has (demos only)")] = False,
    detach: Annotated[bool, typer.Option(help="Slurm: submit and return")] = False,
    slurm_arg: Annotated[list[str] | None, typer.Option(
        metavar="ARG",
        help="extra sbatch argument, e.g. --slurm-arg=--partition=gpu (repeatable)")] = None,
) -> None:
    """Launch every session not yet finished, each graded as soon as it ends; resumable."""
    from rich.console import Group
    from rich.live import Live
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from harness.study.matrix.run import RunOptions, run_matrix

    if executor not in ("local", "slurm"):
        raise HarnessError(f"unknown executor {executor!r}", "use --executor local or slurm")
    options = RunOptions(study_path=study_path(study), executor=executor,  # type: ignore[arg-type]
                         parallel=parallel, graders=graders, oversubscribe=oversubscribe,
                         detach=detach, slurm_args=slurm_arg or [])
    if parallel is not None and parallel < 1:
        raise HarnessError("--parallel must be at least 1", "pass --parallel 1 or more")
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    bar = progress.add_task("finished", total=None)
    live = Live(console=console, refresh_per_second=4) if console.is_terminal else None

    def display(rows: list[Any], summary: str) -> None:
        if live is None:
            return
        done = sum(r.state == "finished" for r in rows)
        progress.update(bar, total=len(rows), completed=done, description=summary)
        live.update(Group(_matrix_table(rows, "matrix"), progress))

    with live if live is not None else contextlib.nullcontext():
        result = run_matrix(options, log=log if live is None else
                            lambda m: live.console.print(m, markup=False, highlight=False),
                            display=display)
    if live is None:
        console.print(_matrix_table(result.rows, "matrix"))
    counts: dict[str, int] = {}
    for row in result.rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    console.print(f"matrix: launched {result.launched} session(s); "
                  + ", ".join(f"{n} {k}" for k, n in counts.items()), markup=False,
                  highlight=False)
    if result.stop:
        stop = result.stop if result.stop.startswith("error:") else f"stopped: {result.stop}"
        err_console.print(stop, markup=False, highlight=False, soft_wrap=True)
    if not result.complete and not detach:
        sys.exit(1)


@matrix.command("status")
@clear_errors
def matrix_status(
    study: StudyOption = None,
    watch: Annotated[bool, typer.Option(help="refresh until Ctrl-C")] = False,
    every: Annotated[float, typer.Option(min=0.2, metavar="SECONDS",
                                         help="seconds between refreshes")] = 2.0,
) -> None:
    """Each session's state, attempt, outcome, verdict, usage and queue time."""
    import time

    from rich.live import Live

    from harness.infra.images import docker_client
    from harness.records.study import load_study
    from harness.study import freeze
    from harness.study.matrix.rows import status_rows

    path = study_path(study)
    loaded = load_study(path)
    frozen = freeze.latest_lock(loaded)
    if frozen is None:
        raise HarnessError(f"study {loaded.name} is not frozen",
                           f"run `harness freeze --study {path}` first")
    # Status still shows what was recorded when the study drifted, and says so plainly.
    drifted = freeze.drift(frozen, loaded, path, docker_client())

    def render() -> Table:
        rows, _state = status_rows(loaded, frozen)
        done = sum(r.state == "finished" for r in rows)
        return _matrix_table(rows, f"study {loaded.name}, revision {frozen.lock.revision}: "
                                   f"{done}/{len(rows)} finished")

    if watch:
        with Live(render(), console=console, refresh_per_second=1) as live:
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(every)
                    live.update(render())
    else:
        console.print(render())
    if drifted:
        err_console.print(f"error: study {loaded.name} drifted from its lock: "
                          f"{drifted[0].line(frozen.lock.revision)} (fix: restore it, or "
                          f"freeze a new revision; `harness freeze --verify` lists all)",
                          markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)


@matrix.command("worker", hidden=True)
@clear_errors
def matrix_worker(
    study: Annotated[Path, typer.Option()],
    session: Annotated[str | None, typer.Option()] = None,
    grade_attempt: Annotated[Path | None, typer.Option()] = None,
    grade: Annotated[bool, typer.Option()] = True,
) -> None:
    """One job of a matrix run (started by `matrix run`, locally or as a Slurm job)."""
    from harness.study.matrix.worker import run_worker

    if (session is None) == (grade_attempt is None):
        raise HarnessError("a worker runs either --session or --grade-attempt",
                           "workers are started by `harness matrix run`")
    run_worker(study, session_id=session, grade_dir=grade_attempt, grade=grade, log=log)
