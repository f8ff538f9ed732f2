"""One job of a matrix run (``harness matrix worker``): a session, or a grading, in its own process
that dies with its parent."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from harness.errors import HarnessError, Interrupted
from harness.infra import images, sandbox
from harness.records.attempt import (
    LaunchInfo,
)
from harness.records.study import load_study
from harness.study import freeze
from harness.study.matrix import slurm
from harness.study.matrix.state import Job, iso_time

ENV_RUN = "HARNESS_MATRIX_RUN"

ENV_EXECUTOR = "HARNESS_EXECUTOR"

ENV_QUEUED_AT = "HARNESS_QUEUED_AT"

ENV_PARENT = "HARNESS_PARENT_PID"

ENV_LOCK = "HARNESS_LOCK_SHA256"


def die_with_parent() -> None:
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
        die_with_parent()
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
                                run_id=os.environ[ENV_RUN], queued_at=iso_time(queued_at),
                                job_id=job, job_started_at=job_start(job),
                                cpus=session.cpus, gpus=session.gpus)
        return run_session(SessionOptions(study_path=study_path, pair=session.pair,
                                          arm=session.arm, grade=grade, launch=launch,
                                          queued_at=queued_at if launch else None), log=log)


def job_start(job: str | None) -> str | None:
    """When Slurm started this job (its StartTime, 1 s resolution), else now."""
    if not job:
        return None
    with contextlib.suppress(HarnessError):
        state = slurm.job_states([job]).get(job)
        if state is not None and state.started is not None:
            return iso_time(state.started)
    return iso_time(time.time())


def worker_args(study_path: Path, job: Job, grade: bool) -> list[str]:
    args = ["--study", str(study_path)]
    if job.kind == "grade":
        return [*args, "--grade-attempt", str(job.attempt_dir)]
    return [*args, "--session", job.session_id, "--grade" if grade else "--no-grade"]


def last_error(log_path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
        for line in reversed(lines):
            if line.startswith(("error:", "interrupted")):
                return line
        return lines[-1] if lines else ""
    return ""
