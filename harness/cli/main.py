"""The ``harness`` command line. Each command is a thin call into one module."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.errors import HarnessError, Interrupted, signals_as_interrupt
from harness.paths import REPO_ROOT

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Run, grade and audit agent sessions on PyTorch training tasks.")
images_app = typer.Typer(no_args_is_help=True, help="Build and inspect the harness images.")
app.add_typer(images_app, name="images")
traincheck_app = typer.Typer(no_args_is_help=True,
                             help="TrainCheck's diagnostic capability on a task (issue 6).")
app.add_typer(traincheck_app, name="traincheck")
matrix_app = typer.Typer(no_args_is_help=True,
                         help="Plan, run and watch every session of a frozen study.")
app.add_typer(matrix_app, name="matrix")
# Logs and CI are not terminals: give tables room instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 150)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 300)

DEFAULT_RUNS = REPO_ROOT / "runs"
# The default study is set in harness/records/study.py (DEFAULT_STUDY, STUDY_ENV); every command
# that takes --study resolves it at run time, so HARNESS_STUDY set later is honoured.
STUDY_HELP = "study file (default: $HARNESS_STUDY, else studies/pilot.yaml, the pilot)"
StudyOption = Annotated[Path | None, typer.Option(help=STUDY_HELP, show_default=False)]


def _study(study: Path | None) -> Path:
    from harness.records.study import default_study_path

    return study if study is not None else default_study_path()


def clear_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a HarnessError into one line on stderr and exit code 2, and a stopping signal
    into one line and exit code 128 + its number (cleanup has run by then)."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            # SIGTERM/SIGHUP stop every command like Ctrl-C: the containers it holds are
            # removed on the way out (a killed `oracle-strength` once left its grader up).
            with signals_as_interrupt():
                return func(*args, **kwargs)
        except HarnessError as exc:
            err_console.print(exc.line(), markup=False, highlight=False, soft_wrap=True)
            sys.exit(2)
        except (Interrupted, KeyboardInterrupt) as exc:
            stop = exc if isinstance(exc, Interrupted) else Interrupted(signal.SIGINT)
            err_console.print(stop.line(), markup=False, highlight=False, soft_wrap=True)
            sys.exit(128 + stop.signum)

    return wrapper


def _log(message: str) -> None:
    console.print(message, markup=False, highlight=False)


@images_app.command("build")
@clear_errors
def images_build(
    names: Annotated[list[str] | None, typer.Argument(help="images (default: all)")] = None,
    torch: Annotated[str | None, typer.Option(help="torch pin, e.g. torch==2.13.0")] = None,
    force: Annotated[bool, typer.Option(help="rebuild even if inputs did not change")] = False,
) -> None:
    """Build the rootfs, base, control, treatment and grader images (offline)."""
    from harness.infra.images import build_images

    report = build_images(names or None, torch_spec=torch, force=force, log=_log)
    for name, image in report.image_ids.items():
        state = "built" if name in report.built else "up to date"
        console.print(f"{name:<10} {image[:19]}  {state}")


@app.command()
@clear_errors
def session(
    pair: Annotated[int, typer.Option(help="pair number (1..pairs in the study)")],
    arm: Annotated[str, typer.Option(help="control or treatment")],
    study: StudyOption = None,
    model: Annotated[str | None, typer.Option(help="PROVIDER:NAME; outside the study")] = None,
    grade: Annotated[bool, typer.Option(help="grade the diff when the session ends")] = True,
    gpus: Annotated[int | None, typer.Option(
        help="GPUs to allocate exclusively (default: what the study promises; another number "
             "puts the session outside the frozen study)", show_default=False)] = None,
) -> None:
    """Run one agent session end to end: container, agent, transcript, diff, grade.

    Without --study: the default study, $HARNESS_STUDY if set, else the pilot.

    A frozen study that drifted from its lock is refused; a session on a study never frozen,
    or with --model, is recorded as outside the frozen study.
    """
    from harness.study.session import SessionOptions, run_session

    attempt = run_session(SessionOptions(study_path=_study(study), pair=pair, arm=arm,
                                         model=model, grade=grade, gpus=gpus), log=_log)
    _print_sessions([attempt])


@app.command("grade")
@clear_errors
def grade_cmd(
    session_ref: Annotated[str, typer.Argument(metavar="SESSION",
                                               help="attempt folder or STUDY/SESSION")],
    runs: Annotated[Path, typer.Option(help="runs folder")] = DEFAULT_RUNS,
    snapshots: Annotated[bool, typer.Option(
        "--snapshots", help="grade every trajectory snapshot instead (blind, each in a fresh "
        "grader container) into grades/snapshots.json")] = False,
) -> None:
    """Grade a session's diff in a fresh grader container (re-grading adds a new folder)."""
    from harness.infra.images import docker_client
    from harness.oracle.grade import GRADER_ERROR, grade_attempt, grade_snapshots
    from harness.records.attempt import resolve_attempt
    from harness.study.freeze import check_attempt

    attempt = resolve_attempt(session_ref, runs)
    client = docker_client()
    check_attempt(attempt, client)  # a study session: refused when its lock drifted
    if snapshots:
        graded = grade_snapshots(attempt, client=client, log=_log)
        table = Table(title=f"snapshots of {attempt}")
        for column in ("snapshot", "trigger", "verdict", "failing contracts"):
            table.add_column(column)
        for snap in graded.snapshots:
            failing = [c for c, o in snap.contracts.items() if o != "pass"]
            # Contract ids can hold brackets (pytest parameters): plain text, not markup.
            table.add_row(str(snap.index), snap.trigger, escape(snap.verdict),
                          escape(", ".join(failing) or snap.reason or "-"))
        console.print(table)
        if any(s.verdict == GRADER_ERROR for s in graded.snapshots):
            raise typer.Exit(1)
        return
    summary = grade_attempt(attempt, client=client, log=_log)
    _print_sessions([attempt])
    if summary.verdict == GRADER_ERROR:
        raise typer.Exit(1)


