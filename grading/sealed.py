"""The boundary between the judge and the judged inside the grader container.

The judge (the grader and the hidden checks' pytest) runs as root with a handful of
capabilities. Every process that runs candidate code (the public tests, training runs, the
probes that call the candidate's API) runs as one unprivileged uid, the *candidate uid*:

- it cannot read the inputs (``hidden/``, the diff, the grader's output), which are root-owned
  and ``0700``, nor write anything the judge reads afterwards (the graded tree and the
  baseline are root-owned and read-only to it; it writes only into job folders the judge made
  for it, see :func:`job_dir`);
- it cannot signal, ptrace or read the memory of a judge process (another uid, no
  capabilities: the kernel refuses ``PTRACE_ATTACH`` and ``/proc/<pid>/mem``);
- every process it starts keeps that uid (it has no capability to change it), so
  :func:`reap` finds all of them however they detached (``setsid``, a cleared environment,
  double forks) and kills them before the judge reads a job's outputs or writes a verdict.

After a job (:func:`end_job`) every candidate process is killed and whatever the candidate
left in the container's shared writable folders (``/tmp``, ``/dev/shm``, ``/dev/mqueue``) is
removed, so no run can leave a trail for the next. The judge then *seals* the job's folder
(:func:`seal`): links and special files are removed and everything becomes the judge's, closed
(0700/0600), so what the judge reads is a plain file the candidate can no longer change or
redirect, and a later run cannot read it even when it learns its path (a resumed run is told
where its checkpoint is). What a later run must read is handed over as a copy in its own job
folder (:func:`give`).

**A uid of its own per job.** The candidate uids are a pool: ``GRADING_CANDIDATE_UID`` is the
first, ``GRADING_CANDIDATE_UIDS`` how many (the grader image sets both and names each `candidate`).
Each job takes the next uid of the pool (a counter in the area, shared by every judge process of
a grade) and keeps it until :func:`end_job`, so a process of one job, even one that escaped a
kill, can neither signal, trace nor read the processes and files of a later job: the kernel
checks uids, and no two jobs in a row share one. :func:`reap` and the cleanup cover every uid
of the pool, whichever judge process ran the job. Killing by uid is only safe inside the grader
container's own PID namespace, or with uids that nothing else on the machine uses (the grading
tests pick a random range).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from grading import jobcgroup, procfs
from grading.procfs import stat_fields

CANDIDATE_UID_VAR = "GRADING_CANDIDATE_UID"
# How many uids from the first one the jobs take in turn (default 1: every job the same uid).
CANDIDATE_UIDS_VAR = "GRADING_CANDIDATE_UIDS"
# In the area, root's (0600), for every judge process of the grade: how many jobs have taken a
# uid so far, and how many of them a reap has swept since.
_JOB_COUNTER = ".job-uids"
_SWEPT_COUNTER = ".job-uids-swept"
# Where job folders go (a root-owned 0711 folder: the candidate can reach a job folder it is
# told about, and cannot list or create anything there).
CANDIDATE_AREA_VAR = "GRADING_CANDIDATE_AREA"
_REAP_ROUNDS = 200
# Writable by anyone in the grader container (its root filesystem is read-only).
SHARED_WRITABLE = ("/tmp", "/dev/shm", "/dev/mqueue", "/var/tmp")


# The judge's flag file: a line there is a grader defect, which turns the grade into a grader
# error (grading.hidden reads it after the judge's pytest).
JUDGE_FLAGS_VAR = "GRADING_JUDGE_FLAGS"


def flag_grader_defect(message: str) -> None:
    if path := os.environ.get(JUDGE_FLAGS_VAR):
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(message.replace("\n", " ") + "\n")


class SealError(RuntimeError):
    """The boundary cannot be kept (not root, no candidate uid, a process that will not die)."""


@dataclass(frozen=True)
class Candidate:
    uid: int
    gid: int


def candidate_uids() -> range:
    """Every uid a job may take; refuses to run without a valid pool."""
    raw = os.environ.get(CANDIDATE_UID_VAR, "")
    if not raw.isdigit() or int(raw) == 0:
        raise SealError(f"{CANDIDATE_UID_VAR} must name a non-root uid (got {raw!r}); "
                        "run the grader in the grader image, which sets it")
    size = os.environ.get(CANDIDATE_UIDS_VAR, "1")
    if not size.isdigit() or not 1 <= int(size) <= 65536:
        raise SealError(f"{CANDIDATE_UIDS_VAR} must be a count from 1 to 65536 (got {size!r}); "
                        "run the grader in the grader image, which sets it")
    if os.geteuid() != 0:
        raise SealError(f"the grader runs as uid {os.geteuid()}, but it must start as root to "
                        "run candidate code under another uid; run it as the grader image does")
    first = int(raw)
    return range(first, first + int(size))


_job_lock = threading.Lock()
_job_uid: int | None = None
# The current job's own cgroup (grading.jobcgroup), when the host delegated a hierarchy.
_job_cgroup: Path | None = None


def _area_count(name: str, change: Callable[[int], int] | None = None) -> int | None:
    """A count kept in a root-only file of the area, shared by the grade's judge processes
    (which run jobs in turn, never at once): its value, then ``change`` of it is stored if
    given. None when there is no area (a judge command outside a grade)."""
    where = os.environ.get(CANDIDATE_AREA_VAR)
    if not where or not os.path.isdir(where):
        return None
    fd = os.open(os.path.join(where, name), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.read(fd, 32).decode("ascii", "replace").strip()
        value = int(raw) if raw.isdigit() else 0
        if change is not None:
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, str(change(value)).encode())
        return value
    finally:
        os.close(fd)


# Without an area, this process counts alone: jobs taken, and swept by its last reap.
_local_jobs = 0
_local_swept = 0


def _next_job_index() -> int:
    """How many jobs took a uid before this one, counted across the grade's judge processes."""
    global _local_jobs
    index = _area_count(_JOB_COUNTER, lambda n: n + 1)
    if index is None:
        _local_jobs += 1
        return _local_jobs - 1
    return index


