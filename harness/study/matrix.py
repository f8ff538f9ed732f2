"""The study matrix: plan, run and watch every session of a frozen study.

``matrix run`` launches, in the lock's launch order, every session that is not finished:

- **locally**, each session is a worker process (``harness matrix worker``) holding one slot;
  slots are CPU slots (the host's cores over the CPUs a session is promised) or, for GPU
  sessions, GPU slots too (the host-wide flock scheduler of harness/infra/gpu_slots.py hands out
  explicit GPU IDs), so no two sessions share a GPU or oversubscribe the cores promised to
  them. A session's slot is freed when its agent part ends; its grading runs at once in its
  own grader container, in a grading worker beside the sessions, and never holds back the
  next session;
- **on Slurm** (``--executor slurm``), each session is one batch job running the session and
  then its grading inside the job's allocation (harness/study/slurm.py).

The records are the truth, not this process: a rerun reads every attempt recorded under the
study's current lock, keeps each finished attempt whose manifest and transcript verify, and
starts only what is missing. Infrastructure failures are retried as new attempts up to the
study's limit; agent outcomes are final (harness/records/outcomes.py). Ctrl-C or SIGTERM stops the
workers cleanly (their sessions are recorded ``interrupted``, their containers removed) and a
rerun resumes them; a SIGKILLed run's workers get SIGTERM from the kernel (PDEATHSIG).

The matrix's own state (its runs, and each job with its id and submit, start and end times)
is ``runs/<study>/matrix/rev-N.json``; ``status`` reads it and the records, and Slurm for
jobs that have no record yet.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from harness.agent.snapshots import SNAPSHOT_ALLOWANCE_S
from harness.errors import HarnessError, Interrupted
from harness.infra import images, sandbox
from harness.infra.gpu_slots import detect_gpus
from harness.infra.sandbox import SandboxLimits, host_id
from harness.oracle.grade import GRADER_ERROR
from harness.paths import REPO_ROOT
from harness.records import outcomes
from harness.records.attempt import (
    AttemptPaths,
    LaunchInfo,
    SessionRecord,
    atomic_write,
    manifest_problem,
    read_record,
    study_records,
)
from harness.records.budget import deadline, worst_case_hours
from harness.records.study import Study, load_study
from harness.records.verify import verify_attempt
from harness.study import freeze, slurm
from harness.study.freeze import Frozen, LockedSession

STATE_DIR = "matrix"
POLL_S = 0.2
SLURM_POLL_S = 2.0
# How long stopped workers get to record their sessions and remove their containers.
STOP_WAIT_S = 120.0
GRADER_CPUS = SandboxLimits().cpus  # harness/oracle/grade.py's grader containers keep the default

SessionState = Literal["pending", "queued", "running", "grading", "finished", "failed",
                       "interrupted"]
Executor = Literal["local", "slurm"]


class Job(BaseModel):
    """One worker: a session (locally its agent part; on Slurm the session and its grading)
    or a grading."""

    session_id: str
    kind: Literal["session", "grade"]
    executor: Executor
    run_id: str
    job_id: str  # the Slurm job id, or the local worker's pid
    attempt_dir: str | None = None  # for a grading: the attempt it grades
    log: str
    submitted_at: float
    started_at: float | None = None
    ended_at: float | None = None
    end: str | None = None  # "exit 0", "exit 2", or Slurm's final state


class RunEntry(BaseModel):
    run_id: str
    pid: int
    host: str
    executor: Executor
    slots: int | None = None  # local session slots (None on Slurm: the scheduler decides)
    graders: int | None = None
    oversubscribed: bool = False
    started_at: float
    ended_at: float | None = None
    result: str | None = None


class MatrixState(BaseModel):
    study: str
    revision: int
    lock_sha256: str
    runs: list[RunEntry] = Field(default_factory=list)
    jobs: list[Job] = Field(default_factory=list)


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


# --- where things are ------------------------------------------------------------------------


def state_path(study: Study, revision: int) -> Path:
    return study.runs_root() / STATE_DIR / f"rev-{revision}.json"


def load_state(study: Study, frozen: Frozen) -> MatrixState:
    path = state_path(study, frozen.lock.revision)
    if path.is_file():
        return MatrixState.model_validate_json(path.read_text())
    return MatrixState(study=study.name, revision=frozen.lock.revision,
                       lock_sha256=frozen.sha256)


def save_state(study: Study, state: MatrixState) -> None:
    path = state_path(study, state.revision)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (state.model_dump_json(indent=1) + "\n").encode())


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def _epoch(iso: str | None) -> float | None:
    return datetime.fromisoformat(iso).timestamp() if iso else None


# --- liveness, housekeeping ------------------------------------------------------------------


def record_alive(record: SessionRecord) -> bool:
    """Whether a session recorded as running still runs: a Slurm-launched one by its job's
    state (its worker may be on another node), any other by its harness process."""
    from harness.study.session import harness_alive

    job = record.launch.job_id if record.launch else None
    if job:
        try:
            state = slurm.job_states([job]).get(job)
        except HarnessError:  # Slurm unreachable: only this host's processes can be judged
            return harness_alive(record) if record.host == host_id() else True
        if state is not None:
            return state.active
    return harness_alive(record)


def housekeeping(study: Study) -> None:
    """Containers of this study's dead workers removed, their sessions marked interrupted."""
    from harness.study.session import mark_interrupted

    client = images.docker_client()
    sandbox.cleanup_orphans(client, labels={"org.harness.study": study.name})
    mark_interrupted(study.runs_root().parent, study_root=study.runs_root(), alive=record_alive)


