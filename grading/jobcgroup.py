"""A kernel container per candidate job: a freezer cgroup that the judge alone controls.

Every process of a job starts inside the job's own cgroup (its first process is put there by a
root launcher before it becomes the candidate, and every child inherits it), and the candidate
uid can neither leave it nor touch it (its files are root's). The job ends by the kernel, with
no process of the candidate's uid involved: the cgroup is frozen (no process in it runs, forks
or exits any more), each of its processes is sent SIGKILL, and it is thawed, so the kills land
at once; rounds of that until the cgroup is empty (:func:`end`). A process that keeps changing
its pid, ignores signals or waits to kill a helper has no instant in which to do it. The uid
reaper (``grading.reaper``) still runs after it, as the second line and the proof that nothing
of the job is left.

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
from collections.abc import Callable
from pathlib import Path

from grading import procfs

JOB_CGROUPS_VAR = "GRADING_JOB_CGROUPS"
# Why the host delegated none (set by the host when it could not): said in the grade.
NO_JOB_CGROUPS_VAR = "GRADING_NO_JOB_CGROUPS"
_PREFIX = "job-"
# Each kill round: how long the freeze may take to complete, and the cgroup to empty.
_FREEZE_WAIT_S = 0.5
_EMPTY_WAIT_S = 1.0
_ROUNDS = 20
_RMDIR_WAIT_S = 1.0

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
    given = os.environ.get(JOB_CGROUPS_VAR)
    why = os.environ.get(NO_JOB_CGROUPS_VAR) or (
        f"{JOB_CGROUPS_VAR}={given} is not a freezer cgroup folder" if given
        else f"{JOB_CGROUPS_VAR} is not set")
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
        # process's job that was not ended: end it first (it may stay while killed processes
        # finish exiting; those can do nothing in the new job).
        try:
            end(path)
            path.mkdir(exist_ok=True)
        except OSError as exc:
            raise JobCgroupError(f"cannot make the job's cgroup {path}: {exc}") from None
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


def _settle(condition: Callable[[], bool], within_s: float) -> bool:
    """Whether ``condition`` holds within ``within_s`` seconds (polled)."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _set_state(cgroup: Path, state: str) -> None:
    (cgroup / "freezer.state").write_text(state)


def _all_ended(cgroup: Path) -> bool:
    """Whether no process left in the cgroup can run the candidate's code again."""
    return all(procfs.process_ended(pid) for pid in _read_pids(cgroup))


def end(cgroup: Path) -> int:
    """End every process of the job's cgroup; how many processes were killed. The cgroup is
    removed now, or, while its last killed processes are still being torn down, at a later
    job's end (:func:`end_all`).

    Each round freezes the cgroup, sends SIGKILL to every process in it and thaws it, so the
    kills land at once; the rounds go on until no process in it can run again. The cgroup is
    never left frozen: a frozen task does not die (cgroup v1), and the uid reaper after this
    could not end it either. The freeze need not complete: a task that enters a job-control
    stop while the cgroup freezes is never frozen by cgroup v1, so a job that stops and
    continues its own processes in a loop can hold the state at FREEZING (found by an
    adversarial review). What matters is that no task runs free: the frozen ones cannot, a
    stopped one cannot either, and SIGKILL ends a stopped task where it stands. A process
    forked before the freeze took its parent (after the list was read) is in the cgroup and ends
    in the next round. A killed process is done once it is exiting: one with huge page tables
    stays listed for as long as the kernel takes to free them, which the candidate can make
    minutes (a second review), and it can do nothing more meanwhile (``procfs``)."""
    if not cgroup.is_dir():
        return 0
    killed: set[int] = set()
    for round_ in range(_ROUNDS):
        # The first round kills whatever is listed without asking /proc whether it could still
        # run: that reading is the candidate's to shape (its threads, their states), and a
        # kill of a process that has ended costs nothing.
        done = _all_ended(cgroup) if round_ else not _read_pids(cgroup)
        if done:
            break
        try:
            _set_state(cgroup, "FROZEN")
            _settle(lambda: _state(cgroup) == "FROZEN", _FREEZE_WAIT_S)
            for pid in _read_pids(cgroup):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        finally:
            _set_state(cgroup, "THAWED")
        if _settle(lambda: _all_ended(cgroup), _EMPTY_WAIT_S):
            break
    else:
        raise JobCgroupError(f"the job's cgroup {cgroup.name} still holds processes "
                             f"{_read_pids(cgroup)[:5]} after {_ROUNDS} rounds of SIGKILL")
    # Thawed in every case (a killed task that was left frozen dies only once thawed), then
    # removed: in moments when its processes have gone, else at a later job's end.
    _set_state(cgroup, "THAWED")
    _settle(lambda: _try_rmdir(cgroup), _RMDIR_WAIT_S)
    return len(killed)


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
