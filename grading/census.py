"""What a graded command left running: one bounded line per process, for the run's log.

A command that hangs, or whose leader exits while its children go on (a launcher killed by its
own test's timeout leaves its ranks), is ended by the grader; what was still running at that
moment is the evidence of where it waited. The judge reads only what ``/proc`` shows any uid
(no ptrace): each process's state, age and CPU time, its thread count, its threads' states
and names (a spinning thread shows as running, with CPU time close to its process's age), their
wait channels where the kernel shows them, and its command line. Every byte of a command line or
name is the candidate's: it is cut and escaped before it reaches a log.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable

from grading.procfs import stat_fields

# A fork bomb's census would be as long as the bomb: the first processes tell the story.
MAX_PROCESSES = 24
MAX_COMMAND_CHARS = 160
MAX_THREAD_NAMES = 6  # distinct thread names listed per process, the most common first
_TICKS = os.sysconf("SC_CLK_TCK")


def _read(path: str, limit: int = 4096) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError:
        return b""


def group_members(pgid: int) -> list[int]:
    """Every live process (and zombie) of process group ``pgid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(f"/proc/{entry}/stat")
            if len(fields) > 2 and fields[2] == str(pgid):
                found.append(int(entry))
    return sorted(found)


def _uptime() -> float:
    raw = _read("/proc/uptime").split()
    return float(raw[0]) if raw else 0.0


def _cpu_s(fields: list[str]) -> float:
    """User + system CPU seconds of a stat line's fields (after the name)."""
    try:
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (IndexError, ValueError):
        return 0.0


def _thread_name(pid: int, tid: str) -> str:
    # The name is the candidate's (prctl): escaped and cut like the command line.
    raw = _read(f"/proc/{pid}/task/{tid}/comm", 64).decode(errors="replace").strip()
    return ascii(raw[:16])[1:-1] or "?"


def process_line(pid: int, now: float | None = None) -> str | None:
    """``pid``'s one-line description, or None when it is gone."""
    fields = stat_fields(f"/proc/{pid}/stat")
    if len(fields) < 20:
        return None
    now = _uptime() if now is None else now
    age = max(0.0, now - int(fields[19]) / _TICKS)
    states: Counter[str] = Counter()
    names: Counter[str] = Counter()
    waits: Counter[str] = Counter()
    busy: list[str] = []  # threads not asleep: where a spin or an uninterruptible wait is
    try:
        tids = sorted((t for t in os.listdir(f"/proc/{pid}/task") if t.isdigit()), key=int)
    except OSError:
        tids = []
    for tid in tids:
        task = stat_fields(f"/proc/{pid}/task/{tid}/stat")
        name = _thread_name(pid, tid)
        names[name] += 1
        if task:
            states[task[0]] += 1
            if task[0] not in ("S", "I") and len(busy) < MAX_THREAD_NAMES:
                busy.append(f"{name} [{tid}] {task[0]} cpu {_cpu_s(task):.1f} s")
        # Shown only to a tracer-capable reader on most kernels ("0" otherwise).
        wchan = _read(f"/proc/{pid}/task/{tid}/wchan", 64).decode(errors="replace").strip()
        if wchan and wchan != "0":
            waits[ascii(wchan)[1:-1]] += 1
    threads = ", ".join(f"{s}x{n}" for s, n in sorted(states.items()))
    threads += "; named " + ", ".join(f"{n} x{c}" for n, c in names.most_common(MAX_THREAD_NAMES))
    if busy:
        threads += "; not asleep: " + ", ".join(busy)
    if waits:
        threads += "; waiting in " + ", ".join(f"{w}x{n}" for w, n in waits.most_common(4))
    command = _read(f"/proc/{pid}/cmdline", 4 * MAX_COMMAND_CHARS).replace(b"\0", b" ")
    text = command.decode(errors="replace").strip() or "(no command line)"
    return (f"pid {pid} ppid {fields[1]} state {fields[0]} age {age:.1f} s "
            f"cpu {_cpu_s(fields):.1f} s threads {len(tids)} ({threads}) "
            f"cmd {text[:MAX_COMMAND_CHARS]!a}")


def census(pids: Iterable[int]) -> list[str]:
    """Lines for at most ``MAX_PROCESSES`` of ``pids`` (the rest counted), the gone left out."""
    now = _uptime()
    ordered = sorted(set(pids))
    lines = [line for line in (process_line(p, now) for p in ordered[:MAX_PROCESSES]) if line]
    if len(ordered) > MAX_PROCESSES:
        lines.append(f"... and {len(ordered) - MAX_PROCESSES} more process(es)")
    return lines
