"""``grading.procfs``: what /proc says of a candidate's process, which the candidate shapes.

A process whose threads hop (each starts the next and ends, its leader gone with the raw exit
system call) is never called ended while it runs: one listing of its threads can hold only
threads that are gone by the time they are read.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from grading import procfs

# The exit system call (one thread), by machine.
SYS_EXIT = {"x86_64": 60, "aarch64": 93}

HOPPER = """
import ctypes, os, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
deadline = time.monotonic() + float(sys.argv[1])

def hop():
    if time.monotonic() > deadline:
        os._exit(0)
    threading.Thread(target=hop).start()

threading.Thread(target=hop).start()
print("ready", flush=True)
libc.syscall(int(sys.argv[2]), 0)  # the leader thread ends; the process lives on in its threads
"""


@pytest.mark.skipif(os.uname().machine not in SYS_EXIT, reason="exit syscall number unknown")
def test_a_process_whose_threads_hop_is_never_called_ended_while_it_runs() -> None:
    hopper = subprocess.Popen(
        [sys.executable, "-c", HOPPER, "30", str(SYS_EXIT[os.uname().machine])],
        stdout=subprocess.PIPE, text=True)
    try:
        assert hopper.stdout is not None and hopper.stdout.readline().strip() == "ready"
        scans = called_ended = 0
        until = time.monotonic() + 3.0
        while time.monotonic() < until:
            scans += 1
            called_ended += procfs.process_ended(hopper.pid)
        assert hopper.poll() is None, "the hopper ended before the scans did"
        # Before the second listing, a loaded 2-core host called it ended about once in 300.
        assert called_ended == 0, f"called ended {called_ended} times in {scans} scans"
    finally:
        hopper.kill()
        hopper.wait()
    assert procfs.process_ended(hopper.pid)  # reaped: gone


def test_a_sleeping_process_runs_and_a_killed_one_has_ended() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not procfs.process_ended(sleeper.pid)
        sleeper.kill()
        sleeper.wait()
        assert procfs.process_ended(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
