"""Where a stuck candidate process waits: its own Python stacks, asked for without ptrace.

The census (``grading.census``) says what was still running when the grader ended a command,
from what ``/proc`` shows any uid: states, wait channels, thread names. It cannot say where in
the program a process waits; py-spy could, but it needs ``CAP_SYS_PTRACE``, which the judge
does not hold. So each candidate process is asked to say it itself. The grader image imports
this module at every interpreter start (a ``.pth`` file, like ``grading.trace``); when
``GRADING_STACKS_DIR`` is set (the grader sets it for candidate commands only),
:func:`install` registers ``faulthandler`` for ``SIGUSR2`` with a file of its own in that
folder. Before the grader kills what a command left running, :func:`collect` sends each such
process ``SIGUSR2`` and reads what it wrote: every thread's Python stack, written from the
signal handler without the GIL, so a process deadlocked on the GIL or blocked in C++ answers
too.

What a candidate process writes is its own word, and only evidence in the run's log: a
process that replaced the handler, ignores the signal or writes something else changes no
outcome. The judge reads the files as the judge reads every candidate output: no link is
followed, only regular files the job's uid owns, a bounded number of bytes, every line
escaped. A warm-started process (mutation analysis) runs :func:`install` once it has its run's
environment (``grading.warm_server``). A process with no handler for ``SIGUSR2`` (one that never
ran this hook: ``python -S``, a shell) is not asked, since the signal's default action would
end it before the grader's own kill. Every line a process wrote is logged after ``| ``, so it
cannot pass for one of the grader's.
"""

from __future__ import annotations

import os
import signal
import stat
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # every interpreter of the grader image imports this module: keep it light
    from collections.abc import Callable, Iterable
    from pathlib import Path

STACKS_DIR_VAR = "GRADING_STACKS_DIR"
# The folder's name in a candidate run's scratch folder (its HOME and TMPDIR).
FOLDER = ".grading-stacks"
SIGNAL = signal.SIGUSR2
# Of a hang's tree (a test runner, a launcher, its ranks), the first few tell the story.
MAX_PROCESSES = 6
MAX_BYTES = 16 * 1024
MAX_LINE_CHARS = 200
MAX_LINES = 120  # per process: a few threads' stacks
# faulthandler writes from the signal handler at once; a loaded host may take a moment to run it.
WAIT_S = 2.0
_POLL_S = 0.1

_kept: list[object] = []  # the open dump file of this process (faulthandler keeps only its fd)


def _dump_path(folder: str, pid: int) -> str:
    return os.path.join(folder, f"stacks-{pid}.txt")


def install() -> None:
    """In a candidate process: dump every thread's stack to this process's file on SIGUSR2,
    if the grader asked for it; never raises (a failure only means no stacks)."""
    folder = os.environ.get(STACKS_DIR_VAR)
    if not folder:
        return
    try:
        import faulthandler

        def register() -> None:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            out = open(_dump_path(folder, os.getpid()), "a")  # kept open: faulthandler holds its fd
            faulthandler.register(SIGNAL, file=out, all_threads=True, chain=False)
            _kept[:] = [out]

        register()
        # A forked child (multiprocessing, a launcher's workers) writes to a file of its own pid.
        os.register_at_fork(after_in_child=lambda: _quietly(register))
    except Exception:  # diagnostics only: never change how the program runs
        return


def _quietly(action: Callable[[], None]) -> None:
    try:
        action()
    except Exception:
        pass


def _read_dump(folder_fd: int, pid: int, uid: int | None) -> str:
    """What ``pid`` wrote, or "" when there is nothing the judge may read."""
    try:
        fd = os.open(f"stacks-{pid}.txt", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK,
                     dir_fd=folder_fd)
    except OSError:
        return ""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (uid is not None and info.st_uid != uid):
            return ""
        return os.read(fd, MAX_BYTES).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _status(pid: int) -> tuple[int | None, int]:
    """(real uid, caught-signal mask) of ``pid`` from /proc/PID/status, which any uid may read;
    (None, 0) when it cannot be read. Split on newlines only: the process's name (its own
    choice) is shown with a carriage return left as it is, and ``splitlines`` would make a
    forged line of it."""
    uid, caught = None, 0
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh.read(8192).split(b"\n"):
                if line.startswith(b"Uid:"):
                    uid = int(line.split()[1])
                elif line.startswith(b"SigCgt:"):
                    caught = int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        return None, 0
    return uid, caught


def _ask(pid: int, owner: int | None) -> bool:
    """Send ``pid`` the request if it is still the process that was listed, belongs to
    ``owner`` (when given) and has a handler for the signal: the default action would end a
    process without one (a shell leading the command, a launcher) before the grader's own kill
    and change how the run is said to have ended. The pidfd pins the process: if ``pid`` ended
    and was reused after it was opened, the send fails rather than reach the newcomer."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        uid, caught = _status(pid)
        if (owner is not None and uid != owner) or not caught >> (SIGNAL - 1) & 1:
            return False
        signal.pidfd_send_signal(fd, SIGNAL)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def collect(pids: Iterable[int], folder: Path, uid: int | None) -> list[str]:
    """Ask the first of ``pids`` that catch the signal for their stacks and return log lines of
    the answers (processes and files of ``uid`` when given). ``folder`` is the run's
    ``GRADING_STACKS_DIR``."""
    asked: list[int] = []
    for pid in sorted(set(pids)):
        if len(asked) == MAX_PROCESSES:
            break
        if _ask(pid, uid):
            asked.append(pid)
    if not asked:
        return []
    answers: dict[int, str] = {}
    deadline = time.monotonic() + WAIT_S
    while True:
        time.sleep(_POLL_S)
        before = dict(answers)
        try:
            folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            folder_fd = -1
        if folder_fd >= 0:
            try:
                for pid in asked:
                    answers[pid] = _read_dump(folder_fd, pid, uid)
            finally:
                os.close(folder_fd)
        # Every process answered, and no answer grew since the last look (a dump is written
        # as it walks the threads).
        if all(answers.get(p) for p in asked) and answers == before:
            break
        if time.monotonic() >= deadline:
            break
    lines = []
    for pid in asked:
        text = answers.get(pid, "")
        if not text.strip():
            lines.append(f"pid {pid}: no stacks (it did not answer SIGUSR2)")
            continue
        lines.append(f"pid {pid}, in its own words (faulthandler):")
        # Newlines only (a carriage return is escaped like any other byte), and a bounded
        # number of lines: blank lines must not carry the log past its cap.
        rows = text.rstrip("\n").split("\n")
        lines += ["  | " + ascii(raw[:MAX_LINE_CHARS])[1:-1] for raw in rows[:MAX_LINES]]
        if len(rows) > MAX_LINES or len(text.encode()) >= MAX_BYTES:
            lines.append(f"  ... cut at {MAX_LINES} lines or {MAX_BYTES} bytes")
    return lines
