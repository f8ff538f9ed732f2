"""grading.stacks on this host: a real process installs the hook, answers SIGUSR2 with its
stacks, and the judge's side asks only processes that catch the signal and reads only what it
may. (The grader image's own wiring, a .pth hook and run_command, is tested in tests/grader.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grading import stacks
from harness.paths import REPO_ROOT

_STUCK = """
import os, sys, time
import grading.stacks
grading.stacks.install()
def waiting_here_for_the_test():
    print("ready", flush=True)
    time.sleep(1000)
waiting_here_for_the_test()
"""

_HANDLERLESS = """
import ctypes, time
ctypes.CDLL(None).prctl(15, b"\\rSigCgt:\\t800", 0, 0, 0)  # PR_SET_NAME
print("ready", flush=True)
time.sleep(1000)
"""


@contextmanager
def _running(code: str, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """``code`` in a fresh ``python -S``, once it says it is ready; SIGKILLed afterwards."""
    proc = subprocess.Popen([sys.executable, "-S", "-c", code], env=env, text=True,
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _hooked_env(folder: Path) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT),
            stacks.STACKS_DIR_VAR: str(folder)}


def test_a_process_with_the_hook_answers_with_its_stacks(tmp_path: Path) -> None:
    folder = tmp_path / "stacks"
    with _running(_STUCK, _hooked_env(folder)) as proc:
        lines = stacks.collect([proc.pid], folder, os.getuid())
    assert lines[0] == f"pid {proc.pid}, in its own words (faulthandler):", lines
    assert any("waiting_here_for_the_test" in line for line in lines), lines
    assert all(line.startswith("  | ") for line in lines[1:]), lines


def test_a_process_without_a_handler_is_not_asked_whatever_its_name(tmp_path: Path) -> None:
    """Its name forges a SigCgt line in /proc/PID/status; the signal's default action would end
    it, so it must not be sent."""
    with _running(_HANDLERLESS, {"PATH": os.environ["PATH"]}) as proc:
        assert stacks.collect([proc.pid], tmp_path, None) == []
        time.sleep(0.2)
        assert proc.poll() is None, "the process was signalled"
    assert proc.returncode == -signal.SIGKILL


def test_a_process_of_another_uid_is_not_asked(tmp_path: Path) -> None:
    folder = tmp_path / "stacks"
    with _running(_STUCK, _hooked_env(folder)) as proc:
        assert stacks.collect([proc.pid], folder, os.getuid() + 1) == []


def test_the_judge_reads_no_link_and_no_fifo_and_bounds_what_it_reads(tmp_path: Path) -> None:
    folder = tmp_path / "stacks"
    folder.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET")
    (folder / "stacks-1.txt").symlink_to(secret)
    os.mkfifo(folder / "stacks-2.txt")
    (folder / "stacks-3.txt").write_bytes(b"x" * (stacks.MAX_BYTES * 4))
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert stacks._read_dump(fd, 1, None) == ""
        assert stacks._read_dump(fd, 2, None) == ""
        assert len(stacks._read_dump(fd, 3, None)) == stacks.MAX_BYTES
        assert stacks._read_dump(fd, 3, os.getuid() + 1) == ""  # not the job's file
    finally:
        os.close(fd)
