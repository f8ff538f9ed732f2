"""Run one graded command under a hard timeout, and leave no process of it behind.

Candidate code is untrusted: it may hang, fork, daemonise, print gigabytes, or try to reach
its own verdict. Every command therefore runs in its own session (so one ``killpg`` reaches
the whole tree), carries a per-run marker in its environment (so children that escaped the
process group with ``setsid`` are found through ``/proc/*/environ``), and writes its output
through a pipe whose reader caps the log size. Candidate commands (the default) also run as
the candidate uid (``grading.sealed``): when such a command ends, every process of that uid is
killed, which catches what leaves the session *and* clears its environment.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from grading import census, sealed, stacks, warm_judge, warm_start
from grading.layout import CANDIDATE_ENV

MARKER_VAR = "GRADING_RUN_ID"
DEFAULT_MAX_LOG_BYTES = 16 * 1024 * 1024
_POLL_S = 0.05
_READ_CHUNK = 64 * 1024
_DRAIN_S = 1.0
# How long the sweep keeps looking for marked processes; a fork loop outruns one pass.
_SWEEP_ROUNDS = 100

# A watchdog is polled while the command runs; a non-None string kills the run with that reason.
Watchdog = Callable[[], str | None]


@dataclass(frozen=True)
class RunResult:
    # None when the process was killed by a signal (then `signal` is set).
    exit_code: int | None
    signal: int | None
    # The hard timeout or the watchdog fired and the grader killed the run.
    timed_out: bool
    duration_s: float
    log_path: Path
    run_id: str
    kill_reason: str | None = None
    log_truncated: bool = False
    # Processes of this run still alive after the main process ended (daemonised children)
    # and killed by the marker sweep; and those the sweep could not kill. The sweep reads
    # /proc/<pid>/environ, which the judge (no CAP_SYS_PTRACE) can read only for its own uid's
    # processes: for a candidate run both stay 0, and what it left is the reap's count below.
    stragglers_killed: int = 0
    survivors: int = 0
    # Candidate-uid processes killed after the run (anything it left, however detached).
    candidate_processes_killed: int = 0
    # What was still running when the grader ended the command (its census, grading.census):
    # after a timeout, the stuck tree; after a normal exit, what the leader left behind.
    left_running: tuple[str, ...] = ()


def marked_pids(run_id: str) -> list[int]:
    """PIDs of live processes whose initial environment carries ``GRADING_RUN_ID=run_id``."""
    needle = f"{MARKER_VAR}={run_id}".encode()
    me = os.getpid()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                environ = fh.read()
        except OSError:  # gone already, or another user's process
            continue
        if needle in environ.split(b"\0"):
            found.append(int(name))
    return found


def _sweep(run_id: str) -> tuple[int, int]:
    """SIGKILL every process carrying the marker until none is left; (killed, survivors)."""
    killed: set[int] = set()
    for _ in range(_SWEEP_ROUNDS):
        pids = marked_pids(run_id)
        if not pids:
            return len(killed), 0
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
            except PermissionError:  # not ours: nothing we can do, counted as a survivor
                pass
        time.sleep(0.02)
    return len(killed), len(marked_pids(run_id))


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _left_running(pgid: int, uid: int | None, *, leader_exited: bool,
                  stacks_dir: Path | None = None, owner: int | None = None) -> list[str]:
    """The census of what runs in the command's process group and, given ``uid`` (a candidate
    command whose end reaps its uid), of every process of that uid (what left the group too);
    the exited leader (a zombie until waited for) is not listed. Given ``stacks_dir`` (a
    candidate command's), the census is followed by what those processes answer when asked for
    their stacks (``grading.stacks``; files owned by ``owner``). Evidence only: a failure to
    read is an empty census."""
    try:
        pids = set(census.group_members(pgid))
        if uid is not None:
            pids |= set(sealed.processes_of(uid))
        if leader_exited:
            pids.discard(pgid)
        lines = census.census(pids)
        if lines and stacks_dir is not None:
            lines += stacks.collect(pids, stacks_dir, owner)
        return lines
    except OSError:
        return []


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _LogPump(threading.Thread):
    """Copies the child's output to the log file, dropping everything past ``cap`` bytes."""

    def __init__(self, fd: int, log_path: Path, cap: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.cap = cap
        self.written = 0
        self.truncated = False
        self.stop = threading.Event()
        self.out = open(log_path, "ab")  # closed at the end of run()

    def run(self) -> None:
        drain_until: float | None = None
        try:
            while True:
                if self.stop.is_set():
                    # A writer that escaped the kill may hold the pipe open (no EOF ever) or
                    # keep it full: drain what is there, briefly, then stop.
                    drain_until = drain_until or time.monotonic() + _DRAIN_S
                    if time.monotonic() > drain_until:
                        break
                ready, _, _ = select.select([self.fd], [], [], 0.1)
                if not ready:
                    if self.stop.is_set():
                        break
                    continue
                data = os.read(self.fd, _READ_CHUNK)
                if not data:
                    break
                room = self.cap - self.written
                if room > 0:
                    self.out.write(data[:room])
                    # Flushed per chunk so watchdogs reading the log see progress live.
                    self.out.flush()
                    self.written += min(room, len(data))
                if len(data) > room:
                    self.truncated = True
        finally:
            if self.truncated:
                self.out.write(f"\n[grading] log truncated at {self.cap} bytes\n".encode())
            self.out.close()


def _wait_exited(pid: int) -> bool:
    """True once ``pid`` has exited; it is left unreaped so its PID (and PGID) stay reserved."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


class _Process(Protocol):
    pid: int

    def exited(self) -> bool: ...

    def wait(self) -> int: ...


class _Fresh:
    """A ``Popen`` child, left unreaped until :meth:`wait` (see ``_wait_exited``)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.pid = popen.pid

    def exited(self) -> bool:
        return self.popen.returncode is not None or _wait_exited(self.pid)

    def wait(self) -> int:
        return self.popen.wait()


def _start(argv: list[str], cwd: Path, env: dict[str, str], out_fd: int,
           identity: sealed.PopenIdentity | None) -> _Process:
    """Start the command in its own session with stdout/stderr on ``out_fd``: forked from a
    warm server when mutation analysis switched warm starts on (candidate commands only,
    ``grading.warm_start``), else a fresh ``Popen``."""
    if identity is not None and warm_start.enabled():
        warm = warm_start.start(argv, cwd, env, out_fd, identity)
        warm_start.count(warm)
        if warm is not None:
            return warm
    elif identity is None and (judge := warm_judge.start(argv, cwd, env, out_fd)) is not None:
        return judge
    options: dict[str, Any] = {"cwd": cwd, "stdin": subprocess.DEVNULL, "stdout": out_fd,
                               "stderr": out_fd, "start_new_session": True, "close_fds": True}
    if identity is not None:  # as a process of the current job: its uid and its cgroup
        return _Fresh(sealed.candidate_popen(argv, env=env, **options))
    return _Fresh(subprocess.Popen(argv, env=env, **options))


def _judges_own(name: str, value: str) -> bool:
    """Whether ``name=value`` in a candidate run's environment is only the judge's own: it
    holds the same value in the judge's environment and is not on the allow-list. Callers build
    a run's environment from the judge's and add what the run needs (``TORCH_LOGS`` for a
    check, the task's own variables); what they add reaches the run, what they copied stays
    out (``CANDIDATE_ENV``)."""
    return name not in CANDIDATE_ENV and os.environ.get(name) == value


def run_command(
    cmd: Sequence[str] | str,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    log_path: Path,
    *,
    watchdog: Watchdog | None = None,
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
    as_candidate: bool = True,
    reap_candidate: bool = True,
) -> RunResult:
    """Run ``cmd`` (argv, or a string for ``/bin/sh -c``) with stdout+stderr to ``log_path``.

    Whatever happens, no process of the run is alive when this returns: the process group is
    SIGKILLed and marked processes are swept both after a timeout and after a normal exit.
    ``as_candidate`` (the default) runs it as the candidate uid; only the judge's own commands
    pass False. ``reap_candidate=False`` leaves other candidate processes alone: a launcher
    whose ranks run side by side reaps once, after the last rank.
    """
    identity = sealed.popen_identity() if as_candidate else None
    run_id = str(uuid.uuid4())
    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    child_env = dict(env)
    left_out: list[str] = []
    if as_candidate:
        left_out = sorted(k for k, v in child_env.items() if _judges_own(k, v))
        child_env = {k: v for k, v in child_env.items() if not _judges_own(k, v)}
    scratch = stacks_dir = None
    if as_candidate:
        # Its own home and temp folder: the judge's are closed to it, and a shared one would
        # let one run leave files for the next.
        scratch = sealed.job_dir("scratch")
        child_env["HOME"] = child_env["TMPDIR"] = str(scratch)
        stacks_dir = scratch / stacks.FOLDER
        child_env[stacks.STACKS_DIR_VAR] = str(stacks_dir)
    # One thread each: results must not depend on the grading machine's core count, and two
    # CPUs shared by several processes oversubscribe quickly.
    child_env["OMP_NUM_THREADS"] = "1"
    child_env["MKL_NUM_THREADS"] = "1"
    child_env[MARKER_VAR] = run_id
    if as_candidate:
        # Only the judge's pytest (which starts the candidate's processes) is told; the
        # candidate's processes start nothing warm.
        child_env.pop(warm_start.WARM_START_VAR, None)
        child_env.pop(warm_start.DAEMONS_VAR, None)

    log_path.parent.mkdir(parents=True, exist_ok=True)
    shown = cmd if isinstance(cmd, str) else " ".join(argv)
    with open(log_path, "wb") as fh:
        fh.write(f"[grading] $ {shown}\n[grading] cwd {cwd}, timeout {timeout_s:g} s\n".encode())
        if left_out:  # named, not shown: their values are the judge's
            fh.write(f"[grading] environment: left out {', '.join(left_out)}\n".encode())

    read_fd, write_fd = os.pipe()
    try:
        proc = _start(argv, cwd, child_env, write_fd, identity)
    except BaseException:
        os.close(read_fd)
        os.close(write_fd)
        raise
    os.close(write_fd)
    if isinstance(proc, warm_start.WarmProcess):
        # Before the pump starts: the child's first output waits in the pipe until then.
        with open(log_path, "ab") as fh:
            fh.write(b"[grading] warm start (forked from grading.warm_start's server)\n")
    pump = _LogPump(read_fd, log_path, max_log_bytes)
    pump.start()

    start = time.monotonic()
    deadline = start + timeout_s
    kill_reason: str | None = None
    left: list[str] = []
    owner = identity.get("user") if identity else None
    # The census lists the uid's other processes only when the end of this run kills them.
    reaped_uid = owner if reap_candidate else None
    try:
        while not proc.exited():
            if time.monotonic() >= deadline:
                kill_reason = f"hard timeout of {timeout_s:g} s"
            elif watchdog is not None:
                kill_reason = watchdog()
            if kill_reason is not None:
                left = _left_running(proc.pid, reaped_uid, leader_exited=False,
                                     stacks_dir=stacks_dir, owner=owner)
                _killpg(proc.pid)
                while not proc.exited():
                    time.sleep(0.01)
                break
            time.sleep(_POLL_S)
        duration = time.monotonic() - start
        if kill_reason is None:
            left = _left_running(proc.pid, reaped_uid, leader_exited=True,
                                 stacks_dir=stacks_dir, owner=owner)
        # The leader is a zombie now, so its PGID cannot have been recycled: safe to kill the
        # group even after a normal exit, which takes out children left running in background.
        _killpg(proc.pid)
        killed, survivors = _sweep(run_id)
    finally:
        if not proc.exited():
            # Reached only when the grader itself is interrupted: still leave nothing behind.
            _killpg(proc.pid)
            _sweep(run_id)
        rc = proc.wait()
        reaped = sealed.end_job() if as_candidate and reap_candidate else 0
        if scratch is not None and reap_candidate:
            shutil.rmtree(scratch, ignore_errors=True)
        pump.stop.set()
        pump.join(timeout=5)
        os.close(read_fd)

    timed_out = kill_reason is not None
    result = RunResult(
        # A timed-out run was ended by the grader: a status of its own (a process may exit when
        # asked for its stacks before the kill lands, grading.stacks) is not its result.
        exit_code=rc if rc >= 0 and not timed_out else None,
        signal=-rc if rc < 0 else None,
        timed_out=timed_out,
        duration_s=round(duration, 3),
        log_path=log_path,
        run_id=run_id,
        kill_reason=kill_reason,
        log_truncated=pump.truncated,
        stragglers_killed=killed,
        survivors=survivors,
        candidate_processes_killed=reaped,
        left_running=tuple(left),
    )
    with open(log_path, "ab") as fh:
        if timed_out:
            end = f"killed ({kill_reason})"
        elif rc < 0:
            end = f"killed by signal {signal_name(-rc)}"
        else:
            end = f"exit code {rc}"
        fh.write(f"\n[grading] {end} after {duration:.2f} s\n".encode())
        if left:
            when = "when it was killed" if timed_out else "after it ended (killed then)"
            fh.write(f"[grading] still running {when}:\n".encode()
                     + "".join(f"[grading]   {line}\n" for line in left).encode())
    return result
