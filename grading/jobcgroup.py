"""A kernel container per candidate job: a freezer cgroup that the judge alone controls.

Every process of a job starts inside the job's own cgroup (its first process is put there by a
root launcher before it becomes the candidate, and every child inherits it), and the candidate
uid can neither leave it nor touch it (its files are root's). The job ends by the kernel, with
no process of the candidate's uid involved: the cgroup is frozen (no process in it runs, forks
or exits any more), each of its processes is sent SIGKILL, and it is thawed, so the kills land
at once. A process that keeps changing its pid, ignores signals or waits to kill a helper has
no instant in which to do it. The uid reaper (``grading.reaper``) still runs after it, as the
second line and the proof that nothing of the job is left.

The host delegates the folder (a cgroup v1 ``freezer`` hierarchy's folder made for this grader
container, bind-mounted at ``GRADING_JOB_CGROUPS``; ``harness.infra.job_cgroups``). Without it
(a cgroup v2 host, a harness that is not root on the engine's host) the jobs end by the uid
reaper alone, and the grade says so (``SealInfo.job_kill``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

JOB_CGROUPS_VAR = "GRADING_JOB_CGROUPS"
# Why the host delegated none (set by the host when it could not): said in the grade.
NO_JOB_CGROUPS_VAR = "GRADING_NO_JOB_CGROUPS"
_PREFIX = "job-"
_SETTLE_S = 10.0

KILL_BY_CGROUP = "freezer cgroup per job, then the uid reaper"
KILL_BY_UID = "uid reaper"


class JobCgroupError(RuntimeError):
    """A job's cgroup could not be made, frozen or emptied (a grader defect)."""


def root() -> Path | None:
    """The delegated folder, when the host gave one (a folder of a freezer hierarchy)."""
    value = os.environ.get(JOB_CGROUPS_VAR)
    if not value:
        return None
    path = Path(value)
    return path if (path / "freezer.state").is_file() else None


def kill_mechanism() -> str:
    """How this grader ends a candidate job, in words for the grade."""
    if root() is not None:
        return KILL_BY_CGROUP
    why = os.environ.get(NO_JOB_CGROUPS_VAR) or f"{JOB_CGROUPS_VAR} is not set"
    return f"{KILL_BY_UID} (no job cgroup: {why})"


def close_root() -> None:
    """Only the judge may see the jobs' cgroups: the candidate could read their process lists."""
    if (where := root()) is not None:
        os.chmod(where, 0o700)


def make(index: int) -> Path | None:
    """The cgroup of job ``index`` (made now, empty), or None without a delegated folder."""
    where = root()
    if where is None:
        return None
    path = where / f"{_PREFIX}{index}"
    try:
        path.mkdir()
    except FileExistsError:
        # A job index is never reused within a grade; what is there is an earlier judge
        # process's job that was not ended: end it first.
        end(path)
        path.mkdir()
    except OSError as exc:
        raise JobCgroupError(f"cannot make the job's cgroup {path}: {exc}") from None
    return path


def procs_file(cgroup: Path) -> str:
    return str(cgroup / "cgroup.procs")


def _read_pids(cgroup: Path) -> list[int]:
    try:
        text = (cgroup / "cgroup.procs").read_text()
    except FileNotFoundError:
        return []
    return [int(x) for x in text.split() if x.isdigit()]


def _state(cgroup: Path) -> str:
    return (cgroup / "freezer.state").read_text().strip()


def _wait(condition: object, what: str, cgroup: Path) -> None:
    deadline = time.monotonic() + _SETTLE_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise JobCgroupError(f"the job's cgroup {cgroup.name} {what} after {_SETTLE_S:g} s")
        time.sleep(0.005)


def end(cgroup: Path) -> int:
    """Freeze the job, SIGKILL every process in it, thaw it, wait until it is empty, remove it.
    Returns how many processes were killed."""
    if not cgroup.is_dir():
        return 0
    (cgroup / "freezer.state").write_text("FROZEN")
    # FREEZING until every task is stopped: a task in an uninterruptible sleep finishes it
    # first. Only then is the list of processes final (no fork can add to it).
    _wait(lambda: _state(cgroup) == "FROZEN", "did not freeze", cgroup)
    pids = _read_pids(cgroup)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    (cgroup / "freezer.state").write_text("THAWED")
    _wait(lambda: not _read_pids(cgroup), "still holds processes", cgroup)
    _wait(lambda: _try_rmdir(cgroup), "cannot be removed", cgroup)
    return len(pids)


def _try_rmdir(cgroup: Path) -> bool:
    try:
        cgroup.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False  # EBUSY while the last task leaves
    return True


def end_all() -> int:
    """End every job cgroup under the delegated folder (a judge process killed mid-job leaves
    its job to whoever ends the next); how many processes were killed."""
    where = root()
    if where is None:
        return 0
    killed = 0
    for entry in sorted(where.iterdir()):
        if entry.is_dir() and entry.name.startswith(_PREFIX):
            killed += end(entry)
    return killed


# The root launcher: joins the job's cgroup, becomes the candidate, runs the command. No site
# import and no environment (-I -S, started with an empty one): nothing a candidate wrote, no
# loader variable, reaches a root process. The command's environment comes on a descriptor.
LAUNCHER = """import json, os, sys
procs, uid, gid, umask, env_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
int(sys.argv[4], 8), int(sys.argv[5])
with os.fdopen(env_fd, "rb") as fh:
    env = json.loads(fh.read())
with open(procs, "w") as fh:
    fh.write(str(os.getpid()))
os.setgroups([])
os.setresgid(gid, gid, gid)
os.setresuid(uid, uid, uid)
os.umask(umask)
argv = sys.argv[6:]
try:
    os.execvpe(argv[0], argv, env)
except OSError as exc:
    os.write(2, f"[grading] cannot run {argv[0]!r}: {exc}\\n".encode())
    os._exit(127)
"""
