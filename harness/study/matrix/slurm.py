"""The Slurm executor's side of the cluster: submit, read job states, cancel.

Plain ``sbatch``/``squeue``/``scancel`` (no accounting daemon needed: ``sacct`` fails on a
cluster without slurmdbd, and ``squeue --states=all`` still knows a finished job for
MinJobAge, 300 s by default). Each session is one batch job that runs ``harness matrix
worker`` (the session, then its grading, in the job's allocation): ``--cpus-per-task`` and
``--gres=gpu:N`` from what the study promises a session, ``--time`` from its wall budget plus
the grader's timeout plus a margin. Slurm kills a cancelled job's processes but not the
Docker containers they started; ``scripts/slurm/epilog.sh`` removes those by the job label
every worker container carries.
"""

from __future__ import annotations

import math
import shlex
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel

from harness.errors import HarnessError
from harness.paths import REPO_ROOT

# States of a job that has not ended (squeue's long names).
ACTIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                           "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
                           "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})
QUEUED_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD",
                           "REQUEUE_FED", "RESV_DEL_HOLD"})
# Past the session's own deadline: container start, copy-out, manifest, Python start-up.
MARGIN_S = 300.0
_TIMEOUT_S = 30


class JobState(BaseModel):
    job_id: str
    state: str
    submitted: float | None = None  # epoch seconds
    started: float | None = None
    ended: float | None = None
    reason: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def queued(self) -> bool:
        return self.state in QUEUED_STATES


def _run(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    if shutil.which(argv[0]) is None:
        raise HarnessError(f"{argv[0]} is not installed here, so Slurm cannot be used",
                           "run on a Slurm login node, or start the single-node cluster "
                           "with scripts/slurm/cluster.sh start")
    try:
        return subprocess.run(argv, input=stdin, capture_output=True, text=True,
                              timeout=_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise HarnessError(f"{argv[0]} did not answer within {_TIMEOUT_S} s",
                           "check that slurmctld runs (scontrol ping)") from exc


def check_reachable() -> None:
    """One clear line when the controller cannot be reached, before anything is submitted."""
    result = _run(["scontrol", "ping"])
    if result.returncode != 0 or "is UP" not in result.stdout:
        said = (result.stdout + result.stderr).strip().splitlines()
        raise HarnessError(f"the Slurm controller is not reachable ({said[0] if said else ''})",
                           "export SLURM_CONF for this cluster, or start one with "
                           "scripts/slurm/cluster.sh start")


def time_limit_minutes(session_seconds: float, grade_timeout_s: float) -> int:
    """``--time`` for a job running one session and its grading."""
    return max(1, math.ceil((session_seconds + grade_timeout_s + MARGIN_S) / 60))


def sbatch_args(*, job_name: str, cpus: float, gpus: int, minutes: int, output: Path,
                env: dict[str, str], extra: list[str]) -> list[str]:
    """The sbatch command line for one job (its script comes on stdin)."""
    exports = ",".join(["ALL", *(f"{k}={v}" for k, v in sorted(env.items()))])
    args = ["sbatch", "--parsable", f"--job-name={job_name}", f"--output={output}",
            f"--chdir={REPO_ROOT}", f"--cpus-per-task={math.ceil(cpus)}", f"--time={minutes}",
            f"--export={exports}"]
    if gpus:
        args.append(f"--gres=gpu:{gpus}")
    return args + list(extra)


def job_script(worker_args: list[str]) -> str:
    """The batch script: exec the worker, so Slurm's signals reach it directly."""
    command = shlex.join([sys.executable, "-m", "harness.cli", "matrix", "worker",
                          *worker_args])
    return f"#!/bin/bash\n# harness matrix job\nexec {command}\n"


def submit(args: list[str], script: str) -> str:
    """Submit; the job id."""
    result = _run(args, stdin=script)  # sbatch reads the script from stdin
    if result.returncode != 0:
        raise HarnessError(f"sbatch refused the job: {result.stderr.strip()[:300]}",
                           "check the partition, limits and --slurm-arg values")
    return result.stdout.strip().split(";")[0]


def _epoch(value: str) -> float | None:
    if not value or value in ("N/A", "Unknown", "None"):
        return None
    try:
        return datetime.fromisoformat(value).astimezone().timestamp()  # Slurm's local time
    except ValueError:
        return None


def job_states(job_ids: list[str]) -> dict[str, JobState]:
    """States of the given jobs that Slurm still knows (finished ones for MinJobAge)."""
    if not job_ids:
        return {}
    result = _run(["squeue", "-h", "--states=all", "-j", ",".join(job_ids),
                   "-o", "%i|%T|%V|%S|%e|%r"])
    if result.returncode != 0:
        if "Invalid job id" in result.stderr:
            return {}  # squeue fails only when every id is unknown
        raise HarnessError(f"squeue failed: {result.stderr.strip()[:200]}",
                           "check that slurmctld runs (scontrol ping)")
    states = {}
    for line in result.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 6:
            continue
        job_id, state, submitted, started, ended, reason = parts
        states[job_id] = JobState(
            job_id=job_id, state=state, submitted=_epoch(submitted),
            started=_epoch(started) if state not in QUEUED_STATES else None,
            ended=_epoch(ended) if state not in ACTIVE_STATES else None, reason=reason)
    return states


def job_active(job_id: str) -> bool | None:
    """Whether the job has not ended; None when Slurm cannot say (not reachable, forgotten)."""
    try:
        state = job_states([job_id]).get(job_id)
    except HarnessError:
        return None
    return None if state is None else state.active


def cancel(job_ids: list[str]) -> None:
    if job_ids:
        _run(["scancel", *job_ids])