@app.command()
@clear_errors
def verify(
    target: Annotated[Path, typer.Argument(help="transcript.jsonl or an attempt folder")],
) -> None:
    """Verify a transcript's hash chain and blobs, and its end against the one its session
    recorded; exit 1 naming the first problem."""
    from harness.records.verify import verify_attempt

    verdict = verify_attempt(target)
    if verdict.ok:
        notes = f" ({'; '.join(verdict.notes)})" if verdict.notes else ""
        console.print(f"ok: {verdict.events} events verified{notes}", markup=False,
                      highlight=False)
        return
    err_console.print(f"FAILED after {verdict.events} good events: {verdict.error}",
                      markup=False, highlight=False)
    sys.exit(1)


@app.command()
@clear_errors
def replay(
    attempt: Annotated[str | None, typer.Argument(
        metavar="ATTEMPT", help="attempt folder, its transcript.jsonl, or STUDY/SESSION (the "
        "latest attempt)", show_default=False)] = None,
    kind: Annotated[list[str] | None, typer.Option(
        "--kind", help="only events of this kind (repeatable)")] = None,
    tool: Annotated[list[str] | None, typer.Option(
        "--tool", help="only calls and results of this tool (repeatable)")] = None,
    grep: Annotated[str | None, typer.Option(
        help="only events whose text holds TEXT (case-insensitive; blobs searched too)")]
    = None,
    html: Annotated[Path | None, typer.Option(
        help="also write a self-contained HTML viewer of the whole attempt to this file")]
    = None,
    html_index: Annotated[Path | None, typer.Option(
        help="instead of one attempt: a viewer for every attempt of --study and an "
             "index.html linking them, in this folder")] = None,
    reexecute: Annotated[bool, typer.Option(
        "--reexecute", help="run the recorded tool calls again in a fresh container of the "
        "recorded image on the recorded baseline, compare every result and the final diff; "
        "exit 1 listing every divergence")] = False,
    study: StudyOption = None,
    runs: Annotated[Path, typer.Option(help="runs folder (for STUDY/SESSION)")] = DEFAULT_RUNS,
) -> None:
    """Verify an attempt's transcript, then print its timeline; exit 1 when it is broken.

    A broken chain is shown where it breaks, and every event from there on is marked
    UNVERIFIED; a damaged line is always shown, whatever the filters.
    """
    from rich.text import Text

    from harness.audit import replay as rp
    from harness.audit import viewer
    if html_index is not None:
        if attempt is not None:
            raise HarnessError("--html-index takes a study, not an ATTEMPT",
                               "drop ATTEMPT, or use --html FILE for one attempt")
        from harness.records.study import launch_order, load_study

        loaded = load_study(_study(study))
        order = [a.session_id for a in launch_order(loaded)]
        index, rows = viewer.write_index(loaded.name, loaded.runs_root(), order, html_index)
        broken = [row for row in rows if not row.ok]
        console.print(f"wrote {index} ({len(rows)} rows, {len(broken)} broken transcript(s))",
                      markup=False, highlight=False)
        if broken:
            sys.exit(1)
        return
    if attempt is None:
        raise HarnessError("no ATTEMPT given", "pass an attempt folder, or --html-index DIR")
    from harness.records.attempt import resolve_attempt

    target = Path(attempt)
    if not (target.is_file() or (target / "transcript.jsonl").is_file()):
        target = resolve_attempt(attempt, runs)
    loaded_replay = rp.load(target)
    if reexecute:
        from harness.audit.reexecute import reexecute as run_again
        from harness.audit.reexecute import report_lines

        def inert(message: str) -> None:
            console.print(Text(rp.inert_block(message)), soft_wrap=True)

        inert(loaded_replay.verification.line())
        report = run_again(loaded_replay.attempt_dir, loaded=loaded_replay, log=inert)
        for line in report_lines(report):
            inert(line)
        if not report.reproduced:
            sys.exit(1)
        return
    filters = rp.Filters(kinds=kind or [], tools=tool or [], grep=grep)
    rp.print_timeline(loaded_replay, rp.select(loaded_replay, filters), console,
                      filters=filters)
    if html is not None:
        viewer.write(loaded_replay, html)
        console.print(f"wrote {html}", markup=False, highlight=False)
    if not loaded_replay.verification.ok:
        sys.exit(1)


