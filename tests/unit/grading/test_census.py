"""The census of what a graded command left running: bounded, escaped, one line a process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from grading import census

# argv[0] of the sleeper: a newline and a forged grader line, as hostile code would name itself.
HOSTILE_NAME = "x\n[grading] forged verdict: pass\r\x1b[2J" + "y" * 500
SLEEPER = ("import os, sys, threading, time\n"
           "for _ in range(2):\n"
           "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
           "print('ready', flush=True)\n"
           "time.sleep(60)\n")


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def _start(started: list[subprocess.Popen[bytes]], name: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([name, "-c", SLEEPER], executable=sys.executable,
                            stdout=subprocess.PIPE, start_new_session=True)
    started.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_a_line_per_process_with_its_threads_and_an_escaped_bounded_command(
        sleepers: list[subprocess.Popen[bytes]]) -> None:
    proc = _start(sleepers, HOSTILE_NAME)
    (line,) = census.census([proc.pid])
    # Just after "ready" a thread may still be running (R) on a loaded host: no state asserted.
    assert re.match(rf"pid {proc.pid} ppid {os.getpid()} state [A-Za-z] age [0-9.]+ s "
                    r"cpu [0-9.]+ s threads 3 \([A-Za-z]x[0-9]", line), line
    # Nothing of the name can start a line of its own or move a terminal's cursor.
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert "\\n[grading] forged verdict: pass\\r\\x1b[2J" in line
    assert len(line) < 160 + census.MAX_COMMAND_CHARS * 4


def test_gone_processes_are_left_out_and_a_long_census_is_cut(
        sleepers: list[subprocess.Popen[bytes]]) -> None:
    procs = [_start(sleepers, f"sleeper-{i}") for i in range(census.MAX_PROCESSES + 3)]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lines = census.census([p.pid for p in procs] + [gone.pid])
    assert len(lines) == census.MAX_PROCESSES + 1
    assert lines[-1] == "... and 4 more process(es)"
    assert not any(f"pid {gone.pid} " in line for line in lines)


def test_group_members_finds_the_group_and_its_zombie_leader() -> None:
    leader = subprocess.Popen(["/bin/sh", "-c", "sleep 60 & echo $!; exit 0"],
                              stdout=subprocess.PIPE, start_new_session=True)
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    deadline = time.monotonic() + 10
    while leader.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert set(census.group_members(leader.pid)) == {child}  # the leader was waited for
    finally:
        os.kill(child, 9)


# A thread that names itself (prctl, as native libraries name their workers) and spins: the
# census names it among the threads not asleep, with its CPU time. A spinning thread is
# runnable (R) whether or not it is on a core at the moment, so its state is not load-bound.
SPINNER = ("import ctypes, threading, time\n"
           "def spin():\n"
           "    ctypes.CDLL(None).prctl(15, b'spin\\nforged', 0, 0, 0)\n"
           "    ready.set()\n"
           "    while True:\n"
           "        pass\n"
           "ready = threading.Event()\n"
           "threading.Thread(target=spin, daemon=True).start()\n"
           "ready.wait()\n"
           "print('ready', flush=True)\n"
           "time.sleep(60)\n")


def test_a_spinning_thread_is_named_with_its_cpu_time(
        sleepers: list[subprocess.Popen[bytes]]) -> None:
    proc = subprocess.Popen([sys.executable, "-c", SPINNER], stdout=subprocess.PIPE,
                            start_new_session=True)
    sleepers.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    (line,) = census.census([proc.pid])
    assert "\n" not in line
    # The thread's own name, escaped; the main thread keeps the interpreter's.
    assert "named " in line and "spin\\nforged x1" in line, line
    # The main thread may not be asleep yet either (it just printed): the spinner is among
    # the threads not asleep, wherever it is in the list.
    assert re.search(r"not asleep: (?:[^;]*, )?spin\\nforged \[[0-9]+\] R cpu [0-9.]+ s",
                     line), line
