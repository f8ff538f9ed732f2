"""Warm judges (mutation analysis): the judge's pytest forked from the worker's daemon.

Runs inside the grader image (tests/integration/test_grader_image.py), as the judge does: root.
The same
judge command (a pytest run over a small checks folder) is started fresh and warm, and what it
observes about itself and how it ends are compared.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import daemon_pids, parent_pid, processes_with

from grading import sealed, warm_judge, warm_start
from grading.run import run_command

# What each run is asked to do comes from a file, not the environment: the environment (less
# its per-run variables) names the daemon, and every run here must share one.
CHECKS = '''
import json, os, sys, signal, tempfile, resource, random

ASK = json.load(open(os.path.join(os.path.dirname(__file__), "ask.json")))

def test_facts():
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    facts = {
        "ids": [os.getuid(), os.geteuid(), os.getgid(), sorted(os.getgroups())],
        "caps": {k: v.strip() for k, v in status.items() if k.startswith("Cap")},
        "umask": status["Umask"].strip(), "cwd": os.getcwd(),
        "sid_is_self": os.getsid(0) == os.getpid(),
        "env": dict(os.environ), "argv_tail": sys.argv[1:], "path0": sys.path[0],
        "executable": sys.executable, "tmp": tempfile.gettempdir(),
        "fds": sorted(os.listdir("/proc/self/fd")),
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
        "sigint": str(signal.getsignal(signal.SIGINT)), "main": sys.modules["__main__"].__name__,
        "stdout": [sys.stdout.encoding, sys.stdout.line_buffering], "rand": random.random(),
    }
    facts["env"].pop("PYTEST_CURRENT_TEST", None)
    with open(ASK["facts_out"], "w") as fh:
        json.dump(facts, fh)

def test_fails_when_asked():
    assert not ASK.get("fail"), "asked to fail"

def test_sleeps_when_asked():
    if ASK.get("sleep"):
        import time
        time.sleep(ASK["sleep"])
'''


@pytest.fixture()
def judge_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # Short: a Unix socket's path has a length limit.
    folder = Path(tempfile_short())
    folder.chmod(0o700)
    warm_judge.configure(folder)
    yield folder
    warm_judge.configure(None)
    warm_judge._close_sessions()
    _stop_daemons(folder)


def tempfile_short() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="wj-", dir="/tmp")


def _stop_daemons(folder: Path) -> None:
    """The daemon outlives every client by design; a test ends what it started."""
    for log in folder.glob("judge-*.log"):
        for pid in processes_with(str(log.with_suffix(".sock"))):
            os.kill(pid, signal.SIGKILL)


def checks(tmp_path: Path, **ask: Any) -> Path:
    folder = tmp_path / "checks"
    folder.mkdir(exist_ok=True)
    (folder / "test_judge.py").write_text(CHECKS)
    (folder / "ask.json").write_text(json.dumps(ask))
    return folder


def judge_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "HOME": str(home),
            "TMPDIR": str(home), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def run_judge(tmp_path: Path, name: str, *tests: str, **ask: Any) -> tuple[Any, str]:
    folder = checks(tmp_path, **ask)
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null",
            "--rootdir", str(folder), *[f"{folder}/test_judge.py::{t}" for t in tests]]
    log = tmp_path / f"{name}.log"
    res = run_command(argv, cwd, judge_env(tmp_path), 120, log, as_candidate=False)
    return res, log.read_text()


def warm(log: str) -> bool:
    return "[grading] warm start" in log


def test_a_warm_judge_observes_what_a_fresh_one_does(tmp_path: Path) -> None:
    def facts(name: str) -> dict[str, Any]:
        out = tmp_path / f"{name}.json"
        res, log = run_judge(tmp_path, name, "test_facts", facts_out=str(out))
        assert res.exit_code == 0, log[-3000:]
        got = json.loads(out.read_text())
        got["env"].pop("GRADING_RUN_ID")  # per run
        return dict(got, warm=warm(log))

    cold = facts("cold")
    folder = Path(tempfile_short())
    folder.chmod(0o700)
    warm_judge.configure(folder)
    try:
        hot = facts("warm")
        again = facts("again")
    finally:
        warm_judge.configure(None)
        warm_judge._close_sessions()
        _stop_daemons(folder)
    assert (cold["warm"], hot["warm"], again["warm"]) == (False, True, True)
    assert warm_judge.started() >= 2
    # Each judge draws its own random numbers, fresh or warm.
    assert len({cold["rand"], hot["rand"], again["rand"]}) == 3
    for one in (cold, hot, again):
        del one["rand"], one["warm"]
    env_keys = {k for k in hot["env"]} ^ {k for k in cold["env"]}
    assert env_keys == set(), env_keys
    assert hot == cold and again == cold, json.dumps(
        {k: (cold[k], hot[k]) for k in cold if cold[k] != hot.get(k)}, indent=1)


def test_a_warm_judge_ends_as_a_fresh_one_and_the_daemon_serves_the_next_process(
        tmp_path: Path, judge_folder: Path) -> None:
    res, log = run_judge(tmp_path, "fail", "test_fails_when_asked", fail=True)
    assert warm(log) and res.exit_code == 1 and "asked to fail" in log
    res, log = run_judge(tmp_path, "pass", "test_fails_when_asked")
    assert warm(log) and res.exit_code == 0 and "1 passed" in log
    (sock,) = judge_folder.glob("judge-*.sock")
    daemon = daemon_pids(sock)
    assert len(daemon) == 1
    # The next grading process (a new client) finds the same daemon: nothing is imported again.
    warm_judge._close_sessions()
    started = time.monotonic()
    res, log = run_judge(tmp_path, "next", "test_fails_when_asked")
    assert warm(log) and res.exit_code == 0
    assert daemon_pids(sock) == daemon
    assert time.monotonic() - started < 60
    # A hang is killed with its group, as a fresh judge's is.
    folder = checks(tmp_path, sleep=1000)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null",
            "--rootdir", str(folder), f"{folder}/test_judge.py::test_sleeps_when_asked"]
    res = run_command(argv, tmp_path / "cwd", judge_env(tmp_path), 8,
                      tmp_path / "hang.log", as_candidate=False)
    assert warm((tmp_path / "hang.log").read_text())
    assert res.timed_out and res.signal == signal.SIGKILL
    assert warm_judge.failure() is None


def test_the_candidate_cannot_reach_the_daemon(tmp_path: Path, judge_folder: Path) -> None:
    res, log = run_judge(tmp_path, "pass", "test_fails_when_asked")
    assert warm(log) and res.exit_code == 0
    (sock,) = judge_folder.glob("judge-*.sock")
    probe = sealed.job_dir("reach")
    (probe / "reach.py").write_text(
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
        "try:\n"
        "    s.connect(sys.argv[1]); print('connected')\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__)\n")
    sealed.make_readable_tree(probe)
    res = run_command([sys.executable, str(probe / "reach.py"), str(sock)], probe,
                      {"PATH": os.environ["PATH"]}, 60, tmp_path / "reach.log")
    assert res.exit_code == 0
    assert "PermissionError" in (tmp_path / "reach.log").read_text()


def test_a_session_that_dies_under_its_judge_voids_the_grade(
        tmp_path: Path, judge_folder: Path) -> None:
    results: dict[str, Any] = {}

    def hang() -> None:
        results["res"], results["log"] = run_judge(tmp_path, "dies", "test_sleeps_when_asked",
                                                   sleep=1000)

    thread = threading.Thread(target=hang)
    thread.start()
    deadline = time.monotonic() + 60
    session = None
    while session is None and time.monotonic() < deadline:
        for server in warm_judge._sessions.values():
            for pid in list(server.children):
                session = parent_pid(pid)
        time.sleep(0.1)
    assert session is not None
    os.kill(session, signal.SIGKILL)
    thread.join(60)
    assert results["res"].signal == signal.SIGKILL
    assert warm_judge.failure() is not None and "died under it" in warm_judge.failure()
    # Its children were killed with it; the next judge starts from a new session.
    warm_judge._sessions.clear()
    res, log = run_judge(tmp_path, "after", "test_fails_when_asked")
    assert warm(log) and res.exit_code == 0


def test_a_judge_forked_but_never_reported_dies_and_voids_the_grade(
        tmp_path: Path, judge_folder: Path) -> None:
    """A session that dies between forking a judge and telling the client its pid: nobody knows
    that judge, so the kernel kills it with its parent, and the grade is void."""
    env = judge_env(tmp_path)
    # The judge's identity as run_command builds it (the per-run variables left out).
    identity = warm_start.identity_env({**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    assert identity is not None
    sock = warm_start.daemon_path(judge_folder, "judge", identity, warm_judge.PRELOAD)
    orphan = tmp_path / "orphan.pid"
    code = ("import os, signal, sys\n"
            "from grading import warm_server\n"
            "send = warm_server.send_message\n"
            "def dying_send(sock, msg):\n"
            "    if 'pid' in msg:\n"
            "        open(sys.argv[2], 'w').write(str(msg['pid']))\n"
            "        os.kill(os.getpid(), signal.SIGKILL)\n"
            "    send(sock, msg)\n"
            "warm_server.send_message = dying_send\n"
            "warm_server.daemon(sys.argv[1], ())\n")
    daemon = subprocess.Popen([sys.executable, "-c", code, str(sock), str(orphan)],
                              env=warm_start.server_env(identity), start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        res, log = run_judge(tmp_path, "unreported", "test_fails_when_asked")
        # The judge ran fresh instead; the forked one is gone, and the grade is void.
        assert res.exit_code == 0 and not warm(log)
        assert warm_judge.failure() is not None
        pid = int(orphan.read_text())
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid)
    finally:
        daemon.kill()
        daemon.wait()
        warm_judge._sessions.clear()


def _alive(pid: int) -> bool:
    try:
        status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    except OSError:
        return False
    return not status["State"].strip().startswith(("Z", "X"))
