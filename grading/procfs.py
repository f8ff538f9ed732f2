"""What ``/proc`` says of a candidate's processes, read as any uid may read it (no ptrace).

Every name in these files is the candidate's choice (``prctl``), so fields are found after the
last ``)`` of a ``stat`` line, never by splitting the whole line.
"""

from __future__ import annotations

import os

# include/linux/sched.h: set at the start of do_exit(); a task with it never returns to user
# space.
PF_EXITING = 0x00000004
_SIGKILL_BIT = 1 << (9 - 1)


def stat_fields(path: str) -> list[str]:
    """The fields after the command name of a ``/proc`` ``stat`` file (state, parent, group,
    ...; the name is the candidate's choice and may hold any character, parentheses included),
    or [] when the process is gone."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(4096).decode("ascii", "replace")
    except OSError:
        return []
    return text[text.rfind(")") + 1:].split() if ")" in text else []


def _kill_pending(status_path: str) -> bool:
    """Whether SIGKILL is pending for the thread (its own set or its process's shared one)."""
    try:
        with open(status_path, "rb") as fh:
            text = fh.read(8192).decode("ascii", "replace")
    except OSError:
        return True  # gone
    # Split on newlines only: the first line holds the candidate's chosen name.
    for line in text.split("\n"):
        if line.startswith(("SigPnd:\t", "ShdPnd:\t")):
            try:
                if int(line.split("\t", 1)[1].strip(), 16) & _SIGKILL_BIT:
                    return True
            except ValueError:
                continue
    return False


def thread_ended(pid: str | int, tid: str | int) -> bool:
    """Whether thread ``tid`` of ``pid`` can never run user code again: gone, dead (``Z``,
    ``X``), exiting (``PF_EXITING``) or with SIGKILL pending. A task killed with a large
    address space spends seconds to minutes in the kernel tearing down its page tables (a
    candidate can choose how long); it is listed all that time, and is no longer a process of
    the job that can act."""
    base = f"/proc/{pid}/task/{tid}"
    fields = stat_fields(f"{base}/stat")
    if len(fields) < 7 or fields[0] in ("Z", "X", "x"):
        return True
    try:
        if int(fields[6]) & PF_EXITING:
            return True
    except ValueError:
        pass
    return _kill_pending(f"{base}/status")


# How many listings of a process's threads a check reads before it calls the process running.
_LISTINGS = 64


def _threads(pid: str | int) -> set[str] | None:
    try:
        return set(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None  # gone


def process_ended(pid: str | int) -> bool:
    """Whether no thread of ``pid`` can run user code again (see :func:`thread_ended`).

    One listing is not enough: a thread may start the next and end while its listing is read,
    so every listed thread is gone by the time it is looked at while the new one runs (a
    process whose threads hop like that was called ended one scan in five, found by an
    adversarial review). So the threads are listed again after they were checked, and the
    process is ended only when that listing holds no thread the check did not see ended: any
    thread alive then was alive at the first listing too, and was seen unable to run. A
    process that keeps adding threads faster than they can be checked is called running."""
    seen = _threads(pid)
    for _ in range(_LISTINGS):
        if seen is None:
            return True
        if not all(thread_ended(pid, tid) for tid in seen):
            return False
        now = _threads(pid)
        if now is None or now <= seen:
            return True
        seen = now
    return False
