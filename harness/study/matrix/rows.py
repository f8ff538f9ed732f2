"""One row per frozen session, from the attempts recorded under the lock and the matrix's jobs:
what ``matrix status`` shows and ``matrix run`` decides from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from harness.infra import sandbox
from harness.oracle.grade import GRADER_ERROR
from harness.records import outcomes
from harness.records.attempt import (
    AttemptPaths,
    GradeSummary,
    SessionRecord,
    read_grades,
    study_records,
    unreadable_attempts,
)
from harness.records.study import Study
from harness.records.verify import verify_records
from harness.study.freeze import Frozen, LockedSession
from harness.study.matrix import slurm
from harness.study.matrix.state import (
    Job,
    MatrixState,
    SessionState,
    epoch_of,
    load_state,
    record_alive,
)


class SessionRow(BaseModel):
    """One session as ``status`` shows it and as ``run`` decides on it."""

    order: int
    session_id: str
    task: str
    arm: str
    comparison: str
    state: SessionState
    attempt: int | None = None
    attempts: int = 0
    outcome: str | None = None
    verdict: str | None = None
    wall_s: float | None = None
    tokens: int | None = None
    cpu_hours: float = 0.0  # every attempt under this lock
    gpu_hours: float = 0.0
    queue_s: float | None = None
    job: str | None = None
    note: str = ""
    next: Literal["none", "launch", "grade"] = "none"
    grade_dir: str | None = None
    # The attempt folder the verdict comes from (a finished row), and why each other attempt
    # of the session under this lock does not count (attempt number -> why): what a report
    # uses and leaves out, decided here once.
    counted: str | None = None
    set_aside: dict[int, str] = Field(default_factory=dict)


class Verifier:
    """Whether a finished attempt's files still match its manifest and its transcript its
    recorded head; cached by the manifest's mtime (grading rewrites it)."""

    def __init__(self) -> None:
        self._cache: dict[Path, tuple[float, str | None]] = {}

    def problem(self, attempt_dir: Path) -> str | None:
        manifest = AttemptPaths(root=attempt_dir).manifest
        stamp = manifest.stat().st_mtime if manifest.exists() else 0.0
        cached = self._cache.get(attempt_dir)
        if cached and cached[0] == stamp:
            return cached[1]
        verdict = verify_records(attempt_dir)
        problem = None if verdict.ok else verdict.error
        self._cache[attempt_dir] = (stamp, problem)
        return problem


def session_hours(record: SessionRecord, session: LockedSession) -> tuple[float, float]:
    """CPU- and GPU-hours an ended attempt used (its ledger's, else its recorded span)."""
    if record.usage is not None:
        return record.usage.cpu_hours, record.usage.gpu_hours
    start, end = epoch_of(record.started_at), epoch_of(record.ended_at)
    span = max(0.0, end - start) / 3600 if start and end else 0.0
    return session.cpus * span, session.gpus * span


def lock_attempts(study: Study, frozen: Frozen) -> dict[str, list[tuple[Path, SessionRecord]]]:
    """Attempts recorded under this lock as part of the frozen study, by session."""
    found: dict[str, list[tuple[Path, SessionRecord]]] = {}
    for attempt_dir, record in study_records(study.runs_root()):
        if record.lock_sha256 == frozen.sha256 and record.in_frozen_study:
            found.setdefault(record.session_id, []).append((attempt_dir, record))
    return found


def session_row(session: LockedSession, attempts: list[tuple[Path, SessionRecord]],
                max_attempts: int, *, verifier: Verifier | None,
                alive: Callable[[SessionRecord], bool] = record_alive,
                unreadable: list[tuple[Path, str]] | None = None) -> SessionRow:
    row = SessionRow(order=session.order, session_id=session.session_id, task=session.task,
                     arm=session.arm, comparison=session.comparison, state="pending",
                     attempts=len(attempts), next="launch")
    failures: list[str] = []
    # A finished attempt whose files changed is evidence gone wrong, not a failure to retry:
    # the session is shown damaged and nothing launches it again until someone looks.
    damaged = [f"attempt {folder.name.removeprefix('attempt-')} cannot be read: {problem}"
               for folder, problem in unreadable or []]
    for folder, unread in unreadable or []:
        number = folder.name.removeprefix("attempt-")
        if number.isdigit():
            row.set_aside[int(number)] = f"its record cannot be read: {unread}"
    final: tuple[Path, SessionRecord] | None = None
    for attempt_dir, record in attempts:
        if record.status == "running":
            if alive(record):
                row.state, row.next, row.attempt = "running", "none", record.attempt
                row.set_aside[record.attempt] = "still running"
            else:
                row.note = "its harness is gone (`harness cleanup` marks it interrupted)"
                row.set_aside[record.attempt] = row.note
            continue
        cpu, gpu = session_hours(record, session)
        row.cpu_hours += cpu
        row.gpu_hours += gpu
        kind = outcomes.outcome_kind(record.outcome)
        if record.status == "finished" and kind != "infra" and kind != "interrupted":
            problem = verifier.problem(attempt_dir) if verifier else None
            if problem is None:
                if final is not None:
                    row.set_aside[final[1].attempt] = (f"a later attempt ({record.attempt}) "
                                                       "of the session counts")
                final = (attempt_dir, record)
            else:
                damaged.append(f"attempt {record.attempt} does not verify: {problem}")
                row.set_aside[record.attempt] = f"does not verify: {problem}"
        elif kind == "infra":
            failures.append(f"attempt {record.attempt}: {record.outcome}"
                            + (f" ({record.error[:120]})" if record.error else ""))
            row.set_aside[record.attempt] = f"infrastructure failure ({record.outcome})"
        elif kind == "interrupted" or record.status == "interrupted":
            row.set_aside[record.attempt] = f"interrupted ({record.outcome or record.status})"
        else:
            row.set_aside[record.attempt] = f"ended {record.status} with {record.outcome}"
    last = attempts[-1][1] if attempts else None
    if last is not None:
        row.attempt = last.attempt
        row.outcome = last.outcome
        _usage_columns(row, last)
    if row.state == "running":
        return row
    if damaged:
        row.state, row.next, row.note = "damaged", "none", damaged[-1]
        if final is not None:
            row.set_aside[final[1].attempt] = ("another attempt of the session cannot be "
                                               "trusted, so none counts until someone looks")
        return row
    if final is not None:
        attempt_dir, record = final
        row.attempt, row.outcome = record.attempt, record.outcome
        _usage_columns(row, record)
        row.next = "none"
        if outcomes.outcome_kind(record.outcome) is None:
            row.state, row.note = "failed", (f"unclassified outcome {record.outcome!r} (add it "
                                             "to harness/records/outcomes.py)")
            return row
        grades = read_grades(attempt_dir, record)
        good = [g for g in grades if g.verdict != GRADER_ERROR]
        if record.diff is None or good:
            row.state, row.counted = "finished", str(attempt_dir)
            row.verdict = good[-1].shown() if good else "no diff"
            return row
        row.set_aside[record.attempt] = ("not graded yet" if not grades else
                                         f"{len(grades)} grader error(s), no grade")
        errors = len(grades)
        row.verdict = GRADER_ERROR if errors else "not graded"
        if errors >= max_attempts:
            row.state, row.note = "failed", f"{errors} grader errors: {grades[-1].reason}"
        else:
            row.state, row.next, row.grade_dir = "grading", "grade", str(attempt_dir)
            cut = _interrupted_grading(attempt_dir, grades)
            if cut is not None:
                row.state = "interrupted"
                row.note = (f"its grading was interrupted ({cut} has no summary); "
                            "`matrix run` grades it again")
        return row
    if len(failures) >= max_attempts:
        row.state, row.next, row.note = "failed", "none", failures[-1]
    elif last is not None and last.status == "interrupted":
        row.state = "interrupted"
    elif failures:
        row.note = f"to retry: {failures[-1]}"
    return row