def candidate() -> Candidate:
    """The identity of the current candidate job: a uid of the pool that no job before it in
    this grade held last (the next in turn), kept until :func:`end_job`."""
    global _job_uid, _job_cgroup
    pool = candidate_uids()
    with _job_lock:
        if _job_uid is None or _job_uid not in pool:
            index = _next_job_index()
            _job_uid = pool[index % len(pool)]
            try:
                _job_cgroup = jobcgroup.make(index)
            except jobcgroup.JobCgroupError as exc:
                raise SealError(str(exc)) from None
        return Candidate(uid=_job_uid, gid=_job_uid)


def job_cgroup() -> Path | None:
    """The current job's cgroup (made with its identity), None without a delegated hierarchy."""
    candidate()
    return _job_cgroup


def _end_identity() -> None:
    """The job is over: the next candidate process gets the next uid of the pool."""
    global _job_uid, _job_cgroup
    with _job_lock:
        _job_uid = None
        _job_cgroup = None


class PopenIdentity(TypedDict, total=False):
    user: int
    group: int
    extra_groups: list[int]
    umask: int


def popen_identity() -> PopenIdentity:
    """``subprocess.Popen`` keyword arguments that start the child as the candidate.

    Popen switches uid/gid in the child between fork and exec (no ``preexec_fn``, so it is safe
    from a threaded judge), and drops supplementary groups. Leaving uid 0 clears every
    capability, and ``no-new-privileges`` on the container keeps it that way.
    """
    who = candidate()
    ensure_reaper()
    return PopenIdentity(user=who.uid, group=who.gid, extra_groups=[], umask=0o077)


