"""``python -m grading.judge_main``: the judge's pytest, ended without the interpreter's teardown.

When pytest's main returns, every result is written (the JUnit XML, the log). What a normal exit
then does, Python's finalization (clearing the judge's some 1,900 modules, torch among them),
measured 0.7-0.9 s of CPU per judge on the 2-core reference machine, more than the check that
kills a typical mutant needs. It cannot change a result, so it is skipped: non-daemon threads
are joined and exit handlers run as at a normal exit, the standard streams are flushed, and the
process ends with pytest's exit status. Only the judge's own process does this; candidate
processes always exit as the interpreter makes them.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import sys
import threading

import pytest


def main() -> None:
    status = pytest.console_main()
    # What Py_FinalizeEx does before clearing modules: wait for non-daemon threads, run the
    # exit handlers; then flush what the streams hold.
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    # And what extensions wrote through C's stdio, which exit() would flush and _exit does not.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)
    os._exit(status)


if __name__ == "__main__":
    main()
