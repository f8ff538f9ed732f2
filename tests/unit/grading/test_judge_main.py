"""``python -m grading.judge_main``: pytest's results and exit status, without the teardown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHECKS = '''
import atexit
import sys
import threading
import time
from pathlib import Path

OUT = Path(__file__).parent


def _late_writer():
    time.sleep(0.5)
    (OUT / "thread.txt").write_text("joined")


def test_passes():
    atexit.register(lambda: (OUT / "atexit.txt").write_text("ran"))
    threading.Thread(target=_late_writer).start()  # not a daemon: the exit waits for it
    sys.stdout.write("unflushed tail")


def test_verdict():
    assert VERDICT
'''


def _judge(folder: Path, verdict: bool) -> tuple[subprocess.CompletedProcess[str], Path]:
    (folder / "test_checks.py").write_text(CHECKS.replace("VERDICT", str(verdict)))
    junit = folder / "junit.xml"
    done = subprocess.run(
        [sys.executable, "-m", "grading.judge_main", "-q", "-p", "no:cacheprovider", "-s",
         "--junitxml", str(junit), str(folder / "test_checks.py")],
        cwd=folder, capture_output=True, text=True, timeout=120)
    return done, junit


def test_the_judge_ends_as_pytest_would_with_its_handlers_and_threads(tmp_path: Path) -> None:
    passing, junit = _judge(tmp_path, True)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert 'failures="0"' in junit.read_text() and "2 passed" in passing.stdout
    # A normal exit's duties before finalization are done: threads joined, exit handlers run,
    # the streams flushed.
    assert (tmp_path / "thread.txt").read_text() == "joined"
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert "unflushed tail" in passing.stdout


def test_the_judge_keeps_pytests_exit_status(tmp_path: Path) -> None:
    failing, junit = _judge(tmp_path, False)
    assert failing.returncode == 1 and 'failures="1"' in junit.read_text()
    usage = subprocess.run([sys.executable, "-m", "grading.judge_main", "--no-such-option"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert usage.returncode == 4, usage.stderr