class CandidateLaunch:
    """How to start ``argv`` as a process of the current job: ``argv`` and ``kwargs`` for
    ``subprocess.Popen``/``run``; call :meth:`close` once the process has started.

    With a job cgroup, the process starts as root in a launcher (``jobcgroup.LAUNCHER``) that
    joins the job's cgroup and then becomes the candidate, so the candidate's first instruction
    already runs inside it; the command's environment reaches it on an inherited descriptor
    (the launcher itself runs with none). Without one, ``Popen`` switches the uid itself."""

    def __init__(self, argv: list[str], env: dict[str, str] | None) -> None:
        identity = popen_identity()
        cgroup = job_cgroup()
        self._fd: int | None = None
        if cgroup is None:
            self.argv = argv
            self.kwargs: dict[str, Any] = {**identity, "env": env}
            return
        # Close-on-exec: only the launcher gets it (pass_fds), not any other child of the judge.
        self._fd = os.memfd_create("candidate-env")
        payload = json.dumps(dict(os.environ) if env is None else env).encode()
        view = memoryview(payload)
        while view:
            view = view[os.write(self._fd, view):]
        os.lseek(self._fd, 0, os.SEEK_SET)
        self.argv = [sys.executable, "-I", "-S", "-c", jobcgroup.LAUNCHER,
                     jobcgroup.procs_file(cgroup), str(identity["user"]),
                     str(identity["group"]), f"{identity['umask']:o}", str(self._fd), *argv]
        self.kwargs = {"env": {}, "pass_fds": (self._fd,)}

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def candidate_popen(argv: list[str], *, env: dict[str, str] | None = None,
                    **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen`` of ``argv`` as a process of the current job (its uid, its cgroup)."""
    launch = CandidateLaunch(argv, env)
    try:
        return subprocess.Popen(launch.argv, **kwargs, **launch.kwargs)
    finally:
        launch.close()


def candidate_run(argv: list[str], *, env: dict[str, str] | None = None,
                  **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` of ``argv`` as a process of the current job (its uid, its cgroup)."""
    launch = CandidateLaunch(argv, env)
    try:
        return subprocess.run(launch.argv, **kwargs, **launch.kwargs)
    finally:
        launch.close()


def _uids_of(pid: str) -> set[int]:
    """The real and saved uids of ``pid``: who the process is, and who it may become again.
    The effective uid alone is not counted: the reaper runs with the candidate's effective uid
    and is no candidate process (grading.reaper)."""
    with open(f"/proc/{pid}/status", "rb") as fh:
        text = fh.read().decode("ascii", "replace")
    # Split on newlines only: the first line is the process's own name, which it sets at will,
    # and the kernel escapes only "\n" and "\\" in it, so a name holding "\rUid:\t0..." would
    # be a line of its own to str.splitlines() and hide the process from every scan.
    for line in text.split("\n"):
        if line.startswith("Uid:\t"):
            real, _effective, saved, _fs = (int(x) for x in line.split()[1:5])
            return {real, saved}
    return set()


def _has_live_thread(pid: str) -> bool:
    """Whether any thread of ``pid`` can still run the candidate's code. A process is not dead
    because its leader is a zombie: a leader thread that ended with the raw ``exit`` syscall
    shows ``Z`` while the process's other threads run on (a SIGKILL to the pid still ends them
    all). A thread that is exiting or has SIGKILL pending counts as ended
    (``procfs.thread_ended``): a killed process with huge page tables stays listed for as long
    as the kernel takes to free them, which the candidate chooses, and can do nothing more."""
    return not procfs.process_ended(pid)


def candidate_pids() -> list[int]:
    """Processes of any candidate uid that have a thread alive (a zombie whose every thread
    has ended is only waiting for its parent)."""
    return sorted(pid for pids in candidate_processes().values() for pid in pids)


def candidate_processes() -> dict[int, list[int]]:
    """Live processes of each uid of the pool that has any."""
    return processes_by_uid(candidate_uids())


def processes_of(uid: int) -> list[int]:
    """Processes whose real or saved uid is ``uid`` and that have a thread alive."""
    return processes_by_uid(range(uid, uid + 1)).get(uid, [])


def processes_by_uid(pool: range) -> dict[int, list[int]]:
    """Processes whose real or saved uid is in ``pool`` and that have a thread alive, by uid."""
    found: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            uids = _uids_of(name)
        except OSError:
            continue
        hits = [uid for uid in uids if uid in pool]
        if hits and _has_live_thread(name):
            for uid in hits:
                found.setdefault(uid, []).append(int(name))
    return found


# The kill(1) of the grader image (procps): `kill -KILL -1` is kill(-1, SIGKILL).
KILL_BINARY = "/bin/kill"


# The reaper's own uid (its real and saved uid; grading.reaper): one nothing else uses.
REAPER_UID_VAR = "GRADING_REAPER_UID"
_REAPER_ANSWER_S = 30.0


class _Reaper:
    """This judge process's reaper (``python -m grading.reaper``), started before any
    candidate code runs, answering ``reap`` with ``kill(-1)`` the candidate cannot race."""

    def __init__(self, uid: int, own: int) -> None:
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "grading.reaper", str(uid), str(own)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd="/", close_fds=True)

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def kill_all(self) -> bool:
        """True once the reaper saw no live candidate process left.

        A reaper that does not answer in time is ended here (the judge is root): its late
        answer would otherwise be read as the next request's, and the candidate can slow it
        (its scheduling priority and CPUs are the candidate's to set, see docs/grading.md).
        The next candidate process starts a new one (``ensure_reaper``)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(b"reap\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], _REAPER_ANSWER_S)
            answer = self.proc.stdout.readline() if ready else b""
        except OSError:
            answer = b""
        if not answer.startswith((b"done", b"left")):
            self.end()
        return answer.startswith(b"done")

    def end(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for pipe in (self.proc.stdin, self.proc.stdout):  # one reaper per job: no fd may leak
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


_reaper: _Reaper | None = None
_reaper_for: int | None = None


def reaper_uid() -> int:
    """The reapers' own uid: ``GRADING_REAPER_UID``, else the first uid after the pool."""
    pool = candidate_uids()
    raw = os.environ.get(REAPER_UID_VAR, "")
    if not raw:
        return pool.stop
    if not raw.isdigit() or int(raw) == 0 or int(raw) in pool:
        raise SealError(f"{REAPER_UID_VAR} must be a non-root uid outside the candidate uids "
                        f"{pool.start}-{pool.stop - 1} (got {raw!r})")
    return int(raw)