@contextlib.contextmanager
def run_lock(study: Study) -> Iterator[None]:
    """One ``matrix run`` per study at a time (released by the kernel if the run dies)."""
    path = study.runs_root() / STATE_DIR / "run.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise HarnessError(f"another `harness matrix run` of study {study.name} is running "
                               f"(pid {holder})", "wait for it, or stop it (Ctrl-C)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


# --- the sessions' states, from their records ------------------------------------------------


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
        problem = manifest_problem(attempt_dir)
        if problem is None:
            verdict = verify_attempt(attempt_dir)
            problem = None if verdict.ok else f"transcript: {verdict.error}"
        self._cache[attempt_dir] = (stamp, problem)
        return problem


def _hours(record: SessionRecord, session: LockedSession) -> tuple[float, float]:
    """CPU- and GPU-hours an ended attempt used (its ledger's, else its recorded span)."""
    if record.usage is not None:
        return record.usage.cpu_hours, record.usage.gpu_hours
    start, end = _epoch(record.started_at), _epoch(record.ended_at)
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
                alive: Callable[[SessionRecord], bool] = record_alive) -> SessionRow:
    row = SessionRow(order=session.order, session_id=session.session_id, task=session.task,
                     arm=session.arm, comparison=session.comparison, state="pending",
                     attempts=len(attempts), next="launch")
    failures: list[str] = []
    final: tuple[Path, SessionRecord] | None = None
    for attempt_dir, record in attempts:
        if record.status == "running":
            if alive(record):
                row.state, row.next, row.attempt = "running", "none", record.attempt
            else:
                row.note = "its harness is gone (`harness cleanup` marks it interrupted)"
            continue
        cpu, gpu = _hours(record, session)
        row.cpu_hours += cpu
        row.gpu_hours += gpu
        kind = outcomes.outcome_kind(record.outcome)
        if record.status == "finished" and kind != "infra" and kind != "interrupted":
            problem = verifier.problem(attempt_dir) if verifier else None
            if problem is None:
                final = (attempt_dir, record)
            else:
                failures.append(f"attempt {record.attempt} does not verify ({problem})")
        elif kind == "infra":
            failures.append(f"attempt {record.attempt}: {record.outcome}"
                            + (f" ({record.error[:120]})" if record.error else ""))
    last = attempts[-1][1] if attempts else None
    if last is not None:
        row.attempt = last.attempt
        row.outcome = last.outcome
        _usage_columns(row, last)
    if row.state == "running":
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
        good = [g for g in record.grades if g.verdict != GRADER_ERROR]
        if record.diff is None or good:
            row.state = "finished"
            row.verdict = good[-1].shown() if good else "no diff"
            return row
        errors = len(record.grades)
        row.verdict = GRADER_ERROR if errors else "not graded"
        if errors >= max_attempts:
            row.state, row.note = "failed", f"{errors} grader errors: {record.grades[-1].reason}"
        else:
            row.state, row.next, row.grade_dir = "grading", "grade", str(attempt_dir)
        return row
    if len(failures) >= max_attempts:
        row.state, row.next, row.note = "failed", "none", failures[-1]
    elif last is not None and last.status == "interrupted":
        row.state = "interrupted"
    elif failures:
        row.note = f"to retry: {failures[-1]}"
    return row


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
    return [session_row(s, attempts.get(s.session_id, []), frozen.lock.max_attempts,
                        verifier=verifier, alive=alive) for s in frozen.lock.sessions]


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


