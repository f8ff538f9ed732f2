"""Faces of one session: run it, grade it, clean up after a killed harness, the demo."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from harness.cli.common import (
    DEFAULT_RUNS,
    AttemptArgument,
    RunsOption,
    StudyOption,
    clear_errors,
    console,
    log,
    study_path,
)

if TYPE_CHECKING:  # the face imports the library only when a command runs
    from harness.study.progress import SessionProgress


@clear_errors
def session(
    pair: Annotated[int, typer.Option(metavar="N", help="pair number (1..pairs in the study)")],
    arm: Annotated[str, typer.Option(metavar="ARM", help="control or treatment")],
    study: StudyOption = None,
    model: Annotated[str | None, typer.Option(
        metavar="PROVIDER:NAME", help="another model; the session is then outside the study")]
    = None,
    grade: Annotated[bool, typer.Option(help="grade the diff when the session ends")] = True,
    scratch: Annotated[bool, typer.Option(
        "--scratch", help="run the same session outside the study, for trying things: its own "
        "runs folder (runs/scratch/<study>/), never counted")] = False,
    gpus: Annotated[int | None, typer.Option(
        min=0, metavar="N", help="GPUs to allocate exclusively (default: what the study "
        "promises; another number puts the session outside the frozen study)",
        show_default=False)] = None,
) -> None:
    """Run one agent session end to end: container, agent, transcript, diff, grade.

    Without --study: the default study, $HARNESS_STUDY if set, else the pilot.

    On a frozen study this is the study's own session: it says so first, and its outcome is
    final. A frozen study that drifted from its lock is refused; a session on a study never
    frozen, with --model or --gpus, or with --scratch, is recorded as outside the study.
    """
    from harness.study.progress import SessionProgress
    from harness.study.session import SessionOptions, run_session

    options = SessionOptions(study_path=study_path(study), pair=pair, arm=arm, model=model,
                             grade=grade, gpus=gpus, scratch=scratch)
    progress = SessionProgress()
    with progress_shown(progress) as say:
        attempt = run_session(options, log=say, progress=progress)
    print_sessions([attempt])


@contextlib.contextmanager
def progress_shown(progress: SessionProgress) -> Iterator[Callable[[str], None]]:
    """Show ``progress.line()`` while the block runs: a live line on a terminal, a plain line
    a minute otherwise (logs, CI). Yields the function that prints other messages."""
    if console.is_terminal:
        from rich.live import Live
        from rich.text import Text

        class Line:
            def __rich__(self) -> Text:
                return Text(progress.line())

        with Live(Line(), console=console, refresh_per_second=2, transient=True) as live:
            yield lambda message: live.console.print(message, markup=False, highlight=False)
        return
    done = threading.Event()

    def every_minute() -> None:
        while not done.wait(60):
            log(progress.line())

    ticker = threading.Thread(target=every_minute, name="progress", daemon=True)
    ticker.start()
    try:
        yield log
    finally:
        done.set()
        ticker.join(5)


@clear_errors
def grade_cmd(
    session_ref: AttemptArgument,
    runs: RunsOption = DEFAULT_RUNS,
    snapshots: Annotated[bool, typer.Option(
        "--snapshots", help="grade every trajectory snapshot instead (blind, each in a fresh "
        "grader container) into grades/snapshots.json")] = False,
    reuse: Annotated[bool, typer.Option(
        "--reuse/--no-reuse", help="--snapshots: copy a grading of exactly the same inputs "
        "(grader image and code, task, packet.yaml, baseline, hidden tree, diff) that another "
        "verified attempt of the study holds, instead of grading them again")] = True,
) -> None:
    """Grade a session's diff in a fresh grader container (re-grading adds a new folder)."""
    from harness.infra.images import docker_client
    from harness.oracle.grade import GRADER_ERROR, grade_attempt, grade_snapshots
    from harness.records.attempt import resolve_attempt
    from harness.records.verify import require_verified
    from harness.study.freeze import check_attempt

    attempt = resolve_attempt(session_ref, runs)
    # First of all: an attempt whose files changed is refused by name, before its record is
    # trusted for the lock check below (grading verifies again: it may be called alone).
    require_verified(attempt)
    client = docker_client()
    check_attempt(attempt, client)  # a study session: refused when its lock drifted
    if snapshots:
        graded = grade_snapshots(attempt, client=client, log=log, reuse_gradings=reuse)
        table = Table(title=f"snapshots of {attempt}")
        for column in ("snapshot", "trigger", "verdict", "failing contracts", "graded in"):
            table.add_column(column)
        for snap in graded.snapshots:
            failing = [c for c, o in snap.contracts.items() if o != "pass"]
            # Contract ids can hold brackets (pytest parameters): plain text, not markup.
            table.add_row(str(snap.index), snap.trigger, escape(snap.verdict),
                          escape(", ".join(failing) or snap.reason or "-"),
                          escape(f"copy of {snap.reused_from}" if snap.reused_from
                                 else snap.folder))
        console.print(table)
        if any(s.verdict == GRADER_ERROR for s in graded.snapshots):
            raise typer.Exit(1)
        return
    summary = grade_attempt(attempt, client=client, log=log)
    print_sessions([attempt])
    if summary.verdict == GRADER_ERROR:
        raise typer.Exit(1)