def _interrupted_grading(attempt_dir: Path, grades: list[GradeSummary]) -> str | None:
    """The newest grades/grade-N folder a grading left without its summary, if any."""
    done = {g.folder for g in grades}
    folders = sorted((int(d.name.removeprefix("grade-")), d)
                     for d in AttemptPaths(root=attempt_dir).grades.glob("grade-*")
                     if d.name.removeprefix("grade-").isdigit())
    cut = [d for _n, d in folders if d.relative_to(attempt_dir).as_posix() not in done]
    return cut[-1].relative_to(attempt_dir).as_posix() if cut else None


def _usage_columns(row: SessionRow, record: SessionRecord) -> None:
    if record.usage is not None:
        row.wall_s = record.usage.wall_seconds
        row.tokens = record.usage.tokens_total
    if record.launch is not None:
        row.queue_s = record.launch.queue_seconds
        row.job = record.launch.job_id or row.job


def session_rows(study: Study, frozen: Frozen, *, verifier: Verifier | None = None,
                 alive: Callable[[SessionRecord], bool] = record_alive) -> list[SessionRow]:
    attempts = lock_attempts(study, frozen)
    unreadable: dict[str, list[tuple[Path, str]]] = {}
    for folder, problem in unreadable_attempts(study.runs_root()):
        unreadable.setdefault(folder.parent.name, []).append((folder, problem))
    return [session_row(s, attempts.get(s.session_id, []), frozen.lock.max_attempts,
                        verifier=verifier, alive=alive,
                        unreadable=unreadable.get(s.session_id))
            for s in frozen.lock.sessions]


def overlay_jobs(rows: list[SessionRow], jobs: dict[str, Job],
                 slurm_states: dict[str, slurm.JobState] | None = None) -> None:
    """Jobs that have no record (yet) shown on their session: queued, starting, grading."""
    for row in rows:
        job = jobs.get(row.session_id)
        if job is None:
            continue
        row.job = job.job_id if job.executor == "slurm" else row.job
        state = (slurm_states or {}).get(job.job_id) if job.executor == "slurm" else None
        if job.kind == "grade":
            row.state = "grading"
        elif state is not None and state.queued:
            row.state = "queued"
        elif row.state not in ("running",):
            row.state = "running"  # started; its record appears within a second
        row.next = "none"


def status_rows(study: Study, frozen: Frozen) -> tuple[list[SessionRow], MatrixState]:
    """The rows ``matrix status`` shows: records, plus the jobs a live run or Slurm holds."""
    state = load_state(study, frozen)
    rows = session_rows(study, frozen)
    live_runs = {r.run_id for r in state.runs if r.ended_at is None
                 and sandbox.process_alive(r.pid, r.host)}
    open_jobs = [j for j in state.jobs if j.ended_at is None]
    slurm_ids = [j.job_id for j in open_jobs if j.executor == "slurm"]
    states = slurm.job_states(slurm_ids) if slurm_ids else {}
    active = {j.session_id: j for j in open_jobs
              if (j.executor == "slurm" and j.job_id in states and states[j.job_id].active)
              or (j.executor == "local" and j.run_id in live_runs)}
    overlay_jobs(rows, active, states)
    for row in rows:
        if live_runs and row.next == "launch" and row.state in ("pending", "interrupted"):
            row.state = "queued"
        elif not live_runs and row.next == "grade":
            row.note = "to grade: run `harness matrix run`"
    return rows, state
