"""The matrix's own state: its runs and jobs (``runs/<study>/matrix/rev-N.json``), the run lock,
and which sessions' harness processes are alive."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from harness.errors import HarnessError
from harness.infra import images, sandbox
from harness.infra.sandbox import host_id
from harness.records.attempt import (
    SessionRecord,
    atomic_write,
)
from harness.records.study import Study
from harness.study.freeze import Frozen
from harness.study.matrix import slurm

STATE_DIR = "matrix"

SessionState = Literal["pending", "queued", "running", "grading", "finished", "failed",
                       "interrupted", "damaged"]

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


def iso_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def epoch_of(iso: str | None) -> float | None:
    """Seconds since the epoch of a recorded time; None when absent or not a time."""
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


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
