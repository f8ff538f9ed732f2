"""``matrix run``: launch every session not yet finished, grade each as it ends, retry
infrastructure failures, stop cleanly."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from harness.errors import HarnessError, Interrupted
from harness.infra import images
from harness.infra.sandbox import host_id
from harness.records import outcomes
from harness.records.attempt import read_grades
from harness.records.study import Study, load_study
from harness.study import freeze
from harness.study.freeze import Frozen, LockedSession
from harness.study.matrix import slurm
from harness.study.matrix.executors import (
    POLL_S,
    SLURM_POLL_S,
    LocalExecutor,
    SlurmExecutor,
)
from harness.study.matrix.rows import (
    SessionRow,
    Verifier,
    lock_attempts,
    overlay_jobs,
    session_rows,
)
from harness.study.matrix.slots import cap_problem, local_slots
from harness.study.matrix.state import (
    STATE_DIR,
    Executor,
    Job,
    RunEntry,
    housekeeping,
    load_state,
    record_alive,
    run_lock,
    save_state,
)
from harness.study.matrix.worker import ENV_EXECUTOR, ENV_LOCK, ENV_QUEUED_AT, ENV_RUN, last_error


class RunOptions(BaseModel):
    study_path: Path
    executor: Executor = "local"
    parallel: int | None = None
    graders: int = Field(default=1, ge=1)
    oversubscribe: bool = False
    detach: bool = False  # Slurm: submit and return
    slurm_args: list[str] = Field(default_factory=list)


class RunResult(BaseModel):
    rows: list[SessionRow]
    launched: int
    stop: str | None = None

    @property
    def complete(self) -> bool:
        return all(r.state == "finished" for r in self.rows)


Display = Callable[[list[SessionRow], str], None]


def run_matrix(options: RunOptions, *, log: Callable[[str], None],
               display: Display | None = None) -> RunResult:
    study = load_study(options.study_path)
    client = images.docker_client()
    frozen = freeze.require_lock(study, options.study_path, client)
    if options.executor == "slurm":
        slurm.check_reachable()
    from harness.errors import signals_as_interrupt

    with run_lock(study), signals_as_interrupt():  # SIGTERM/SIGHUP stop it like Ctrl-C
        housekeeping(study)
        return _Run(study, frozen, options, log, display).loop()


class _Run:
    def __init__(self, study: Study, frozen: Frozen, options: RunOptions,
                 log: Callable[[str], None], display: Display | None) -> None:
        self.study, self.frozen, self.options, self.log = study, frozen, options, log
        self.display = display
        self.client = images.docker_client()
        self.state = load_state(study, frozen)
        self.started = time.time()
        self.run = RunEntry(run_id=f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}",
                            pid=os.getpid(), host=host_id(), executor=options.executor,
                            graders=options.graders, started_at=self.started)
        self.logs = study.runs_root() / STATE_DIR / "logs" / self.run.run_id
        base_env = {ENV_RUN: self.run.run_id, ENV_EXECUTOR: options.executor,
                    ENV_LOCK: frozen.sha256}
        self.executor: LocalExecutor | SlurmExecutor
        if options.executor == "slurm":
            self.executor = SlurmExecutor(options.study_path, base_env, options.slurm_args)
            self.slots = options.parallel or len(frozen.lock.sessions)
        else:
            self.executor = LocalExecutor(options.study_path, base_env)
            self.slots, self.run.oversubscribed = local_slots(
                frozen.lock.sessions, options.parallel, options.oversubscribe)
        self.run.slots = self.slots if options.executor == "local" else options.parallel
        self.state.runs.append(self.run)
        self.active: dict[str, Job] = self._adopt()
        self.launched_here: set[str] = set()
        # When each session (re-)entered the queue in this run: the run's start, or the
        # moment an infrastructure failure sent it back (its queue time starts again).
        self.queued_at: dict[str, float] = {}
        self.attempt_before: dict[str, int] = {}
        self.verifier = Verifier()
        self.launched = 0
        # Why no further session starts (a cap, drift, a worker that could not start); fatal:
        # nothing starts at all, gradings included (drift, a dead daemon).
        self.stop: str | None = None
        self.fatal = False
        self._checked_lock = 0.0
        save_state(study, self.state)

    def _adopt(self) -> dict[str, Job]:
        """Jobs of earlier runs that may still be running: Slurm jobs (a detached run's)
        are followed to their end; a dead local run's workers died with it."""
        active = {}
        slurm_jobs = [j for j in self.state.jobs if j.ended_at is None and j.executor == "slurm"]
        states = slurm.job_states([j.job_id for j in slurm_jobs]) if slurm_jobs else {}
        for job in self.state.jobs:
            if job.ended_at is not None:
                continue
            state = states.get(job.job_id)
            if job.executor == "slurm" and state is not None and state.active:
                if self.options.executor != "slurm":
                    raise HarnessError(f"Slurm job {job.job_id} of {job.session_id} is still "
                                       f"{state.state.lower()}", "wait for it, or rerun with "
                                       "--executor slurm to follow it")
                active[job.session_id] = job
            else:
                job.ended_at, job.end = time.time(), job.end or "ended before this run"
        return active

    # -- the loop ------------------------------------------------------------------------------

    def loop(self) -> RunResult:
        try:
            while True:
                self._reap()
                rows = self._rows()
                self._launch(rows)
                rows = self._rows()
                if self.display:
                    self.display(rows, self._summary(rows))
                if not self.active and not self._launchable(rows):
                    break
                if self.options.detach and self.options.executor == "slurm" and \
                        not self._launchable(rows):
                    self.log(f"submitted; follow with `harness matrix status --study "
                             f"{self.options.study_path} --watch`")
                    break
                time.sleep(SLURM_POLL_S if self.options.executor == "slurm" else POLL_S)
        except (KeyboardInterrupt, Interrupted) as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
            self.log(f"stopping {len(self.active)} running job(s) ...")
            self.executor.stop(list(self.active.values()))
            self._reap(final=True)
            self._finish(self._rows(), f"interrupted by {signal.Signals(signum).name}")
            raise Interrupted(signum, "running sessions recorded as interrupted; rerun "
                                      "`harness matrix run` to resume") from None
        rows = self._rows()
        self._finish(rows, self.stop)
        return RunResult(rows=rows, launched=self.launched, stop=self.stop)

    def _rows(self) -> list[SessionRow]:
        rows = session_rows(self.study, self.frozen, verifier=self.verifier)
        states = self.executor.states if isinstance(self.executor, SlurmExecutor) else None
        overlay_jobs(rows, self.active, states)
        waiting = {r.session_id for r in rows if r.next == "launch" and self._may_launch(r)}
        for row in rows:
            if row.session_id in waiting and self.stop is None and row.state != "grading":
                row.state = "queued"
        return rows

    def _may_launch(self, row: SessionRow) -> bool:
        # A session interrupted during this run (Ctrl-C, scancel) waits for the next run.
        return not (row.state == "interrupted" and row.session_id in self.launched_here)

    def _launchable(self, rows: list[SessionRow]) -> bool:
        """Whether anything is left that this run would still start."""
        return not self.fatal and any(
            (r.next == "launch" and self._may_launch(r) and self.stop is None)
            or r.next == "grade" for r in rows)

    def _launch(self, rows: list[SessionRow]) -> None:
        running = [j for j in self.active.values() if j.kind == "session"]
        grading = [j for j in self.active.values() if j.kind == "grade"]
        locked = {s.session_id: s for s in self.frozen.lock.sessions}
        for row in rows:  # launch order
            if row.session_id in self.active or self.fatal:
                continue
            session = locked[row.session_id]
            if row.next == "grade" and (self.options.executor == "slurm"
                                        or len(grading) < self.options.graders):
                if not self._lock_holds():
                    return
                grading.append(self._start(session, "grade", row.grade_dir))
            elif (row.next == "launch" and self._may_launch(row) and self.stop is None
                  and len(running) < self.slots):
                held = [locked[j.session_id] for j in running]
                problem = cap_problem(self.frozen, rows, held, session)
                if problem is not None:
                    self.stop = problem
                    self.log(problem)
                    return
                if not self._lock_holds():
                    return
                running.append(self._start(session, "session", None))

    def _lock_holds(self) -> bool:
        """The lock is checked again before launching (at most every 30 s): drift during a
        run stops further launches; the workers check it themselves too."""
        if time.monotonic() - self._checked_lock < 30:
            return True
        try:
            freeze.check(self.frozen, self.study, self.options.study_path, self.client)
        except HarnessError as exc:
            self.stop, self.fatal = exc.line(), True
            self.log(self.stop)
            return False
        self._checked_lock = time.monotonic()
        return True

    def _start(self, session: LockedSession, kind: Literal["session", "grade"],
               attempt_dir: str | None) -> Job:
        sid = session.session_id
        now = time.time()
        queued_at = self.queued_at.setdefault(sid, self.started) if kind == "session" else now
        if self.options.executor == "slurm":
            queued_at = now  # a job's queue time starts at its submission
        job = Job(session_id=sid, kind=kind, executor=self.options.executor,
                  run_id=self.run.run_id, job_id="", attempt_dir=attempt_dir,
                  log=str(self.logs / f"{sid}-{kind}-{len(self.state.jobs) + 1}.log"),
                  submitted_at=now)
        # Attempt numbers only grow (new_attempt_dir): anything above this is new.
        self.attempt_before[sid] = max(
            (int(p.name.split("-")[1]) for p in (self.study.runs_root() / sid).glob("attempt-*")),
            default=0)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.executor.launch(job, {ENV_QUEUED_AT: repr(queued_at)}, session)
        self.active[sid] = job
        self.state.jobs.append(job)
        save_state(self.study, self.state)
        if kind == "session":
            self.launched_here.add(sid)
            self.launched += 1
        where = f"Slurm job {job.job_id}" if self.options.executor == "slurm" else \
            f"pid {job.job_id}"
        self.log(f"{'launch' if kind == 'session' else 'grade'} {sid} "
                 f"(order {session.order}, {where})")
        return job

    def _reap(self, final: bool = False) -> None:
        jobs = list(self.active.values())
        if not jobs:
            return
        if isinstance(self.executor, SlurmExecutor) and final:
            self.executor.refresh(jobs, force=True)
        ended = self.executor.poll(jobs)
        if not ended:
            return
        from harness.study.session import mark_interrupted

        # A worker that is gone cannot end its session any more: record it interrupted.
        mark_interrupted(self.study.runs_root().parent, study_root=self.study.runs_root(),
                         alive=record_alive)
        for job in ended:
            del self.active[job.session_id]
            self._ended(job)
        save_state(self.study, self.state)

    def _ended(self, job: Job) -> None:
        sid = job.session_id
        attempts = lock_attempts(self.study, self.frozen).get(sid, [])
        mine = [(d, r) for d, r in attempts if r.attempt > self.attempt_before.get(sid, 0)]
        if job.kind == "grade":
            attempt_dir = Path(job.attempt_dir or "")
            grades = read_grades(attempt_dir) if attempt_dir.is_dir() else []
            verdict = grades[-1].shown() if grades else "no grade"
            self.log(f"graded {sid}: {verdict}")
            if job.end != "exit 0" and not grades:
                self._launch_failed(job)
            return
        if not mine:
            self._launch_failed(job)
            return
        attempt_dir, record = mine[-1]
        grades = read_grades(attempt_dir, record)
        self.log(f"{sid} attempt {record.attempt}: {record.status}, {record.outcome}"
                 + (f", graded {grades[-1].shown()}" if grades else ""))
        if outcomes.outcome_kind(record.outcome) == "infra":
            self.queued_at[sid] = time.time()  # back in the queue from now

    def _launch_failed(self, job: Job) -> None:
        """A worker that recorded nothing: an environment problem (drift, a dead daemon, a
        missing image) that every other session would hit too, so the run stops."""
        line = last_error(Path(job.log)) or job.end or "no output"
        self.stop = f"{job.session_id}: the worker failed before recording anything ({line})"
        self.fatal = True
        self.log(self.stop)

    def _summary(self, rows: list[SessionRow]) -> str:
        counts: dict[str, int] = {}
        for row in rows:
            counts[row.state] = counts.get(row.state, 0) + 1
        return ", ".join(f"{n} {state}" for state, n in counts.items())

    def _finish(self, rows: list[SessionRow], result: str | None) -> None:
        self.run.ended_at = time.time()
        self.run.result = result or self._summary(rows)
        save_state(self.study, self.state)