@app.command()
@clear_errors
def audit(
    session_ref: Annotated[str, typer.Argument(metavar="ATTEMPT",
                                               help="attempt folder or STUDY/SESSION")],
    propose: Annotated[bool, typer.Option(
        "--propose", help="verify the transcript, propose the evidence chains and write them "
        "to audit/chains.json")] = False,
    judge: Annotated[str | None, typer.Option(
        "--judge", metavar="CHAIN", help="record a judgement of this chain")] = None,
    category: Annotated[str | None, typer.Option(
        help="with --judge: helped, no_defect_present, no_applicable_rule, tool_not_used, "
        "diagnostic_ignored or diagnostic_misleading")] = None,
    auditor: Annotated[str | None, typer.Option(help="with --judge: who judges")] = None,
    note: Annotated[str, typer.Option(help="with --judge: why, in a few words")] = "",
    show: Annotated[bool, typer.Option(
        "--show", help="the judgements recorded, their chain verified")] = False,
    runs: Annotated[Path, typer.Option(help="runs folder")] = DEFAULT_RUNS,
) -> None:
    """Evidence chains: observation -> the agent's messages and edits -> snapshot grades before
    and after, and auditors' judgements of them (append-only, bound to the transcript)."""
    from rich.text import Text

    from grading.hashing import file_sha256
    from harness.audit import evidence
    from harness.records import chains
    from harness.records.attempt import resolve_attempt

    if [propose, judge is not None, show].count(True) != 1:
        raise HarnessError("say what to do: one of --propose, --judge CHAIN or --show",
                           "see `harness audit --help`")
    attempt = resolve_attempt(session_ref, runs)
    if propose:
        proposal = evidence.propose(attempt)
        table = Table(title=f"evidence chains of {proposal.session_id} attempt "
                            f"{proposal.attempt} ({proposal.arm})", show_lines=True)
        columns = ("chain", "observation", "response", "next run", "before", "after",
                   "improved", "regressed")
        for column in columns:
            table.add_column(column, overflow="fold")
        for chain in proposal.chains:
            cells = evidence.describe(chain)
            # Transcript text: a Text is never read as markup, and inert() shows escapes.
            table.add_row(*(Text(evidence.inert(cells[c])) for c in columns))
        if proposal.chains:
            console.print(table)
        else:
            _log("no chain: no diagnostic report and no failed run of the agent's own")
        graded = ("snapshot grades " + proposal.snapshot_grades_sha256[:16]
                  if proposal.snapshot_grades_sha256 else
                  "snapshots not graded (harness grade ATTEMPT --snapshots)")
        _log(f"{len(proposal.chains)} chain(s), bound to transcript sha256 "
             f"{proposal.transcript_sha256[:16]}... ({graded}); wrote "
             f"{attempt / chains.CHAINS_NAME}")
        return
    if judge is not None:
        if category is None or auditor is None:
            raise HarnessError("--judge needs --category and --auditor",
                               f"categories: {', '.join(chains.CATEGORIES)}")
        evidence.judge(attempt, judge, category, auditor, note)
        _log(evidence.inert(f"recorded: chain {judge} {category} by {auditor} in "
                            f"{attempt / chains.JUDGEMENTS_NAME}"))
        return
    recorded = evidence.read_judgements(attempt)
    current = evidence.transcript_sha256(attempt)
    chains_path = attempt / chains.CHAINS_NAME
    proposal_now = file_sha256(chains_path) if chains_path.is_file() else None
    table = Table(title=f"judgements of {attempt} (chain verified)")
    for column in ("#", "at", "chain", "category", "auditor", "note", "transcript",
                   "proposal"):
        table.add_column(column, overflow="fold")
    for entry in recorded:
        j = entry.judgement
        table.add_row(*(Text(evidence.inert(cell)) for cell in (
            str(entry.seq), j.at, j.chain, j.category, j.auditor, j.note or "-",
            "this one" if j.transcript_sha256 == current else "ANOTHER",
            "current" if j.chains_sha256 == proposal_now else "an earlier one")))
    console.print(table)
    _log(f"{len(recorded)} judgement(s); transcript sha256 {current[:16]}...")
    if any(e.judgement.transcript_sha256 != current for e in recorded):
        err_console.print("error: some judgements were made on another transcript than the one "
                          "in this folder now (fix: find out why it changed)", markup=False,
                          highlight=False, soft_wrap=True)
        sys.exit(1)