def ensure_reaper() -> None:
    """Start the current job's reaper unless it runs (called before every candidate process, so
    it exists before the job's code does: nothing the candidate does can keep it from starting
    or stop it later). One reaper at a time per judge process, for the current job's uid: a
    reaper's ``kill(-1)`` would also end any other reaper (they share their real uid)."""
    global _reaper, _reaper_for
    uid = candidate().uid
    if _reaper is not None and _reaper.alive() and _reaper_for == uid:
        return
    _end_reaper()
    try:
        _reaper, _reaper_for = _Reaper(uid, reaper_uid()), uid
    except OSError as exc:
        raise SealError(f"the reaper could not start ({exc})") from None


def _end_reaper() -> None:
    global _reaper, _reaper_for
    if _reaper is not None and _reaper.owner == os.getpid():
        _reaper.end()
    _reaper, _reaper_for = None, None


def _signal_all(uid: int) -> None:
    """kill(-1, SIGKILL) to every process of the job uid ``uid``: by the job's reaper, which
    the candidate cannot signal; if there is none (a job another judge process ran, whose
    reaper ended with it) or it did not answer, by a one-shot reaper started now."""
    if _reaper is not None and _reaper_for == uid and _reaper.alive() and _reaper.kill_all():
        return
    _signal_all_as(uid)


# A one-shot reaper: the same identity as grading.reaper's (real and saved uid its own,
# effective uid the job's), then one kill(-1). No site import (-S -I): it starts in a few
# milliseconds and imports nothing a candidate could have written.
_ONE_SHOT = """import os, sys
job, own = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([])
os.setresgid(own, own, own)
os.setresuid(own, job, own)
try:
    os.kill(-1, 9)
except ProcessLookupError:
    pass
"""


