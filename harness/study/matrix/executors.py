"""Where a job runs: a local worker process, or a Slurm batch job (see ``slurm``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.agent.snapshots import SNAPSHOT_ALLOWANCE_S
from harness.paths import REPO_ROOT
from harness.records.study import load_study
from harness.study.freeze import LockedSession
from harness.study.matrix import slurm
from harness.study.matrix.slots import GRADER_CPUS, worst_case_seconds
from harness.study.matrix.state import Executor, Job
from harness.study.matrix.worker import ENV_PARENT, worker_args

POLL_S = 0.2
# How long stopped workers get to record their sessions and remove their containers.
STOP_WAIT_S = 120.0

SLURM_POLL_S = 2.0


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
                 *worker_args(self.study_path, job, grade=False)],
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
            worker_args(self.study_path, job, grade=True)))

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