# --- caps ------------------------------------------------------------------------------------


def worst_case(session: LockedSession) -> tuple[float, float]:
    """(CPU-hours, GPU-hours) the session may use at most."""
    return worst_case_hours(session.budget, gpus=session.gpus, cpus=session.cpus)


def worst_case_seconds(session: LockedSession) -> float:
    return deadline(session.budget, gpus=session.gpus, cpus=session.cpus)[0]


def cap_problem(frozen: Frozen, rows: list[SessionRow], reserved: list[LockedSession],
                session: LockedSession) -> str | None:
    """Why the study's remaining hours cannot cover this session's budget, or None."""
    caps = frozen.lock.caps
    need_cpu, need_gpu = worst_case(session)
    for kind, cap, used, held, need in (
        ("CPU", caps.cpu_hours, sum(r.cpu_hours for r in rows),
         sum(worst_case(s)[0] for s in reserved), need_cpu),
        ("GPU", caps.gpu_hours, sum(r.gpu_hours for r in rows),
         sum(worst_case(s)[1] for s in reserved), need_gpu),
    ):
        if cap is None or need == 0:
            continue
        left = cap - used - held
        if need > left + 1e-9:
            return (f"study cap reached: {max(left, 0):.3f} of {cap:g} {kind}-hours left "
                    f"({used:.3f} used, {held:.3f} held by running sessions), and "
                    f"{session.session_id} may use up to {need:.3f}")
    return None


# --- slots -----------------------------------------------------------------------------------


def host_cores() -> int:
    return len(os.sched_getaffinity(0))