def _signal_all_as(uid: int) -> None:
    """``kill(-1, SIGKILL)`` with the right of ``uid``: the kernel signals every process that
    uid may signal (all of the job's, in this container's pid namespace; the caller is spared)
    in one walk of its task list, and a fork racing it is aborted. A scan of /proc cannot do
    that: a process that forks and exits thousands of times a second is never where the scan
    looks. Sent from a one-shot reaper the candidate can neither signal nor stop (real and
    saved uid not the job's; a plain ``kill`` run as the job uid could be killed by a process
    that watches for it). Skipped when nothing can start (at the pids limit): the per-pid kills
    of each round then make room for the next."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run([sys.executable, "-I", "-S", "-c", _ONE_SHOT, str(uid),
                        str(reaper_uid())], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
                       timeout=30, check=False)


def _run_as(argv: list[str], uid: int) -> None:
    """Run a short system command as the job uid ``uid`` (signals and IPC removal it may do on
    its own objects only), its output discarded; the caller checks what it changed."""
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=30, check=False, user=uid, group=uid,
                   extra_groups=[], umask=0o077)


def _uids_since_last_reap(count: int) -> set[int]:
    """The uids of every job begun since a reap last ended clean, whichever judge process ran
    it (a hidden check's pytest killed mid-check leaves its job to the grade)."""
    pool = candidate_uids()
    swept = _area_count(_SWEPT_COUNTER)
    recent = range(max(_local_swept if swept is None else swept, count - len(pool)), count)
    uids = {pool[i % len(pool)] for i in recent}
    if _job_uid is not None:
        uids.add(_job_uid)
    return uids


def _job_count() -> int:
    """How many jobs have taken a uid so far (see :func:`_next_job_index`)."""
    count = _area_count(_JOB_COUNTER)
    return _local_jobs if count is None else count


def _swept_up_to(count: int) -> None:
    """A reap ended clean: every job before ``count`` has no process left."""
    global _local_swept
    if _area_count(_SWEPT_COUNTER, lambda old: max(old, count)) is None:
        _local_swept = max(_local_swept, count)


def collect_zombie_children() -> int:
    """Wait for every dead child of this judge process that a candidate uid made; the number.

    A candidate's process whose parent is the judge (the job's first process, or the shell
    that runs a string command) can make more such children (``clone(CLONE_PARENT)``, itself
    or through ``ptrace`` of that shell) and let them die: nothing else collects them, and
    their ``/proc/PID/stat`` (a name of the candidate's choosing), readable by any uid, would
    carry data to a later job, or fill the pids limit so that no later job, nor the judge,
    can start a thread. Only dead children of a candidate uid are collected: the judge's
    ``Popen`` objects of live jobs, and its own helpers, are not touched (a job's ``Popen`` has
    been waited for before its job ends)."""
    pool = set(candidate_uids())
    me = str(os.getpid())
    collected = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = stat_fields(f"/proc/{name}/stat")
        try:
            if fields[:2] != ["Z", me] or not _uids_of(name) & pool:
                continue
            if os.waitpid(int(name), os.WNOHANG)[0]:
                collected += 1
        except (OSError, IndexError, ChildProcessError):
            continue
    return collected


def reap() -> int:
    """SIGKILL every candidate process until none is left; the number seen and killed.

    Each round kills each process a /proc scan found, then signals all of them at once from
    the uid of each recent job and of each uid seen alive (which no pid-hopping can escape),
    and ends when a scan after that finds none; a fork loop is bounded by the container's pids
    limit. Raises ``SealError`` when processes survive: no verdict may be written while
    candidate code still runs.
    """
    count = _job_count()
    recent = _uids_since_last_reap(count)
    killed: set[int] = set()
    for _ in range(_REAP_ROUNDS):
        alive = candidate_processes()
        # What the scan found goes first (root's CAP_KILL): busy processes of the job that
        # starve its reaper are gone before the reaper is asked.
        for pids in alive.values():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        for uid in sorted(recent | set(alive)):
            _signal_all(uid)
        if not alive and not candidate_pids():
            _swept_up_to(count)
            return len(killed)
        time.sleep(0.01)
    left = candidate_pids()
    if left:
        raise SealError(f"{len(left)} candidate processes survived SIGKILL ({left[:5]})")
    _swept_up_to(count)
    return len(killed)


def walk_no_links(root: str) -> list[tuple[str, os.stat_result]]:
    """Every entry under ``root`` (``root`` first), parents before children, by ``lstat``:
    a link is an entry, never followed. Iterative; for trees the judge built (a candidate's
    trees are handled by :func:`fd_walk`, which no path length can stop)."""
    found: list[tuple[str, os.stat_result]] = []
    try:
        found.append((root, os.lstat(root)))
    except OSError:
        return found
    stack = [root] if stat.S_ISDIR(found[0][1].st_mode) else []
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found.append((entry.path, st))
            if stat.S_ISDIR(st.st_mode):
                stack.append(entry.path)
    return found


_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def fd_walk(root: str, visit: Callable[[int, str, str, os.stat_result], None], *,
            remove: bool = False) -> None:
    """Visit every entry under the folder ``root`` as ``visit(folder_fd, name, relative_path,
    lstat)``, parents before children, holding one folder open at a time and naming everything
    relative to it: no depth, width or path length of a candidate's tree can stop it, and no
    link is followed. Each folder is listed once. With ``remove``, each folder is removed
    once emptied (``visit`` has unlinked what is not a folder). Call with no candidate process
    alive: nothing may change the tree under the walk."""

    def listing(fd: int) -> list[tuple[str, os.stat_result]]:
        found = []
        for entry in os.scandir(fd):
            found.append((entry.name, os.stat(entry.name, dir_fd=fd, follow_symlinks=False)))
        found.reverse()  # popped from the end: in listing order
        return found

    fd = os.open(root, _OPEN_DIR)
    names: list[str] = []  # the way down from root
    pending = [listing(fd)]  # per level: the entries not visited yet
    try:
        while True:
            if pending[-1]:
                name, st = pending[-1].pop()
                visit(fd, name, "/".join([*names, name]), st)
                if stat.S_ISDIR(st.st_mode):  # down one level
                    nxt = os.open(name, _OPEN_DIR, dir_fd=fd)
                    os.close(fd)
                    fd = nxt
                    names.append(name)
                    pending.append(listing(fd))
                continue
            if not names:
                return
            up = os.open("..", _OPEN_DIR, dir_fd=fd)
            os.close(fd)
            fd = up
            pending.pop()
            name = names.pop()
            if remove:
                os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)