@app.command()
@clear_errors
def cleanup(
    runs: Annotated[Path, typer.Option(help="runs folder")] = DEFAULT_RUNS,
    all_: Annotated[bool, typer.Option("--all", help="also remove live sessions' containers")]
    = False,
    study: Annotated[str | None, typer.Option(
        help="only this study's containers and sessions (its name)")] = None,
) -> None:
    """Remove containers and volumes left by dead harness processes; mark their sessions."""
    from harness.infra.images import docker_client
    from harness.infra.sandbox import cleanup_orphans
    from harness.study.matrix import record_alive
    from harness.study.session import mark_interrupted

    labels = {"org.harness.study": study} if study else None
    report = cleanup_orphans(docker_client(), include_live=all_, labels=labels)
    marked = mark_interrupted(runs, study_root=runs / study if study else None,
                              alive=record_alive)
    console.print(f"removed {len(report.containers)} container(s), {len(report.volumes)} "
                  f"volume(s); marked {len(marked)} session(s) interrupted")
    for name in report.containers:
        console.print(f"  container {name}")
    for path in marked:
        console.print(f"  interrupted {path}")


@app.command("freeze")
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

    path = _study(study)
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


def _matrix_table(rows: list[Any], title: str) -> Table:
    table = Table(title=title)
    for column in ("#", "session", "state", "attempt", "outcome", "verdict", "wall s",
                   "tokens", "CPU-h", "GPU-h", "queue s", "job", "note"):
        table.add_column(column, overflow="fold")
    colours = {"finished": "green", "failed": "red", "interrupted": "yellow",
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


@matrix_app.command("plan")
@clear_errors
def matrix_plan(study: StudyOption = None) -> None:
    """The frozen sessions in launch order, with resources and budgets, and the caps."""
    from harness.infra.images import docker_client
    from harness.records.study import load_study
    from harness.study import freeze
    from harness.study.matrix import host_cores, local_slots, worst_case

    path = _study(study)
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


@matrix_app.command("run")
@clear_errors
def matrix_run(
    study: StudyOption = None,
    executor: Annotated[str, typer.Option(help="local or slurm")] = "local",
    parallel: Annotated[int | None, typer.Option(
        help="session slots (default: host cores / CPUs per session, and GPUs / GPUs per "
             "session; on Slurm: no limit)", show_default=False)] = None,
    graders: Annotated[int, typer.Option(help="gradings at once beside the sessions "
                                              "(local)")] = 1,
    oversubscribe: Annotated[bool, typer.Option(
        help="allow --parallel to promise more CPUs than the host has (demos only)")] = False,
    detach: Annotated[bool, typer.Option(help="Slurm: submit and return")] = False,
    slurm_arg: Annotated[list[str] | None, typer.Option(
        help="extra sbatch argument, e.g. --slurm-arg=--partition=gpu (repeatable)")] = None,
) -> None:
    """Launch every session not yet finished, each graded as soon as it ends; resumable."""
    from rich.console import Group
    from rich.live import Live
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from harness.study.matrix import RunOptions, run_matrix

    if executor not in ("local", "slurm"):
        raise HarnessError(f"unknown executor {executor!r}", "use --executor local or slurm")
    options = RunOptions(study_path=_study(study), executor=executor,  # type: ignore[arg-type]
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
        result = run_matrix(options, log=_log if live is None else
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


@matrix_app.command("status")
@clear_errors
def matrix_status(
    study: StudyOption = None,
    watch: Annotated[bool, typer.Option(help="refresh until Ctrl-C")] = False,
    every: Annotated[float, typer.Option(help="seconds between refreshes")] = 2.0,
) -> None:
    """Each session's state, attempt, outcome, verdict, usage and queue time."""
    import time

    from rich.live import Live

    from harness.infra.images import docker_client
    from harness.records.study import load_study
    from harness.study import freeze
    from harness.study.matrix import status_rows

    path = _study(study)
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


@matrix_app.command("worker", hidden=True)
@clear_errors
def matrix_worker(
    study: Annotated[Path, typer.Option()],
    session: Annotated[str | None, typer.Option()] = None,
    grade_attempt: Annotated[Path | None, typer.Option()] = None,
    grade: Annotated[bool, typer.Option()] = True,
) -> None:
    """One job of a matrix run (started by `matrix run`, locally or as a Slurm job)."""
    from harness.study.matrix import run_worker

    if (session is None) == (grade_attempt is None):
        raise HarnessError("a worker runs either --session or --grade-attempt",
                           "workers are started by `harness matrix run`")
    run_worker(study, session_id=session, grade_dir=grade_attempt, grade=grade, log=_log)


ConfigOption = Annotated[list[str] | None,
                        typer.Option("--config", help="CPU configuration (default: all)")]


def _cpu_configs(configs: list[str] | None) -> list[str]:
    from harness.traincheck.reference import CPU_CONFIGURATIONS

    chosen = configs or list(CPU_CONFIGURATIONS)
    for config in chosen:
        if config not in CPU_CONFIGURATIONS:
            raise HarnessError(f"unknown CPU configuration {config!r}",
                               f"use one of {', '.join(CPU_CONFIGURATIONS)}")
    return chosen


@traincheck_app.command("reference")
@clear_errors
def traincheck_reference(task: Annotated[str, typer.Option(help="task id")],
                         config: ConfigOption = None) -> None:
    """Learn and freeze the reference invariants (once per study build)."""
    from harness.traincheck.reference import build_reference
    from harness.traincheck.variants import task_files

    manifest = build_reference(task_files(task), _cpu_configs(config), log=_log)
    for name, entry in manifest.configs.items():
        console.print(f"{name:<12} learned {entry.n_learned:>5}  dropped {entry.n_dropped:>4}  "
                      f"kept {entry.n_kept:>5}  control violations "
                      f"{len(entry.control_violations)}")


@traincheck_app.command("transparency")
@clear_errors
def traincheck_transparency(task: Annotated[str, typer.Option(help="task id")],
                            config: ConfigOption = None) -> None:
    """Plain vs traced healthy runs: outputs, state, RNG, exceptions, checkpoint resume."""
    from harness.traincheck.transparency import (
        PAIR_NAMES,
        report_digest,
        run_transparency,
        status_cell,
    )
    from harness.traincheck.variants import task_files

    files = task_files(task)
    configs = _cpu_configs(config)
    command = "harness traincheck transparency --task " + task + "".join(
        f" --config {c}" for c in config or [])
    report = run_transparency(files, configs, command=command, log=_log)
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


def _write_report(folder: Path, stem: str, model: Any, markdown: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(model.model_dump_json(indent=1) + "\n")
    (folder / f"{stem}.md").write_text(markdown)
    console.print(f"wrote {folder / (stem + '.md')} and .json")


@traincheck_app.command("capabilities")
@clear_errors
def traincheck_capabilities(
    task: Annotated[str, typer.Option(help="task id")],
    config: ConfigOption = None,
    reuse_probe: Annotated[bool, typer.Option(
        help="keep the committed probe results; only redo the contract mapping")] = False,
) -> None:
    """Capability matrix from probe traces, and each contract's TrainCheck support."""
    from harness.traincheck import capabilities as cap
    from harness.traincheck.calibrate import (
        CalibrationReport,
        detections_by_contract,
        fault_coverage,
    )
    from harness.traincheck.variants import task_files

    files = task_files(task)
    out = files.reports / "capabilities.json"
    if reuse_probe:
        if not out.exists():
            raise HarnessError(f"{out} does not exist", "run without --reuse-probe first")
        previous = cap.CapabilityMatrix.model_validate_json(out.read_text())
        version, probes = previous.traincheck_version, previous.probes
    else:
        version, probes = cap.probe(files, _cpu_configs(config), log=_log)
    calibration = files.reports / "calibration.json"
    detected, faults = {}, {}
    if calibration.exists():
        calibrated = CalibrationReport.model_validate_json(calibration.read_text())
        detected, faults = detections_by_contract(calibrated), fault_coverage(calibrated)
    stable, evidence = cap.stable_names(probes)
    matrix = cap.CapabilityMatrix(
        task=task, command=f"harness traincheck capabilities --task {task}",
        traincheck_version=version, probes=probes, stable_names=stable,
        stable_names_evidence=evidence, calibration_used=calibration.exists(),
        contracts=cap.contract_coverage(files, probes, detected, faults))
    _write_report(files.reports, "capabilities", matrix, cap.render_markdown(matrix))


@app.command()
@clear_errors
def calibrate(task: Annotated[str, typer.Option(help="task id")],
              config: ConfigOption = None,
              rejudge: Annotated[bool, typer.Option(
                  help="re-derive the verdicts of the committed calibration, run nothing")]
              = False) -> None:
    """Track 1: every calibration fault, the oracle's verdict vs TrainCheck's, with costs."""
    from harness.traincheck import calibrate as cal
    from harness.traincheck.capabilities import CapabilityMatrix
    from harness.traincheck.variants import task_files

    files = task_files(task)
    if rejudge:
        path = files.reports / "calibration.json"
        if not path.exists():
            raise HarnessError(f"{path} does not exist", "run `harness calibrate` first")
        report = cal.CalibrationReport.model_validate_json(path.read_text())
        report.configs = {k: cal.judge(v) for k, v in report.configs.items()}
        report.summary = cal.summarise(report.configs, report.summary.unsupported_contracts)
        _write_report(files.reports, "calibration", report, cal.render_markdown(report))
        return
    unsupported: list[str] = []
    matrix_path = files.reports / "capabilities.json"
    if matrix_path.exists():
        matrix = CapabilityMatrix.model_validate_json(matrix_path.read_text())
        unsupported = [c.contract for c in matrix.contracts
                       if c.status == "missing_instrumentation"]
    report = cal.calibrate(files, _cpu_configs(config), command=f"harness calibrate --task {task}",
                           unsupported=unsupported, log=_log)
    _write_report(files.reports, "calibration", report, cal.render_markdown(report))
    s = report.summary
    console.print(f"faults detected {s.faults_detected}/{s.faults_confirmed}; false alarms "
                  f"{s.false_alarms}/{s.controls}")


@app.command("oracle-strength")
@clear_errors
def oracle_strength_cmd(
    task: Annotated[str, typer.Option(help="task id")],
    packet: Annotated[Path | None, typer.Option(help="packet folder")] = None,
    hidden: Annotated[Path | None, typer.Option(help="hidden folder")] = None,
    report_dir: Annotated[Path, typer.Option(help="where <task>.json/.md go (and where "
                                             "<task>.equivalent.yaml is read)")] =
    REPO_ROOT / "reports" / "oracle-strength",
    limit: Annotated[int | None, typer.Option(help="at most this many mutants, sampled "
                                              "evenly across operators")] = None,
    seed: Annotated[int, typer.Option(help="sampling seed")] = 0,
    operator: Annotated[list[str] | None, typer.Option(help="only these operators")] = None,
    mutant: Annotated[list[str] | None, typer.Option(
        help="only these mutant ids (e.g. to re-check survivors)")] = None,
    rescore: Annotated[Path | None, typer.Option(
        help="rewrite the report of this earlier run (runs/oracle-strength/T/run-N) with the "
        "current equivalence marks; grades nothing")] = None,
    # harness.oracle.strength.DEFAULT_WORKERS (imported lazily, like every command's module)
    workers: Annotated[int, typer.Option(
        min=1, max=8, help="grader containers grading mutants side by side")] = 2,
    fresh_reference: Annotated[bool, typer.Option(
        help="grade the reference again even when an earlier run graded the same grading "
        "code, image, hidden tree and reference")] = False,
    cold_start: Annotated[bool, typer.Option(
        help="start every candidate process of a mutant's grade as a fresh interpreter "
        "(default: forked from a warm one that imported torch once; grading/warm_start.py)")]
    = False,
) -> None:
    """Mutation analysis of the hidden checks: mutants of the reference, graded for real."""
    from harness.oracle.strength import oracle_strength
    from harness.oracle.strength import rescore as rescore_report

    packet_dir = packet or REPO_ROOT / "task_packets" / task
    hidden_dir = hidden or REPO_ROOT / "hidden" / task
    for needed in (packet_dir / "packet.yaml", hidden_dir / "reference" / "solution.patch"):
        if not needed.is_file():
            raise HarnessError(f"task {task!r}: {needed} is missing",
                               "pass --packet/--hidden or add the task's files")
    if rescore is not None:
        report = rescore_report(task, hidden_dir, rescore, report_dir, log=_log)
    else:
        report = oracle_strength(task, packet_dir, hidden_dir,
                                 DEFAULT_RUNS / "oracle-strength" / task, report_dir,
                                 limit=limit, seed=seed,
                                 operators=set(operator) if operator else None,
                                 ids=set(mutant) if mutant else None, workers=workers,
                                 reuse_reference=not fresh_reference,
                                 warm_start=not cold_start, log=_log)
    table = Table(title=f"oracle strength: {task}")
    for column in ("operator", "family", "mutants", "detected", "survived", "equivalent"):
        table.add_column(column)
    for row in report.by_operator:
        table.add_row(row.operator, row.family, str(row.mutants), str(row.detected),
                      str(row.survived), str(row.equivalent))
    console.print(table)
    score = "n/a" if report.score is None else f"{report.score:.1%}"
    console.print(f"score {score} (goal {report.goal:.0%}); {report.survived} unmarked "
                  f"survivor(s); report in {report_dir / (task + '.md')}")


@app.command()
@clear_errors
def validate(
    task: Annotated[str, typer.Option(help="task id")],
    packet: Annotated[Path | None, typer.Option(help="packet folder")] = None,
    hidden: Annotated[Path | None, typer.Option(help="hidden folder")] = None,
    report_dir: Annotated[Path, typer.Option(help="where the summary goes")] =
    REPO_ROOT / "reports" / "validation",
    variant: Annotated[list[str] | None, typer.Option(
        help="grade only these variants (e.g. fault:<id>, regression:<id>), keep the others "
        "from the summary")]
    = None,
) -> None:
    """Gold validation: reference passes, baseline and every fault fail exactly as documented."""
    from harness.oracle.validate import render_markdown, validate_task
    from harness.records.tasks import ValidationReport

    packet_dir = packet or REPO_ROOT / "task_packets" / task
    hidden_dir = hidden or REPO_ROOT / "hidden" / task
    for needed in (packet_dir / "packet.yaml", hidden_dir / "validation.yaml"):
        if not needed.is_file():
            raise HarnessError(f"task {task!r}: {needed} is missing",
                               "pass --packet/--hidden or add the task's files")
    previous = None
    if variant:
        summary = report_dir / f"{task}.json"
        if not summary.exists():
            raise HarnessError(f"{summary} does not exist", "run a full validation first")
        previous = ValidationReport.model_validate_json(summary.read_text())
    result = validate_task(task, packet_dir, hidden_dir, DEFAULT_RUNS / "validation", log=_log,
                           only=variant, previous=previous)
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
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / f"{task}.md").write_text(render_markdown(result))
    (report_dir / f"{task}.json").write_text(result.model_dump_json(indent=1))
    for graded in result.variants:
        for mismatch in graded.mismatches:
            err_console.print(mismatch, markup=False, highlight=False)
    console.print(f"validation {'passed' if result.ok else 'FAILED'}; summary in "
                  f"{report_dir / (task + '.md')}")
    if not result.ok:
        sys.exit(1)


@app.command()
@clear_errors
def demo(
    study: Annotated[Path, typer.Option(help="study file")] = Path("studies/demo.yaml"),
) -> None:
    """The main job: build images, run the demo study's first session, grade it, print a table."""
    from harness.infra.images import build_images
    from harness.study.session import SessionOptions, run_session

    build_images(log=_log)
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control"), log=_log)
    _print_sessions([attempt])


def _print_sessions(attempts: list[Path]) -> None:
    from harness.records.attempt import read_record

    table = Table(title="sessions")
    for column in ("session", "attempt", "outcome", "files changed", "verdict", "contracts",
                   "wall s", "tool calls", "image"):
        table.add_column(column)
    for attempt in attempts:
        rec = read_record(attempt)
        grade = rec.grades[-1] if rec.grades else None
        table.add_row(
            rec.session_id, str(rec.attempt), rec.outcome or "-",
            str(len(rec.diff.files_changed)) if rec.diff else "-",
            grade.shown() if grade else "not graded",
            ", ".join(f"{k} {v}" for k, v in grade.counts.items() if v) if grade else "-",
            f"{rec.usage.wall_seconds:.1f}" if rec.usage else "-",
            str(rec.usage.tool_calls) if rec.usage else "-",
            rec.image_id[7:19],
        )
    console.print(table)
    for attempt in attempts:
        console.print(f"artifacts: {attempt}")


if __name__ == "__main__":
    app()