def local_slots(sessions: list[LockedSession], parallel: int | None,
                oversubscribe: bool) -> tuple[int, bool]:
    """(session slots, whether they promise more CPUs than the host has)."""
    cores = host_cores()
    cpus = max(s.cpus for s in sessions)
    gpus = max(s.gpus for s in sessions)
    slots = max(1, int(cores // cpus))
    if gpus:
        host_gpus = len(detect_gpus())
        if host_gpus < gpus:
            raise HarnessError(f"a session is promised {gpus} GPU(s) and this host has "
                               f"{host_gpus}", "run the matrix on a GPU host, or with "
                               "--executor slurm")
        slots = min(slots, host_gpus // gpus)
    if parallel is not None:
        if gpus and parallel * gpus > len(detect_gpus()):
            raise HarnessError(f"--parallel {parallel} needs {parallel * gpus} GPUs; this host "
                               f"has {len(detect_gpus())}",
                               f"use --parallel {len(detect_gpus()) // gpus} or less")
        if parallel * cpus > cores and not oversubscribe:
            raise HarnessError(
                f"--parallel {parallel} promises {parallel * cpus:g} CPUs to sessions on a host "
                f"with {cores}", f"use --parallel {slots} or less, or add --oversubscribe for "
                "a demo (its sessions' timings are then not comparable)")
        slots = parallel
    return slots, slots * cpus > cores


# --- workers ---------------------------------------------------------------------------------

ENV_RUN = "HARNESS_MATRIX_RUN"
ENV_EXECUTOR = "HARNESS_EXECUTOR"
ENV_QUEUED_AT = "HARNESS_QUEUED_AT"
ENV_PARENT = "HARNESS_PARENT_PID"
ENV_LOCK = "HARNESS_LOCK_SHA256"


def _die_with_parent() -> None:
    """Locally: SIGTERM when the matrix run dies, even by SIGKILL (Linux PR_SET_PDEATHSIG),
    so its sessions end recorded and without containers."""
    parent = os.environ.get(ENV_PARENT)
    if not parent:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != int(parent):  # it died before the call
        raise Interrupted(signal.SIGTERM, "the matrix run that started this worker is gone")


def run_worker(study_path: Path, *, session_id: str | None, grade_dir: Path | None,
               grade: bool, log: Callable[[str], None]) -> Path:
    """One matrix job: a session (and its grading if ``grade``), or a grading."""
    from harness.errors import signals_as_interrupt
    from harness.oracle.grade import grade_attempt
    from harness.study.session import SessionOptions, run_session

    with signals_as_interrupt():
        _die_with_parent()
        study = load_study(study_path)
        job = os.environ.get("SLURM_JOB_ID")
        sandbox.PROCESS_LABELS.update({"org.harness.study": study.name,
                                       "org.harness.matrix-run": os.environ.get(ENV_RUN, "")})
        if job:
            sandbox.PROCESS_LABELS[sandbox.SLURM_JOB_LABEL] = job
            if os.environ.get("SLURM_JOB_GPUS") and "HARNESS_GPU_IDS" not in os.environ:
                # Only the GPUs Slurm gave this job, never the node's others.
                os.environ["HARNESS_GPU_IDS"] = os.environ["SLURM_JOB_GPUS"]
        if grade_dir is not None:
            client = images.docker_client()
            freeze.check_attempt(grade_dir, client)
            grade_attempt(grade_dir, client=client, log=log)
            return grade_dir
        assert session_id is not None
        frozen = freeze.latest_lock(study)
        expected = os.environ.get(ENV_LOCK)
        if frozen is None or (expected and frozen.sha256 != expected):
            raise HarnessError(f"study {study.name} was frozen again since this matrix run "
                               "started", "rerun `harness matrix run`: it uses the new lock")
        session = frozen.lock.session(session_id)
        queued_at = float(os.environ.get(ENV_QUEUED_AT) or time.time())
        launch = None
        if os.environ.get(ENV_RUN):
            launch = LaunchInfo(executor=os.environ.get(ENV_EXECUTOR, "local"),  # type: ignore[arg-type]
                                run_id=os.environ[ENV_RUN], queued_at=_iso(queued_at),
                                job_id=job, job_started_at=_job_start(job),
                                cpus=session.cpus, gpus=session.gpus)
        return run_session(SessionOptions(study_path=study_path, pair=session.pair,
                                          arm=session.arm, grade=grade, launch=launch,
                                          queued_at=queued_at if launch else None), log=log)


def _job_start(job: str | None) -> str | None:
    """When Slurm started this job (its StartTime, 1 s resolution), else now."""
    if not job:
        return None
    with contextlib.suppress(HarnessError):
        state = slurm.job_states([job]).get(job)
        if state is not None and state.started is not None:
            return _iso(state.started)
    return _iso(time.time())


def _worker_args(study_path: Path, job: Job, grade: bool) -> list[str]:
    args = ["--study", str(study_path)]
    if job.kind == "grade":
        return [*args, "--grade-attempt", str(job.attempt_dir)]
    return [*args, "--session", job.session_id, "--grade" if grade else "--no-grade"]


def _last_error(log_path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
        for line in reversed(lines):
            if line.startswith(("error:", "interrupted")):
                return line
        return lines[-1] if lines else ""
    return ""


class LocalExecutor:
    """Workers as child processes of this run, in their own process groups (Ctrl-C reaches
    only the run, which stops them in order)."""

    name: Executor = "local"

    def __init__(self, study_path: Path, base_env: dict[str, str]) -> None:
        self.study_path = study_path
        self.base_env = base_env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def launch(self, job: Job, env: dict[str, str], session: LockedSession) -> None:
        del session
        with open(job.log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "harness.cli", "matrix", "worker",
                 *_worker_args(self.study_path, job, grade=False)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **self.base_env, **env, ENV_PARENT: str(os.getpid())},
                cwd=REPO_ROOT, start_new_session=True)
        job.job_id = str(proc.pid)
        job.started_at = job.submitted_at
        self.procs[job.job_id] = proc

    def poll(self, jobs: list[Job]) -> list[Job]:
        ended = []
        for job in jobs:
            proc = self.procs.get(job.job_id)
            code = proc.poll() if proc else -1
            if code is not None:
                job.ended_at, job.end = time.time(), f"exit {code}"
                self.procs.pop(job.job_id, None)
                ended.append(job)
        return ended

    def stop(self, jobs: list[Job]) -> None:
        for job in jobs:
            proc = self.procs.get(job.job_id)
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        for job in jobs:
            proc = self.procs.get(job.job_id)
            if proc is None:
                continue
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class SlurmExecutor:
    """Each job submitted with sbatch; its state read from squeue."""

    name: Executor = "slurm"

    def __init__(self, study_path: Path, base_env: dict[str, str], extra: list[str]) -> None:
        self.study_path = study_path
        self.base_env = base_env
        self.extra = extra
        self.states: dict[str, slurm.JobState] = {}
        self._polled = 0.0

    def launch(self, job: Job, env: dict[str, str], session: LockedSession) -> None:
        from harness.records.packets import load_packet
        from harness.records.study import task_ref

        study = load_study(self.study_path)
        packet = load_packet(task_ref(study, session.task).packet_dir())
        grade_s = packet.spec.grade_timeout_s
        if job.kind == "grade":
            minutes, cpus, gpus = slurm.time_limit_minutes(0, grade_s), GRADER_CPUS, 0
        else:
            minutes, cpus, gpus = (slurm.time_limit_minutes(worst_case_seconds(session)
                                                            + SNAPSHOT_ALLOWANCE_S,
                                                            grade_s),
                                   session.cpus, session.gpus)
        args = slurm.sbatch_args(
            job_name=f"harness-{study.name}-{job.session_id}", cpus=cpus, gpus=gpus,
            minutes=minutes, output=Path(job.log), env={**self.base_env, **env},
            extra=self.extra)
        job.job_id = slurm.submit(args, slurm.job_script(
            _worker_args(self.study_path, job, grade=True)))

    def refresh(self, jobs: list[Job], force: bool = False) -> None:
        if force or time.monotonic() - self._polled >= SLURM_POLL_S:
            self.states = slurm.job_states([j.job_id for j in jobs])
            self._polled = time.monotonic()

    def poll(self, jobs: list[Job]) -> list[Job]:
        self.refresh(jobs)
        ended = []
        for job in jobs:
            state = self.states.get(job.job_id)
            if state is not None and state.started and job.started_at is None:
                job.started_at = state.started
            if state is None or not state.active:
                job.ended_at = (state.ended if state and state.ended else time.time())
                job.end = state.state if state else "gone from squeue"
                ended.append(job)
        return ended

    def stop(self, jobs: list[Job]) -> None:
        slurm.cancel([j.job_id for j in jobs])
        deadline = time.monotonic() + STOP_WAIT_S
        while jobs and time.monotonic() < deadline:
            self.refresh(jobs, force=True)
            if not any(s.active for s in self.states.values()):
                break
            time.sleep(1)


# --- the run ---------------------------------------------------------------------------------


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
        mine = [r for _d, r in attempts if r.attempt > self.attempt_before.get(sid, 0)]
        if job.kind == "grade":
            attempt_dir = Path(job.attempt_dir or "")
            record = read_record(attempt_dir) if attempt_dir.is_dir() else None
            verdict = record.grades[-1].shown() if record and record.grades else "no grade"
            self.log(f"graded {sid}: {verdict}")
            if job.end != "exit 0" and not (record and record.grades):
                self._launch_failed(job)
            return
        if not mine:
            self._launch_failed(job)
            return
        record = mine[-1]
        self.log(f"{sid} attempt {record.attempt}: {record.status}, {record.outcome}"
                 + (f", graded {record.grades[-1].shown()}" if record.grades else ""))
        if outcomes.outcome_kind(record.outcome) == "infra":
            self.queued_at[sid] = time.time()  # back in the queue from now

    def _launch_failed(self, job: Job) -> None:
        """A worker that recorded nothing: an environment problem (drift, a dead daemon, a
        missing image) that every other session would hit too, so the run stops."""
        line = _last_error(Path(job.log)) or job.end or "no output"
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


# --- status ----------------------------------------------------------------------------------


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