def remove_tree(path: str) -> None:
    """Remove ``path`` and everything under it, following no link, whatever its depth."""
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        def unlink(fd: int, name: str, _rel: str, st: os.stat_result) -> None:
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=fd)

        fd_walk(path, unlink, remove=True)
        os.rmdir(path)
    else:
        os.unlink(path)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        remove_tree(path)


def clear_traces() -> list[str]:
    """Remove everything the candidate created in the shared writable folders.

    The candidate can only create entries in folders it owns or that anyone may write, so the
    walk descends into world-writable folders only and removes candidate-owned entries whole.
    """
    pool = candidate_uids()
    removed: list[str] = []
    stack = list(SHARED_WRITABLE)
    while stack:  # iterative: no nesting of shared folders can stop it
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_uid in pool:
                _remove(entry.path)
                removed.append(entry.path)
            elif stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH:
                stack.append(entry.path)
    return removed


# System V IPC objects (shared memory, message queues, semaphore sets) live in the container's
# IPC namespace, not in any folder: a trail past clear_traces unless removed.
SYSV_IPC_TABLES = ("/proc/sysvipc/shm", "/proc/sysvipc/msg", "/proc/sysvipc/sem")


def candidate_ipc_objects() -> dict[int, int]:
    """How many System V IPC objects each candidate uid owns or created (an object a job
    created and then gave to another owner still counts for its creator)."""
    pool = candidate_uids()
    count: dict[int, int] = {}
    for table in SYSV_IPC_TABLES:
        try:
            lines = Path(table).read_text().splitlines()
        except OSError:
            continue
        if not lines:
            continue
        header = lines[0].split()
        columns = [header.index(c) for c in ("uid", "cuid") if c in header]
        for line in lines[1:]:
            fields = line.split()
            uids = {int(fields[i]) for i in columns if i < len(fields) and fields[i].isdigit()}
            for uid in uids & set(pool):
                count[uid] = count.get(uid, 0) + 1
    return count


def clear_ipc() -> int:
    """Remove every System V IPC object a candidate uid owns or created; the number there was.

    Only an object's owner or creator (or CAP_SYS_ADMIN, which the judge does not hold) may
    remove it, so ``ipcrm --all`` runs as each of those uids: it removes exactly theirs."""
    found = candidate_ipc_objects()
    for uid in sorted(found):
        _run_as(["ipcrm", "--all"], uid)
    left = sum(candidate_ipc_objects().values())
    if left:
        raise SealError(f"{left} System V IPC objects of the candidate survived ipcrm")
    return sum(found.values())


