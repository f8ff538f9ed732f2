"""The grader, run as it runs in its container: ``python -m grading`` in a real subprocess.

Like everything under ``tests/grader/``, these run inside the grader image, as root, where the
grader can drop candidate code to its own uid (``tests/integration/test_grader_image.py`` runs
them). Two
groups: the tiny-regression fixture task (a real torch training repo) and a pure-Python task
built on the fly, for the grader's logic (outcomes, rounds after a hang, restores, process
cleanup).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import (
    HIDDEN_DIR,
    PACKET_DIR,
    REFERENCE_PATCH,
    ROOT,
    apply_reference,
    assert_no_run_survives,
    edit,
    grade_tiny,
    hidden_outcomes,
    make_diff,
    outcomes,
    processes_with,
    run_grader,
)

from grading import sealed
from grading.hashing import tree_sha256
from grading.hidden import discover_hidden_tests
from grading.models import GradeReport
from grading.packet import PacketSpec, load_packet_spec
from grading.run import MARKER_VAR, marked_pids, run_command
from grading.trees import restore_locked_paths

# ---------------------------------------------------------------------------------------------
# run_command (no torch)


def test_run_command_timeout_kills_background_children(tmp_path: Path) -> None:
    token = f"grading-test-{uuid.uuid4().hex}"
    sleeper = f"{sys.executable} -c 'import time; time.sleep(1000)' {token}"
    # One child stays in the process group, one leaves it with setsid; both must die.
    script = f"{sleeper} & setsid {sleeper} & echo started; sleep 1000"
    t0 = time.monotonic()
    res = run_command(script, tmp_path, {"PATH": os.environ["PATH"]}, 1.0, tmp_path / "log")
    assert time.monotonic() - t0 < 10
    assert res.timed_out and res.signal == signal.SIGKILL and res.exit_code is None
    assert "started" in (tmp_path / "log").read_text()
    assert processes_with(token) == []
    assert marked_pids(res.run_id) == []


def test_a_candidate_run_sees_only_the_allowed_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the caller passes (here the judge's whole environment, with what an import and
    pytest wrote there), a candidate process sees the allow-list only: it cannot learn the
    judge's state, nor that it is graded."""
    from grading.layout import CANDIDATE_ENV

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/judge/tmp/inductor")  # an import's doing
    monkeypatch.setenv("JUDGE_ONLY_SECRET", "x")
    assert "PYTEST_CURRENT_TEST" in os.environ
    job = sealed.job_dir("env")
    out = job / "env.json"
    res = run_command([sys.executable, "-c", "import json, os, sys; "
                       "open(sys.argv[1], 'w').write(json.dumps(sorted(os.environ)))", str(out)],
                      job, {**os.environ, "RUN_SETTING": "1"}, 60, tmp_path / "log")
    assert res.exit_code == 0, (tmp_path / "log").read_text()
    seen = set(json.loads(out.read_text()))
    # What the caller set for this run reaches it; what it copied from the judge does not.
    assert "RUN_SETTING" in seen
    assert seen <= CANDIDATE_ENV | {MARKER_VAR, "RUN_SETTING"}, sorted(seen - CANDIDATE_ENV)
    assert not {"JUDGE_ONLY_SECRET", "TORCHINDUCTOR_CACHE_DIR", "PYTEST_CURRENT_TEST"} & seen
    assert "left out" in (tmp_path / "log").read_text()


def test_run_command_sweeps_daemons_after_normal_exit(tmp_path: Path) -> None:
    token = f"grading-test-{uuid.uuid4().hex}"
    sleeper = f"{sys.executable} -c 'import time; time.sleep(1000)' {token}"
    # The pause lets setsid run, so only a sweep over /proc can find the daemon: the candidate
    # uid's, since the judge may not read a candidate process's environment.
    script = f"(setsid {sleeper} &); sleep 0.5; echo done; exit 3"
    res = run_command(script, tmp_path, {"PATH": os.environ["PATH"]}, 30, tmp_path / "log")
    assert res.exit_code == 3 and not res.timed_out
    assert res.candidate_processes_killed >= 1
    assert processes_with(token) == []


def test_run_command_census_of_what_a_timeout_killed(tmp_path: Path) -> None:
    """A run the grader kills leaves the census of what was running (where it waited) in its
    log and result, before the kill."""
    token = f"grading-test-{uuid.uuid4().hex}"
    sleeper = f"{sys.executable} -c 'import time; time.sleep(1000)' {token}"
    res = run_command(f"{sleeper} & echo started; sleep 1000", tmp_path,
                      {"PATH": os.environ["PATH"]}, 2.0, tmp_path / "log")
    assert res.timed_out
    assert any(token in line for line in res.left_running), res.left_running
    log = (tmp_path / "log").read_text()
    assert "[grading] still running when it was killed:" in log
    assert token in log.split("still running when it was killed:", 1)[1]
    assert processes_with(token) == []


def test_run_command_census_after_exit_names_what_the_leader_left(tmp_path: Path) -> None:
    """A leader that exits while a child goes on (a launcher killed by its own test's timeout
    leaves its ranks): the child is in the census, its hostile name escaped, then killed."""
    token = f"grading-test-{uuid.uuid4().hex}"
    forged = "x\\n[grading] forged: pass"
    child = (f"{sys.executable} -c \"import os, sys; os.execv(sys.executable, "
             f"['{forged}', '-c', 'import time; time.sleep(1000)', '{token}'])\"")
    # The leader exits once the child runs under its new name (argv[0] starts with x).
    script = f'{child} & until [ "$(head -c 1 /proc/$!/cmdline)" = x ]; do sleep 0.05; done'
    res = run_command(script, tmp_path, {"PATH": os.environ["PATH"]}, 30, tmp_path / "log")
    assert res.exit_code == 0 and not res.timed_out
    (line,) = [line for line in res.left_running if token in line]
    assert "\\n[grading] forged: pass" in line
    log = (tmp_path / "log").read_text()
    assert "[grading] still running after it ended (killed then):" in log
    assert not any(row.startswith("[grading] forged") for row in log.splitlines())
    assert processes_with(token) == []