@clear_errors
def cleanup(
    runs: RunsOption = DEFAULT_RUNS,
    all_: Annotated[bool, typer.Option("--all", help="also remove live sessions' containers")]
    = False,
    study: Annotated[Path | None, typer.Option(
        metavar="FILE", help="only this study's containers and sessions (its study file; "
        "default: every study's)", show_default=False)] = None,
) -> None:
    """Remove containers and volumes left by dead harness processes; mark their sessions."""
    from harness.agent.gateway.server import remove_orphan_socket_dirs
    from harness.infra.images import docker_client
    from harness.infra.job_cgroups import remove_orphans as remove_orphan_job_cgroups
    from harness.infra.sandbox import cleanup_orphans
    from harness.records.study import load_study
    from harness.study.matrix.state import record_alive
    from harness.study.session import mark_interrupted

    loaded = load_study(study) if study is not None else None  # a bad path stops here
    labels = {"org.harness.study": loaded.name} if loaded else None
    client = docker_client()
    report = cleanup_orphans(client, include_live=all_, labels=labels)
    marked = mark_interrupted(runs, study_root=loaded.runs_root() if loaded else None,
                              alive=record_alive)
    sockets = remove_orphan_socket_dirs()  # a CLI session's gateway folder, left by a kill
    cgroups = remove_orphan_job_cgroups(client)  # a grader container's, left by a kill
    console.print(f"removed {len(report.containers)} container(s), {len(report.volumes)} "
                  f"volume(s), {len(sockets)} gateway folder(s), {len(cgroups)} job cgroup "
                  f"folder(s); marked {len(marked)} session(s) interrupted")
    for name in report.containers:
        console.print(f"  container {name}")
    for path in marked:
        console.print(f"  interrupted {path}")


@clear_errors
def demo(
    study: Annotated[Path, typer.Option(metavar="FILE", help="study file")]
    = Path("studies/demo.yaml"),
) -> None:
    """The main job: build images, run the demo study's first session, grade it, print a table."""
    from harness.infra.images import build_images
    from harness.study.session import SessionOptions, run_session

    build_images(log=log)
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control"), log=log)
    print_sessions([attempt])


def print_sessions(attempts: list[Path]) -> None:
    from harness.records.attempt import read_grades, read_record

    table = Table(title="sessions")
    for column in ("session", "attempt", "outcome", "files changed", "verdict", "contracts",
                   "wall s", "tool calls", "tokens", "image"):
        table.add_column(column)
    for attempt in attempts:
        rec = read_record(attempt)
        grades = read_grades(attempt, rec)
        grade = grades[-1] if grades else None
        table.add_row(
            rec.session_id, str(rec.attempt), rec.outcome or "-",
            str(len(rec.diff.files_changed)) if rec.diff else "-",
            grade.shown() if grade else "not graded",
            ", ".join(f"{k} {v}" for k, v in grade.counts.items() if v) if grade else "-",
            f"{rec.usage.wall_seconds:.1f}" if rec.usage else "-",
            str(rec.usage.tool_calls) if rec.usage else "-",
            str(rec.usage.tokens_total) if rec.usage else "-",
            rec.image_id[7:19],
        )
    console.print(table)
    for attempt in attempts:
        console.print(f"artifacts: {attempt}")