def end_job() -> int:
    """After a candidate job: no process of it alive, no trace of it in the shared folders or
    in System V IPC, and nothing in the job area the candidate still owns (every job folder
    sealed, so no later run reads an earlier one's files). Returns the number of processes
    killed."""
    # Every step runs, whatever an earlier one did: a step that fails is a grader defect
    # (reported as such, never as a check's outcome), and the next steps still clear what
    # they can, so no job reads an earlier one's state either way.
    killed = 0
    failures: list[str] = []

    def step(name: str, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception as exc:  # the judge's own machinery failed: say so, go on
            failures.append(f"{name}: {type(exc).__name__}: {exc}")

    def end_cgroups() -> None:
        nonlocal killed
        killed += jobcgroup.end_all()

    def kill() -> None:
        nonlocal killed
        killed += reap()

    def seal_jobs() -> None:
        pool = candidate_uids()
        for entry in list(os.scandir(area())):
            try:
                owner = entry.stat(follow_symlinks=False).st_uid
            except OSError:
                continue
            if owner in pool:
                seal(Path(entry.path))

    step("ending the jobs' cgroups", end_cgroups)
    step("killing the candidate's processes", kill)
    step("collecting the candidate's dead children", collect_zombie_children)
    step("clearing the shared folders", clear_traces)
    step("removing System V IPC objects", clear_ipc)
    step("sealing the job folders", seal_jobs)
    # The job is over whatever the cleanup did: the next one runs as another uid, with its
    # own reaper.
    step("ending the job's reaper", _end_reaper)
    _end_identity()
    if failures:
        message = "cleanup after a candidate job failed: " + "; ".join(failures)
        flag_grader_defect(message)
        raise SealError(message)
    return killed


def area() -> Path:
    value = os.environ.get(CANDIDATE_AREA_VAR)
    if not value:
        raise SealError(f"{CANDIDATE_AREA_VAR} is not set (the grader sets it for its checks)")
    return Path(value)


def make_area(path: Path) -> Path:
    """The root-owned folder that holds every job folder (0711: reachable, not listable)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, 0, 0)
    os.chmod(path, 0o711)
    return path


def job_dir(name: str) -> Path:
    """A new, empty folder owned by the candidate for one job's outputs."""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:60] or "job"
    path = area() / f"{safe}-{uuid.uuid4().hex[:8]}"
    path.mkdir(mode=0o700)
    who = candidate()
    os.chown(path, who.uid, who.gid)
    return path


def seal(path: Path) -> list[str]:
    """Make a finished job's folder the judge's: links and special files removed, everything
    chowned to root and closed to others. Returns what was removed (relative paths).

    Call only after :func:`end_job`: with no candidate process alive, nothing can change under
    the walk. ``lchown``/``lstat`` never follow a link.
    """
    removed: list[str] = []
    if not os.path.lexists(path):
        return removed
    top = os.lstat(path)
    if not stat.S_ISDIR(top.st_mode):
        if stat.S_ISREG(top.st_mode):
            os.lchown(path, 0, 0)
            os.chmod(path, 0o600)
        else:
            os.unlink(path)
            removed.append(path.name)
        return removed
    os.lchown(path, 0, 0)
    os.chmod(path, 0o700)

    def close(fd: int, name: str, rel: str, st: os.stat_result) -> None:
        if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
            os.chown(name, 0, 0, dir_fd=fd, follow_symlinks=False)
            os.chmod(name, 0o700 if stat.S_ISDIR(st.st_mode) else 0o600, dir_fd=fd)
        else:  # a link, FIFO, socket or device: never followed, never read
            os.unlink(name, dir_fd=fd)
            removed.append(rel)

    fd_walk(str(path), close)  # any depth, any path length, no link followed
    return removed


def give(source: Path, name: str) -> Path:
    """A copy of a sealed output (file or folder) in a new job folder, for a later run to read.

    Only the copy is reachable: the run learns nothing else of the job that made it.
    """
    target = job_dir(name) / source.name
    for where, st in walk_no_links(str(source)):  # iterative: a deep output copies too
        dest = target / Path(where).relative_to(source)
        if stat.S_ISDIR(st.st_mode):
            dest.mkdir(exist_ok=True)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(where), dest)
        elif stat.S_ISREG(st.st_mode):
            shutil.copy2(where, dest, follow_symlinks=False)
    hand_over(target)
    return target


def hand_over(root: Path) -> None:
    """Give a tree the judge built (a copy the candidate may change) to the candidate."""
    who = candidate()
    for where, _st in walk_no_links(str(root)):
        os.lchown(where, who.uid, who.gid)


def make_readable_tree(root: Path) -> None:
    """Root-owned and read-only to the candidate: folders 0755, files 0644 or 0755."""
    for dirpath, _dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        os.lchown(here, 0, 0)
        os.chmod(here, 0o755)
        for name in filenames:
            p = here / name
            os.lchown(p, 0, 0)
            if not os.path.islink(p):
                mode = os.lstat(p).st_mode
                os.chmod(p, 0o755 if mode & stat.S_IXUSR else 0o644)


def check_reachable(path: Path) -> None:
    """Fail early, in one line, when the candidate cannot even enter ``path``."""
    # By absolute path from "/": Popen changes directory before it drops to the candidate,
    # so a relative test would not see a closed folder above ``path``.
    proc = candidate_run(["/bin/sh", "-c", 'test -r "$0" && test -x "$0"', str(path)],
                         cwd="/", env={"PATH": "/usr/bin:/bin"}, capture_output=True,
                         timeout=30)
    if proc.returncode != 0:
        raise SealError(f"the candidate uid cannot read {path}; every folder above it must be "
                        "world-searchable (o+x)")