# A candidate program stuck where only its own stack says: the main thread waits on a lock in a
# function whose name the test knows, a second thread sleeps in another.
_STUCK_PROGRAM = """
import sys, threading, time
def stuck_in_a_teardown_{token}():
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()
def sleeper_{token}():
    time.sleep(1000)
threading.Thread(target=sleeper_{token}, daemon=True).start()
print("started", flush=True)
stuck_in_a_teardown_{token}()
"""


def test_a_stuck_candidate_process_leaves_its_own_stacks(tmp_path: Path) -> None:
    """What a timeout killed, and what a leader left running, each say where they waited:
    the census is followed by every thread's Python stack, which each process wrote when the
    grader asked (grading.stacks), without ptrace."""
    token = uuid.uuid4().hex[:12]
    job = sealed.job_dir("stuck")
    program = job / "stuck.py"
    program.write_text(_STUCK_PROGRAM.format(token=token))
    program.chmod(0o644)
    # A timeout: the stuck process is the command's own child.
    res = run_command([sys.executable, str(program)], job, {"PATH": os.environ["PATH"]},
                      4.0, tmp_path / "timeout.log")
    assert res.timed_out
    log = (tmp_path / "timeout.log").read_text()
    stacks = log.split("still running when it was killed:", 1)[1]
    assert "in its own words (faulthandler):" in stacks, log
    assert f"stuck_in_a_teardown_{token}" in stacks and f"sleeper_{token}" in stacks, log
    # A leader that exits and leaves it running (the launcher killed by a test's timeout), in
    # a job of its own (the first one's folder is its uid's).
    job = sealed.job_dir("left")
    program = job / "stuck.py"
    program.write_text(_STUCK_PROGRAM.format(token=token))
    program.chmod(0o644)
    script = f"{sys.executable} {program} & sleep 3; exit 0"
    res = run_command(script, job, {"PATH": os.environ["PATH"]}, 60, tmp_path / "left.log")
    assert res.exit_code == 0 and not res.timed_out
    log = (tmp_path / "left.log").read_text()
    stacks = log.split("still running after it ended (killed then):", 1)[1]
    assert f"stuck_in_a_teardown_{token}" in stacks, log
    assert processes_with(f"stuck_in_a_teardown_{token}") == []


def test_only_a_process_with_a_handler_is_asked_for_its_stacks(tmp_path: Path) -> None:
    """A process without a SIGUSR2 handler is never sent the request (its default action would
    end it before the grader's kill), even one named to forge a ``SigCgt`` line in
    /proc/PID/status (the kernel shows a carriage return in the name as it is)."""
    job = sealed.job_dir("handlerless")
    program = job / "handlerless.py"
    program.write_text(textwrap.dedent("""
        import ctypes, time
        ctypes.CDLL(None).prctl(15, b"\\rSigCgt:\\t800", 0, 0, 0)  # PR_SET_NAME
        print("named", flush=True)
        time.sleep(1000)
    """))
    program.chmod(0o644)
    # -S: no site hook, so no handler: ended by the grader's SIGKILL, not by SIGUSR2.
    res = run_command([sys.executable, "-S", str(program)], job, {"PATH": os.environ["PATH"]},
                      4.0, tmp_path / "h.log")
    log = (tmp_path / "h.log").read_text()
    assert "named" in log and res.timed_out, log
    assert res.signal == signal.SIGKILL and res.exit_code is None, res
    assert "in its own words" not in log and "no stacks" not in log, log


def test_what_a_process_writes_as_its_stacks_is_bounded_and_marked(tmp_path: Path) -> None:
    """Stacks are the process's word: each of its lines is logged after ``| `` (none passes for
    a grader line), at most stacks.MAX_LINES of them, so a file of blank lines cannot carry the
    log past its cap."""
    from grading import stacks

    job = sealed.job_dir("flood")
    program = job / "flood.py"
    program.write_text(textwrap.dedent("""
        import os, signal, time
        folder = os.environ["GRADING_STACKS_DIR"]
        signal.signal(signal.SIGUSR2, lambda *a: None)  # catches, writes nothing itself
        path = os.path.join(folder, f"stacks-{os.getpid()}.txt")
        os.unlink(path)
        with open(path, "wb") as fh:
            fh.write(b"[grading] exit code 0 after 1.00 s\\n" + b"\\r" * 8000 + b"\\n" * 8000)
        print("ready", flush=True)
        time.sleep(1000)
    """))
    program.chmod(0o644)
    res = run_command([sys.executable, str(program)], job, {"PATH": os.environ["PATH"]},
                      4.0, tmp_path / "f.log", max_log_bytes=2000)
    log = (tmp_path / "f.log").read_text()
    assert res.timed_out and "ready" in log
    rows = log.split("in its own words (faulthandler):", 1)[1].split("\n")
    marked = [row for row in rows if row.startswith("[grading]     | ")]
    assert 0 < len(marked) <= stacks.MAX_LINES, len(marked)
    assert not any(row.startswith("[grading] exit code 0 after 1.00") for row in rows)
    assert (tmp_path / "f.log").stat().st_size < 2000 + 40_000


def test_a_stacks_file_the_candidate_forges_reaches_nothing_of_the_judges(tmp_path: Path) -> None:
    """The stacks folder is the candidate's: a process that swaps its stacks file for a link to
    a file only the judge may read, or for a FIFO, gets neither read into the log (and the
    judge does not block on the FIFO)."""
    secret = tmp_path / "judge-only.txt"
    marker = f"JUDGE-SECRET-{uuid.uuid4().hex}"
    secret.write_text(marker)
    secret.chmod(0o600)
    job = sealed.job_dir("forger")
    program = job / "forger.py"
    program.write_text(textwrap.dedent(f"""
        import os, time
        folder = os.environ["GRADING_STACKS_DIR"]
        mine = os.path.join(folder, f"stacks-{{os.getpid()}}.txt")
        os.unlink(mine)
        os.symlink({str(secret)!r}, mine)
        child = os.fork()
        if child == 0:
            theirs = os.path.join(folder, f"stacks-{{os.getpid()}}.txt")
            os.unlink(theirs)
            os.mkfifo(theirs)
        print("ready", flush=True)
        time.sleep(1000)
    """))
    program.chmod(0o644)
    t0 = time.monotonic()
    res = run_command([sys.executable, str(program)], job, {"PATH": os.environ["PATH"]},
                      4.0, tmp_path / "forger.log")
    assert res.timed_out and time.monotonic() - t0 < 30
    log = (tmp_path / "forger.log").read_text()
    assert "ready" in log and marker not in log
    assert log.count("no stacks (it did not answer SIGUSR2)") == 2, log


