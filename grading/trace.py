"""Which lines of the graded code ran: line coverage for mutation analysis, off by default.

The grader image imports this module at every interpreter start (a ``.pth`` file), so it
reaches every process a grade starts (public tests, probes, torchrun ranks, multiprocessing
children) whatever command started it. It does nothing unless ``GRADING_TRACE_DIR`` and
``GRADING_TRACE_ROOT`` are set, which ``grading.mutants`` does only while it grades the
trusted, unmutated reference; session grades never set them.

Each process writes a header naming the check it ran for (``GRADING_TRACE_TEST``: a hidden
check's node id, empty for the public tests), then appends ``<file>\\t<line>`` the first time a
line of a file under the root runs, written at once (not at exit: ranks and multiprocessing
children often leave through ``os._exit``, which runs no exit handler), so nothing is lost to
buffering. Coverage only orders a mutant's checks (those that ran its statement first), so
neither over-reporting (another copy of the same file, e.g. the baseline's, counts too) nor
under-reporting (code run without Python line events, a process that drops the environment)
can change a result: ``grading.mutants`` runs every check on every survivor.

Per-check attribution is exact only when each check runs in its own pytest process: checks
share session fixtures and ``functools.cache`` results, whose candidate runs would otherwise be
filed under whichever check happened to run them first. ``grading.mutants`` therefore grades
the reference one hidden check per process.
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import Any

TRACE_DIR_VAR = "GRADING_TRACE_DIR"
TRACE_ROOT_VAR = "GRADING_TRACE_ROOT"
TRACE_TEST_VAR = "GRADING_TRACE_TEST"
# What the processes started outside any hidden check (the public test command) are filed under.
PUBLIC_KEY = ""
_HEADER = "#test\t"

# check -> file -> lines that ran in it
CoverageByCheck = dict[str, dict[str, set[int]]]


def install() -> None:
    """Start tracing this process if the environment asks for it; never raises."""
    out = os.environ.get(TRACE_DIR_VAR)
    root = os.environ.get(TRACE_ROOT_VAR)
    if not out or not root:
        return
    import threading  # only when tracing: every interpreter in the image imports this module

    try:
        prefix = os.path.realpath(root).rstrip(os.sep) + os.sep
        fd = os.open(os.path.join(out, f"{os.getpid()}-{os.urandom(8).hex()}.lines"),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        # One line, so a check id cannot forge records (ids never hold newlines).
        test = " ".join(os.environ.get(TRACE_TEST_VAR, PUBLIC_KEY).split())
        os.write(fd, f"{_HEADER}{test}\n".encode())
    except OSError:
        return
    seen: set[tuple[str, int]] = set()
    inside: dict[str, bool] = {}

    def on_line(frame: FrameType, event: str, arg: Any) -> Any:
        if event in ("line", "call"):
            key = (frame.f_code.co_filename, frame.f_lineno)
            if key not in seen:
                seen.add(key)
                try:
                    os.write(fd, f"{key[0]}\t{key[1]}\n".encode())
                except OSError:
                    pass
        return on_line

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        hit = inside.get(name)
        if hit is None:
            hit = inside[name] = os.path.realpath(name).startswith(prefix)
        if not hit:
            return None  # no line events for code outside the graded trees: torch stays fast
        on_line(frame, "call", arg)
        return on_line

    sys.settrace(on_call)
    threading.settrace(on_call)


def read_lines_by_check(trace_dir: str) -> CoverageByCheck:
    """``check -> file -> lines`` from every traced process (malformed lines skipped)."""
    ran: CoverageByCheck = {}
    try:
        names = os.listdir(trace_dir)
    except OSError:
        return ran
    for name in names:
        try:
            with open(os.path.join(trace_dir, name), encoding="utf-8", errors="replace") as fh:
                first = fh.readline()
                if not first.startswith(_HEADER):
                    continue
                lines = ran.setdefault(first[len(_HEADER):].rstrip("\n"), {})
                for line in fh:
                    path, _, number = line.rstrip("\n").rpartition("\t")
                    if path and number.isdigit():
                        lines.setdefault(path, set()).add(int(number))
        except OSError:
            continue
    return ran


def lines_of(ran: dict[str, set[int]], relative: str) -> set[int]:
    """Lines that ran in any copy of the repository file ``relative`` (matched by suffix)."""
    suffix = "/" + relative.lstrip("/")
    found: set[int] = set()
    for path, lines in ran.items():
        if path.endswith(suffix):
            found |= lines
    return found