def test_run_command_reports_signal_env_and_caps_log(tmp_path: Path) -> None:
    code = (
        "import os, sys\n"
        "print(os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'], flush=True)\n"
        f"print(os.environ['{MARKER_VAR}'], flush=True)\n"
        "sys.stdout.write('x' * 200000); sys.stdout.flush()\n"
        "os.kill(os.getpid(), 11)\n"
    )
    env = {"PATH": os.environ["PATH"], "OMP_NUM_THREADS": "8"}
    res = run_command(
        [sys.executable, "-c", code], tmp_path, env, 30, tmp_path / "log", max_log_bytes=5000
    )
    assert res.signal == signal.SIGSEGV and res.exit_code is None and not res.timed_out
    assert res.log_truncated
    log = (tmp_path / "log").read_text()
    assert "1 1\n" in log and res.run_id in log
    assert len(log) < 6000


def test_run_command_watchdog_kills(tmp_path: Path) -> None:
    calls = []

    def watchdog() -> str | None:
        calls.append(1)
        return "enough" if len(calls) > 3 else None

    res = run_command(
        ["sleep", "1000"],
        tmp_path,
        {"PATH": os.environ["PATH"]},
        60,
        tmp_path / "log",
        watchdog=watchdog,
    )
    assert res.timed_out and res.kill_reason == "enough" and res.duration_s < 10


# ---------------------------------------------------------------------------------------------
# Restores and static parts (no torch)


def _spec(**kw: Any) -> PacketSpec:
    base: dict[str, Any] = {
        "id": "t",
        "title": "t",
        "configurations": ["cpu-1"],
        "editable_paths": ["pkg/**"],
        "protected_paths": ["tests/**"],
        "public_test_command": "true",
    }
    return PacketSpec.model_validate(base | kw)


def test_restore_puts_back_and_removes(tmp_path: Path) -> None:
    base, work, outside = tmp_path / "base", tmp_path / "work", tmp_path / "outside"
    for root in (base, work):
        (root / "pkg").mkdir(parents=True)
        (root / "tests").mkdir()
        (root / "pkg" / "a.py").write_text("a = 1\n")
        (root / "tests" / "test_a.py").write_text("def test(): pass\n")
        (root / "tests" / "test_b.py").write_text("def test(): pass\n")
        (root / "README").write_text("hi\n")
    outside.mkdir()
    (work / "pkg" / "a.py").write_text("a = 2\n")  # editable: kept
    (work / "pkg" / "new.py").write_text("")  # editable: kept
    (work / "tests" / "test_a.py").write_text("def test(): assert True\n")  # restored
    (work / "tests" / "test_b.py").unlink()  # deleted: comes back
    (work / "tests" / "test_new.py").write_text("")  # added under protected: removed
    (work / "conftest.py").write_text("")  # outside editable: removed
    (work / "README").write_text("changed\n")  # outside editable: restored

    info = restore_locked_paths(work, base, _spec())

    assert info.removed == ["conftest.py", "tests/test_new.py"]
    assert info.restored == ["README", "tests/test_a.py", "tests/test_b.py"]
    assert (work / "pkg" / "a.py").read_text() == "a = 2\n"
    assert (work / "pkg" / "new.py").exists()
    assert tree_sha256(work / "tests") == tree_sha256(base / "tests")


def test_restore_never_writes_through_a_symlink(tmp_path: Path) -> None:
    base, work, outside = tmp_path / "base", tmp_path / "work", tmp_path / "outside"
    (base / "tests").mkdir(parents=True)
    (base / "tests" / "test_a.py").write_text("real\n")
    work.mkdir()
    outside.mkdir()
    (work / "tests").symlink_to(outside)  # the diff replaced tests/ by a link

    info = restore_locked_paths(work, base, _spec())

    assert list(outside.iterdir()) == []
    assert (work / "tests").is_dir() and not (work / "tests").is_symlink()
    assert (work / "tests" / "test_a.py").read_text() == "real\n"
    assert info.removed == ["tests"] and info.restored == ["tests/test_a.py"]


def test_fixture_packet_is_valid_and_canary_free() -> None:
    spec = load_packet_spec(PACKET_DIR / "packet.yaml")
    assert spec.id == "tiny-regression" and spec.configurations == ["cpu-1"]
    canary = (HIDDEN_DIR / "CANARY").read_text().strip()
    assert canary.startswith("HARNESS-CANARY-") and len(canary.splitlines()) == 1
    for path in (ROOT / "tests" / "fixtures").rglob("*"):
        if path.is_file():
            assert canary.encode() not in path.read_bytes(), f"canary leaked into {path}"
    for path in HIDDEN_DIR.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".patch"):
            # Probes are readable by candidate code at grading time: they hold no canary.
            in_probes = "probes" in path.relative_to(HIDDEN_DIR).parts
            assert (canary in path.read_text()) != in_probes, path


def test_discover_hidden_tests_reads_docstrings() -> None:
    tests = {t.nodeid: t.statement for t in discover_hidden_tests(HIDDEN_DIR / "checks")}
    assert "test_warmup.py::test_resume_mid_warmup_equals_uninterrupted" in tests
    assert all(s for s in tests.values())


def test_bad_arguments_exit_2_with_one_line(tmp_path: Path) -> None:
    diff = tmp_path / "empty.patch"
    diff.write_text("")
    proc, report, _ = run_grader(
        baseline=PACKET_DIR / "repo",
        packet=PACKET_DIR / "packet.yaml",
        diff=diff,
        hidden=tmp_path / "missing",
        out=tmp_path / "out",
    )
    assert proc.returncode == 2 and report is None
    assert proc.stderr.count("\n") == 1 and "not a directory" in proc.stderr


# ---------------------------------------------------------------------------------------------
# A pure-Python task: the grader's behaviour without torch


CALC_HIDDEN = '''
import os

import pytest

from grading import probe


def calc(name, *args):
    return probe.call("calc_probe", "call", name=name, args=list(args))


def test_add():
    """add(2, 3) is 5."""
    assert calc("add", 2, 3) == 5


def test_mul():
    """mul(2, 3) is 6."""
    assert calc("mul", 2, 3) == 6


@pytest.mark.parametrize("n", [1, 2, 3])
def test_square(n):
    """square(n) is n * n."""
    assert calc("square", n) == n * n


def test_needs_gpu():
    """Runs only where CUDA is."""
    pytest.skip("no CUDA device here")


def test_sees_baseline_and_not_work_conftest():
    """The checks see the pristine baseline and no conftest.py from the graded tree."""
    assert os.path.isfile(os.path.join(os.environ["GRADING_BASELINE"], "calc.py"))
    assert "WORK_CONFTEST" not in os.environ
'''


# The candidate side of the calc checks: runs as the candidate uid, returns plain values.
CALC_PROBE = '''
def call(name, args):
    import calc
    return getattr(calc, name)(*args)
'''


@pytest.fixture()
def calc_task(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "calc-task"
    repo = root / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests" / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    )
    packet = {
        "id": "calc",
        "title": "calc",
        "configurations": ["cpu-1"],
        "editable_paths": ["**"],
        "protected_paths": ["tests/**"],
        "public_test_command": "python -m pytest -q -p no:cacheprovider tests",
        "public_test_timeout_s": 30,
    }
    (root / "packet.yaml").write_text(yaml.safe_dump(packet))
    hidden = root / "hidden"
    (hidden / "checks").mkdir(parents=True)
    (hidden / "checks" / "test_calc_hidden.py").write_text(CALC_HIDDEN)
    (hidden / "probes").mkdir()
    (hidden / "probes" / "calc_probe.py").write_text(CALC_PROBE)
    (hidden / "CANARY").write_text("HARNESS-CANARY-00000000-0000-4000-8000-000000000000\n")
    return {"root": root, "repo": repo, "packet": root / "packet.yaml", "hidden": hidden}


def test_a_task_without_hidden_checks_is_never_complete(
    calc_task: dict[str, Path], tmp_path: Path
) -> None:
    bare_hidden = tmp_path / "bare-hidden"
    bare_hidden.mkdir()
    diff = tmp_path / "empty.patch"
    diff.write_text("")
    proc, report, _ = run_grader(baseline=calc_task["repo"], packet=calc_task["packet"],
                                 diff=diff, hidden=bare_hidden, out=tmp_path / "out")
    assert proc.returncode == 0 and report is not None
    assert outcomes(report) == {"public-tests": "pass", "hidden-checks": "not_run"}
    assert report["verdict"] == "incomplete"


def test_a_check_whose_run_crashed_or_hung_is_crash_or_hang_not_fail(
    calc_task: dict[str, Path], tmp_path: Path
) -> None:
    hidden = tmp_path / "run-hidden"
    (hidden / "checks").mkdir(parents=True)
    (hidden / "checks" / "test_runs.py").write_text(
        "import pytest\n\n\n"
        "def test_crashed_run(record_property):\n"
        '    """A check whose 2-rank run crashed on rank 1."""\n'
        '    record_property("grading_outcome", "crash")\n'
        '    pytest.fail("run: crash: rank 1 failed first (exit code 1)")\n\n\n'
        "def test_hung_run(record_property):\n"
        '    """A check whose run hung."""\n'
        '    record_property("grading_outcome", "hang")\n'
        '    pytest.fail("run: hang: rank(s) [0, 1] still running at the wall limit")\n\n\n'
        "def test_wrong_number():\n"
        '    """A check that ran and measured a wrong value."""\n'
        "    assert 1 == 2\n"
    )
    diff = tmp_path / "empty.patch"
    diff.write_text("")
    proc, report, _ = run_grader(baseline=calc_task["repo"], packet=calc_task["packet"],
                                 diff=diff, hidden=hidden, out=tmp_path / "out")
    assert proc.returncode == 0 and report is not None
    got = outcomes(report)
    assert got["hidden:test_runs.py::test_crashed_run"] == "crash"
    assert got["hidden:test_runs.py::test_hung_run"] == "hang"
    assert got["hidden:test_runs.py::test_wrong_number"] == "fail"
    crashed = next(c for c in report["contracts"] if c["id"].endswith("test_crashed_run"))
    assert "rank 1" in crashed["evidence"]["message"]


def test_unavailable_cuda_configurations_are_listed_never_passed(
    calc_task: dict[str, Path], tmp_path: Path
) -> None:
    packet = yaml.safe_load(calc_task["packet"].read_text())
    packet["configurations"] = ["cpu-1", "cuda-ddp-2", "cuda-fsdp-2"]
    packet_path = tmp_path / "packet.yaml"
    packet_path.write_text(yaml.safe_dump(packet))
    diff = tmp_path / "empty.patch"
    diff.write_text("")
    proc, report, _ = run_grader(baseline=calc_task["repo"], packet=packet_path, diff=diff,
                                 hidden=calc_task["hidden"], out=tmp_path / "out")
    assert proc.returncode == 0 and report is not None
    gpus_here = report["configurations_not_run"] == {}
    if not gpus_here:
        assert set(report["configurations_not_run"]) == {"cuda-ddp-2", "cuda-fsdp-2"}
        assert "GPU" in report["configurations_not_run"]["cuda-ddp-2"]
    assert all(not c["id"].startswith("cuda") for c in report["contracts"])


# One check that passes on the solved calc task and says it runs in one process.
VERDICT_HIDDEN = '''
from grading import probe


def test_add(record_property):
    """add(2, 3) is 5, in one process."""
    record_property("configurations", "cpu-1")
    assert probe.call("calc_probe", "call", name="add", args=[2, 3]) == 5
'''


@pytest.mark.parametrize(("declared", "verdict", "shown"), [
    (["cpu-1"], "complete", {"cpu-1": "pass"}),
    # CUDA could not run on this CPU machine: everything that ran passed, CUDA is unknown.
    (["cpu-1", "cuda-ddp-2"], "complete_on_cpu", {"cpu-1": "pass", "cuda-ddp-2": "not_run"}),
    # A declared CPU configuration that no contract exercises was never shown.
    (["cpu-1", "gloo-ddp-2"], "incomplete", {"cpu-1": "pass", "gloo-ddp-2": "not_run"}),
])
def test_the_verdict_says_what_was_shown(calc_task: dict[str, Path], tmp_path: Path,
                                         declared: list[str], verdict: str,
                                         shown: dict[str, str]) -> None:
    (calc_task["hidden"] / "checks" / "test_calc_hidden.py").write_text(VERDICT_HIDDEN)
    packet = yaml.safe_load(calc_task["packet"].read_text())
    packet["configurations"] = declared
    calc_task["packet"].write_text(yaml.safe_dump(packet))
    _, report = grade_calc(calc_task, tmp_path,
                           lambda repo: (repo / "calc.py").write_text(CALC_SOLVED), "verdict")
    if report["configurations_not_run"] == {} and "cuda-ddp-2" in declared:
        pytest.skip("this grader has 2 GPUs: CUDA is not unknown here")  # never on CI
    assert set(outcomes(report).values()) == {"pass"}
    assert report["verdict"] == verdict
    assert {k: v["outcome"] for k, v in report["configurations"].items()} == shown
    if "gloo-ddp-2" in declared:
        assert report["configurations"]["gloo-ddp-2"]["reason"] == "no contract exercises it"


CUDA_ONLY_HIDDEN = VERDICT_HIDDEN + '''

def test_add_on_gpus(record_property):
    """add(2, 3) is 5 under CUDA DDP."""
    record_property("configurations", "cuda-ddp-2")
    import torch

    if torch.cuda.device_count() < 2:
        import pytest

        pytest.skip("needs 2 GPUs")
    assert probe.call("calc_probe", "call", name="add", args=[2, 3]) == 5
'''


def test_a_cuda_only_check_skipped_here_is_not_determined(calc_task: dict[str, Path],
                                                          tmp_path: Path) -> None:
    """A contract for CUDA configurations this grader cannot run does not make the grade
    incomplete; the grade says CUDA is not determined (complete_on_cpu), never complete."""
    (calc_task["hidden"] / "checks" / "test_calc_hidden.py").write_text(CUDA_ONLY_HIDDEN)
    packet = yaml.safe_load(calc_task["packet"].read_text())
    packet["configurations"] = ["cpu-1", "cuda-ddp-2"]
    calc_task["packet"].write_text(yaml.safe_dump(packet))
    _, report = grade_calc(calc_task, tmp_path,
                           lambda repo: (repo / "calc.py").write_text(CALC_SOLVED), "cuda-only")
    if report["configurations_not_run"] == {}:
        pytest.skip("this grader has 2 GPUs: CUDA is not unknown here")  # never on CI
    gpu = outcomes(report)["hidden:test_calc_hidden.py::test_add_on_gpus"]
    assert gpu == "not_run"
    assert report["verdict"] == "complete_on_cpu"
    assert report["configurations"]["cuda-ddp-2"]["outcome"] == "not_run"


def grade_calc(
    task: dict[str, Path],
    tmp_path: Path,
    change: Callable[[Path], None],
    name: str,
    extra: list[str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    diff = make_diff(task["repo"], tmp_path, change)
    proc, report, _ = run_grader(
        baseline=task["repo"],
        packet=task["packet"],
        diff=diff,
        hidden=task["hidden"],
        out=tmp_path / name,
        extra=extra,
    )
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    return proc, report


CALC_SOLVED = (
    "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n\n\n"
    "def square(n):\n    return n * n\n"
)


def test_calc_outcomes_and_ignored_conftest(calc_task: dict[str, Path], tmp_path: Path) -> None:
    def change(repo: Path) -> None:
        (repo / "calc.py").write_text(CALC_SOLVED.replace("return n * n", "return n * 2"))
        # Editable here ("**"), so it stays in the tree: the public command may load it, the
        # hidden run must not.
        (repo / "conftest.py").write_text(
            "import os\nos.environ['WORK_CONFTEST'] = '1'\n"
            "def pytest_collection_modifyitems(items):\n    items.clear()\n"
        )

    _, report = grade_calc(calc_task, tmp_path, change, "calc-mixed")
    got = outcomes(report)
    assert got == {
        "public-tests": "fail",  # the conftest deselects everything: pytest exits 5
        "hidden:test_calc_hidden.py::test_add": "pass",
        "hidden:test_calc_hidden.py::test_mul": "pass",
        "hidden:test_calc_hidden.py::test_square[1]": "fail",
        "hidden:test_calc_hidden.py::test_square[2]": "pass",
        "hidden:test_calc_hidden.py::test_square[3]": "fail",
        "hidden:test_calc_hidden.py::test_needs_gpu": "not_run",
        "hidden:test_calc_hidden.py::test_sees_baseline_and_not_work_conftest": "pass",
    }
    assert report["verdict"] == "incomplete"
    by_id = {c["id"]: c for c in report["contracts"]}
    assert by_id["hidden:test_calc_hidden.py::test_square[1]"]["statement"] == (
        "square(n) is n * n."
    )
    assert "no CUDA device" in by_id["hidden:test_calc_hidden.py::test_needs_gpu"]["reason"]
    assert "assert" in by_id["hidden:test_calc_hidden.py::test_square[3]"]["evidence"]["message"]
    assert report["counts"] == {
        "pass": 4,
        "fail": 3,
        "crash": 0,
        "hang": 0,
        "not_run": 1,
        "diff_rejected": 0,
        "flaky": 0,
    }
    assert report["diff"]["applied"] and not report["diff"]["canary_found"]


def grade_in_process(task: dict[str, Path], diff: Path, out: Path,
                     **options: Any) -> GradeReport:
    """``grade()`` called in this process, as ``grading.mutants`` calls it for every mutant."""
    from grading.grade import grade
    from grading.layout import GradeOptions

    out.mkdir(parents=True)
    # As `python -m grading` does: pytest's tmp_path sits in a folder only root may enter, and
    # the candidate uid must reach its area under the work folder.
    work = Path(tempfile.mkdtemp(prefix="grading-work-"))
    return grade(GradeOptions(baseline=task["repo"], packet=load_packet_spec(task["packet"]),
                              diff=diff, hidden=task["hidden"], out=out,
                              submission_id=out.parent.name, work=work, **options))


def test_a_check_process_dying_outside_its_test_blames_that_check_alone(
    calc_task: dict[str, Path], tmp_path: Path
) -> None:
    """The reference's traced grade runs one pytest process per check: when one dies before
    its test starts, that check is the crash, not every check after it."""
    (calc_task["hidden"] / "checks" / "conftest.py").write_text(textwrap.dedent("""
        import os

        def pytest_collection_finish(session):
            if os.environ.get("GRADING_TRACE_TEST", "").endswith("::test_mul"):
                os._exit(3)
        """))
    diff = make_diff(calc_task["repo"], tmp_path,
                     lambda repo: (repo / "calc.py").write_text(CALC_SOLVED))
    graded = grade_in_process(calc_task, diff, tmp_path / "each" / "out",
                              trace_each_hidden_test=True)
    got = {c.id: c.outcome for c in graded.contracts}
    assert got["hidden:test_calc_hidden.py::test_mul"] == "crash"
    assert got["hidden:test_calc_hidden.py::test_add"] == "pass"
    assert {got[f"hidden:test_calc_hidden.py::test_square[{n}]"] for n in (1, 2, 3)} == {"pass"}
    mul = next(c for c in graded.contracts if c.id.endswith("::test_mul"))
    assert "outside any test" in (mul.reason or "")


def test_a_selection_runs_only_its_checks_and_collects_once(
    calc_task: dict[str, Path], tmp_path: Path
) -> None:
    """How ``grading.mutants`` grades: in-process, a selection of checks, many grades in one
    process. The judge's collection never imports candidate code, so it is made once per
    process; a selected check pytest did not collect is a grader defect, never a silent skip."""
    from grading import hidden as hidden_module
    from grading.errors import GraderError

    diff = make_diff(calc_task["repo"], tmp_path, lambda repo: (repo / "calc.py").write_text(
        CALC_SOLVED.replace("return a * b", "return a + b")))

    def grade_selected(name: str, selected: tuple[str, ...]) -> dict[str, str]:
        graded = grade_in_process(calc_task, diff, tmp_path / name / "out",
                                  hidden_tests=selected, public_tests=False)
        collect_log = tmp_path / name / "out" / "logs" / "hidden-checks.collect.log"
        got = {c.id: c.outcome for c in graded.contracts}
        got["collected here"] = str(collect_log.exists())
        return got

    first = grade_selected("first", ("test_calc_hidden.py::test_add",))
    assert first["hidden:test_calc_hidden.py::test_add"] == "pass"
    assert first["hidden:test_calc_hidden.py::test_mul"] == "not_run"
    assert first["public-tests"] == "not_run"
    second = grade_selected("second", ("test_calc_hidden.py::test_mul",
                                       "test_calc_hidden.py::test_square[2]"))
    assert second["hidden:test_calc_hidden.py::test_mul"] == "fail"
    assert second["hidden:test_calc_hidden.py::test_square[2]"] == "pass"
    assert second["hidden:test_calc_hidden.py::test_add"] == "not_run"
    assert (first["collected here"], second["collected here"]) == ("True", "False")
    assert hidden_module._COLLECTED
    with pytest.raises(GraderError, match="not among"):
        grade_selected("missing", ("test_calc_hidden.py::test_gone",))


def test_mutant_grades_run_the_public_tests_last_and_take_a_handed_on_collection(
    calc_task: dict[str, Path], tmp_path: Path
) -> None:
    """A mutant whose statement the public tests never ran gets them last: after the hidden
    checks, and not at all when a hidden check already failed. A process handed an earlier
    process's collection of the same checks does not collect again."""
    from grading import hidden as hidden_module
    from grading.hidden import STOPPED_AT_FAILURE

    checks = calc_task["hidden"] / "checks"
    wrong = make_diff(calc_task["repo"], tmp_path, lambda repo: (
        repo / "calc.py").write_text(CALC_SOLVED.replace("return a * b", "return a + b")))
    selected = ("test_calc_hidden.py::test_add", "test_calc_hidden.py::test_mul")
    options: dict[str, Any] = {"hidden_tests": selected, "public_tests_last": True,
                               "stop_at_first_failure": True}
    killed = grade_in_process(calc_task, wrong, tmp_path / "killed" / "out", **options)
    got = {c.id: c for c in killed.contracts}
    assert got["hidden:test_calc_hidden.py::test_mul"].outcome == "fail"
    assert (got["public-tests"].outcome, got["public-tests"].reason) == (
        "not_run", STOPPED_AT_FAILURE)
    assert killed.contracts[0].id == "public-tests"
    assert not (tmp_path / "killed" / "out" / "logs" / "public-tests.log").exists()
    ids = hidden_module.collected_ids(checks)
    assert ids and "test_calc_hidden.py::test_mul" in ids

    # A fresh process's cache, handed the collection: nothing collected again.
    hidden_module._COLLECTED.clear()
    hidden_module.remember_collection(checks, ids)
    solved = make_diff(calc_task["repo"], tmp_path,
                       lambda repo: (repo / "calc.py").write_text(CALC_SOLVED))
    passed = grade_in_process(calc_task, solved, tmp_path / "passed" / "out", **options)
    logs = tmp_path / "passed" / "out" / "logs"
    assert {c.id: c.outcome for c in passed.contracts}["public-tests"] == "pass"
    assert not (logs / "hidden-checks.collect.log").exists()
    # The public tests ran after the hidden checks' pytest process had finished.
    hidden_log = logs / "hidden-checks.round-1.log"
    assert (logs / "public-tests.log").stat().st_mtime_ns >= hidden_log.stat().st_mtime_ns

    # The public tests alone (how a kill by them after hidden checks is confirmed): no hidden
    # check runs, and none is collected again.
    alone = grade_in_process(calc_task, solved, tmp_path / "alone" / "out", hidden_tests=(),
                             stop_at_first_failure=True)
    outcomes_alone = {c.id: c.outcome for c in alone.contracts}
    assert outcomes_alone.pop("public-tests") == "pass"
    assert outcomes_alone and set(outcomes_alone.values()) == {"not_run"}
    assert not list((tmp_path / "alone" / "out" / "logs").glob("hidden-checks.*"))


def test_calc_hang_and_crash_are_per_test(calc_task: dict[str, Path], tmp_path: Path) -> None:
    token = f"grading-test-{uuid.uuid4().hex}"

    def change(repo: Path) -> None:
        (repo / "calc.py").write_text(
            CALC_SOLVED
            + textwrap.dedent(f"""
            import os as _os
            import subprocess as _sp
            import sys as _sys
            import time as _time


            def mul(a, b):
                # a daemon that outlives the test, then a hang
                _sp.Popen([_sys.executable, "-c", "import time; time.sleep(1000)", "{token}"],
                          start_new_session=True)
                while True:
                    _time.sleep(0.1)


            def square(n):
                if n == 2:
                    _os.abort()
                return n * n
            """)
        )

    _, report = grade_calc(
        calc_task, tmp_path, change, "calc-hang", extra=["--hidden-test-timeout-s", "3"]
    )
    got = outcomes(report)
    assert got["hidden:test_calc_hidden.py::test_add"] == "pass"
    assert got["hidden:test_calc_hidden.py::test_mul"] == "hang"
    assert got["hidden:test_calc_hidden.py::test_square[1]"] == "pass"
    assert got["hidden:test_calc_hidden.py::test_square[2]"] == "crash"
    assert got["hidden:test_calc_hidden.py::test_square[3]"] == "pass"
    assert got["hidden:test_calc_hidden.py::test_needs_gpu"] == "not_run"
    assert got["public-tests"] == "pass"
    mul = next(c for c in report["contracts"] if c["id"].endswith("::test_mul"))
    assert "no hidden test finished within 3 s" in mul["reason"]
    assert processes_with(token) == []
    assert_no_run_survives(report)


def test_calc_collection_error_keeps_contract_ids(
    calc_task: dict[str, Path], tmp_path: Path
) -> None:
    checks = calc_task["hidden"] / "checks"
    (checks / "test_calc_hidden.py").write_text("import calc  # at import time\n" + CALC_HIDDEN)

    def change(repo: Path) -> None:
        (repo / "calc.py").write_text("raise ImportError('broken on purpose')\n")

    _, report = grade_calc(calc_task, tmp_path, change, "calc-collect")
    hidden = [c for c in report["contracts"] if c["kind"] == "hidden_check"]
    assert {c["id"] for c in hidden} == {
        "hidden:test_calc_hidden.py::test_add",
        "hidden:test_calc_hidden.py::test_mul",
        "hidden:test_calc_hidden.py::test_square",
        "hidden:test_calc_hidden.py::test_needs_gpu",
        "hidden:test_calc_hidden.py::test_sees_baseline_and_not_work_conftest",
    }
    # A crash runs again (grading.confirm); an import error stays one, and says the rerun agreed.
    assert all(c["outcome"] == "crash" and "(collection error)" in c["reason"]
               and c["evidence"]["rerun"]["outcome"] == "crash" for c in hidden), [
        (c["id"], c["outcome"], c["reason"], c["evidence"].get("rerun")) for c in hidden]
    assert report["contracts"][0]["outcome"] == "fail"


def test_calc_public_hang_is_killed(calc_task: dict[str, Path], tmp_path: Path) -> None:
    packet = yaml.safe_load(calc_task["packet"].read_text())
    packet["public_test_timeout_s"] = 2
    calc_task["packet"].write_text(yaml.safe_dump(packet))
    token = f"grading-test-{uuid.uuid4().hex}"

    def change(repo: Path) -> None:
        # Hangs on import, only under the public tests (pytest; the hidden checks call it from
        # the probe runner), after starting a daemon in a session of its own.
        (repo / "calc.py").write_text(
            CALC_SOLVED
            + textwrap.dedent(f"""
            import os, subprocess, sys, time
            if "pytest" in sys.modules:
                subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)",
                                  "{token}"], start_new_session=True)
                time.sleep(1000)
            """)
        )

    _, report = grade_calc(calc_task, tmp_path, change, "calc-public-hang")
    public = report["contracts"][0]
    assert public["outcome"] == "hang" and public["evidence"]["timed_out"]
    assert public["evidence"]["duration_s"] < 10
    assert processes_with(token) == []
    assert_no_run_survives(report)


# ---------------------------------------------------------------------------------------------
# The tiny-regression fixture task (needs torch)


def test_corrupt_diff_is_rejected(tmp_path: Path) -> None:
    diff = tmp_path / "corrupt.patch"
    good = REFERENCE_PATCH.read_text()
    diff.write_text(good.replace("@@ -34,6 +34,9 @@", "@@ -34,6 +34,99 @@"))
    proc, report, elapsed = run_grader(
        baseline=PACKET_DIR / "repo",
        packet=PACKET_DIR / "packet.yaml",
        diff=diff,
        hidden=HIDDEN_DIR,
        out=tmp_path / "corrupt",
    )
    assert proc.returncode == 0, proc.stderr
    assert report is not None and report["verdict"] == "diff_rejected"
    assert set(outcomes(report).values()) == {"diff_rejected"}
    assert not report["diff"]["applied"] and report["diff"]["apply_error"]
    assert len(report["contracts"]) > 1
    assert not (tmp_path / "corrupt" / "logs" / "public-tests.log").exists()
    assert elapsed < 30


def test_rewritten_public_tests_are_restored(tmp_path: Path) -> None:
    def change(repo: Path) -> None:
        edit(
            repo / "tinytrain" / "trainer.py",
            "def train(config: TrainConfig) -> TrainResult:\n",
            "def train(config: TrainConfig) -> TrainResult:\n"
            "    raise NotImplementedError('gave up')\n",
        )
        (repo / "tests" / "test_train.py").unlink()
        (repo / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
        (repo / "conftest.py").write_text(
            "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\n"
            "def pytest_runtest_makereport(item, call):\n"
            "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
        )

    diff = make_diff(PACKET_DIR / "repo", tmp_path, change)
    _, report = grade_tiny(tmp_path, diff, "tamper")
    assert report["restore"] == {
        "restored": ["tests/test_train.py"],
        "removed": ["conftest.py", "tests/test_ok.py"],
    }
    assert outcomes(report)["public-tests"] == "fail"
    assert set(hidden_outcomes(report).values()) == {"fail"}
    assert report["verdict"] == "incomplete"


def test_hanging_resume_is_hang_and_leaves_nothing(tmp_path: Path) -> None:
    token = f"grading-test-{uuid.uuid4().hex}"

    def change(repo: Path) -> None:
        apply_reference(repo)
        edit(
            repo / "tinytrain" / "trainer.py",
            '    """Restore everything ``save_checkpoint`` wrote; returns the number of completed '
            'steps."""\n',
            '    """Restore everything ``save_checkpoint`` wrote; returns the number of completed '
            'steps."""\n'
            "    import subprocess, sys, time\n"
            f"    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1000)', "
            f"'{token}'], start_new_session=True)\n"
            "    while True:\n        time.sleep(0.2)\n",
        )

    diff = make_diff(PACKET_DIR / "repo", tmp_path, change)
    _, report = grade_tiny(tmp_path, diff, "hang", packet_overrides={"public_test_timeout_s": 10})
    got = outcomes(report)
    assert got["public-tests"] == "hang"
    assert got["hidden:test_warmup.py::test_resume_mid_warmup_equals_uninterrupted"] == "hang"
    others = {k: v for k, v in hidden_outcomes(report).items() if "resume" not in k}
    assert set(others.values()) == {"pass"}, others
    assert processes_with(token) == []
    assert_no_run_survives(report)


def test_crashing_resume_is_crash(tmp_path: Path) -> None:
    def change(repo: Path) -> None:
        apply_reference(repo)
        edit(
            repo / "tinytrain" / "trainer.py",
            "    state = torch.load(path, weights_only=True)\n",
            "    import os\n    os.abort()\n    state = torch.load(path, weights_only=True)\n",
        )

    diff = make_diff(PACKET_DIR / "repo", tmp_path, change)
    _, report = grade_tiny(tmp_path, diff, "crash")
    got = outcomes(report)
    assert got["public-tests"] == "crash"  # the shell reports SIGABRT as 134
    assert got["hidden:test_warmup.py::test_resume_mid_warmup_equals_uninterrupted"] == "crash"
    others = {k: v for k, v in hidden_outcomes(report).items() if "resume" not in k}
    assert set(others.values()) == {"pass"}, others


def test_a_judge_killed_midway_keeps_the_evidence_of_the_checks_it_finished(
    calc_task: dict[str, Path], tmp_path: Path
) -> None:
    """As when the judge's process is killed for memory after a candidate's huge output: the
    checks finished before keep their evidence (the properties they recorded), not only the
    outcome the log shows."""
    (calc_task["hidden"] / "checks" / "test_calc_hidden.py").write_text(
        "import os, signal\n\n\n"
        "def test_a_measures(record_property):\n"
        "    record_property('measured', '42')\n\n\n"
        "def test_b_ends_the_judge():\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n")

    def change(repo: Path) -> None:
        (repo / "calc.py").write_text(CALC_SOLVED)

    _, report = grade_calc(calc_task, tmp_path, change, "judge-killed")
    got = {c["id"]: c for c in report["contracts"]}
    first = got["hidden:test_calc_hidden.py::test_a_measures"]
    assert first["outcome"] == "pass"
    # Its own property, next to the plugin's (the calc check declares no observation kind).
    assert first["evidence"].get("properties") == {"observed_in": "undeclared",
                                                   "measured": "42"}, first["evidence"]
    assert got["hidden:test_calc_hidden.py::test_b_ends_the_judge"]["outcome"] == "crash"


def test_a_crash_is_run_again_and_a_crash_then_a_pass_is_flaky(
    calc_task: dict[str, Path], tmp_path: Path
) -> None:
    """As a gloo rank aborting in its shutdown under load: the host can crash a check once. A
    crash is run again; the same crash twice counts as a crash, a pass on the rerun is
    ``flaky`` (never a pass), each with both runs' evidence. The public tests' run is run again
    when its log shows a crashed process."""
    # The judge's own marker (never the candidate's: nothing of a candidate job outlives it).
    marker = Path(tempfile.mkdtemp(prefix="flaky-mark-")) / "ran-once"
    (calc_task["hidden"] / "checks" / "test_calc_hidden.py").write_text(
        "import os, signal\nfrom pathlib import Path\n\n\n"
        "def test_steady(record_property):\n    record_property('measured', '1')\n\n\n"
        "def test_aborts_once():\n"
        f"    mark = Path({str(marker)!r})\n"
        "    if not mark.exists():\n"
        "        mark.write_text('x')\n"
        "        os.kill(os.getpid(), signal.SIGABRT)\n\n\n"
        "def test_aborts_always():\n    os.kill(os.getpid(), signal.SIGABRT)\n")
    packet = yaml.safe_load(calc_task["packet"].read_text())
    # A public run that fails the way a two-rank run aborting in its shutdown makes pytest
    # fail, on the first run only (the rerun's folder is named apart).
    packet["public_test_command"] = (
        'case "$PWD" in *public-tests-rerun*) exit 0;; esac; '
        "echo 'terminate called without an active exception'; exit 1")
    calc_task["packet"].write_text(yaml.safe_dump(packet))

    def change(repo: Path) -> None:
        (repo / "calc.py").write_text(CALC_SOLVED)

    _, report = grade_calc(calc_task, tmp_path, change, "flaky")
    got = {c["id"]: c for c in report["contracts"]}
    steady = got["hidden:test_calc_hidden.py::test_steady"]
    assert steady["outcome"] == "pass" and "rerun" not in steady["evidence"]
    once = got["hidden:test_calc_hidden.py::test_aborts_once"]
    assert once["outcome"] == "flaky", once
    assert once["evidence"]["rerun"]["outcome"] == "pass"
    assert once["evidence"]["round"] != once["evidence"]["rerun"]["evidence"]["round"]
    always = got["hidden:test_calc_hidden.py::test_aborts_always"]
    assert always["outcome"] == "crash" and always["evidence"]["rerun"]["outcome"] == "crash"
    public = got["public-tests"]
    assert public["outcome"] == "flaky", public
    assert public["log"] != public["evidence"]["rerun"]["log"]
    assert report["verdict"] == "incomplete"
    assert report["counts"]["flaky"] == 2
    marker.unlink()
    marker.parent.rmdir()
