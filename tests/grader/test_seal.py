"""The judge is sealed from the judged: submissions that try to reach their own verdict.

Each forgery is a real submission (the untouched baseline plus a payload in an editable file)
graded by ``python -m grading`` as it runs in the grader container: the judge as root, every
candidate process as the image's candidate uid, the inputs in a folder only root can enter.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from seal_payload import PAYLOAD
from support import (
    HIDDEN_DIR,
    PACKET_DIR,
    TORCH_TEST_TIMEOUT_S,
    make_diff,
    outcomes,
    run_grader,
)

from grading import jobcgroup, sealed
from grading.hashing import tree_sha256
from grading.hidden import discover_hidden_tests

# What the payload may achieve in its own processes; everything else must be refused.
OWN_PROCESS_ONLY = {"trail", "ipc-trail", "ghost", "pytest-hook", "linger"}
ATTACKS = {"trail", "ipc-trail", "ghost", "pytest-hook", "hidden-conftest", "hidden-rewrite",
           "apply-reference", "forge-grade", "kill-grader", "linger", "sitecustomize",
           "read-hidden", "copy-hidden-out", "judge-memory", "judge-ptrace"}


def closed_inputs(tmp_path: Path) -> dict[str, Path]:
    """The packet and hidden tree in a root-only folder, as the host hands them over."""
    inputs = tmp_path / "in"
    inputs.mkdir(mode=0o700)
    shutil.copytree(HIDDEN_DIR, inputs / "hidden", symlinks=True)
    shutil.copytree(PACKET_DIR / "repo", inputs / "baseline", symlinks=True)
    shutil.copy(PACKET_DIR / "packet.yaml", inputs / "packet.yaml")
    return {"hidden": inputs / "hidden", "baseline": inputs / "baseline",
            "packet": inputs / "packet.yaml"}


def attack_results(report: Path) -> tuple[dict[str, set[str]], int]:
    """How each attack ended, over every candidate process; and how many processes tried."""
    found: dict[str, set[str]] = {}
    pids = set()
    for line in report.read_text(errors="replace").splitlines():
        record = json.loads(line)
        found.setdefault(record["attack"], set()).add(record["result"].split(":")[0])
        pids.add(record["pid"])
    return found, len(pids)


def grade_payload(tmp_path: Path, inputs: dict[str, Path], payload: str, name: str
                  ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    def change(repo: Path) -> None:
        init = repo / "tinytrain" / "__init__.py"
        init.write_text(init.read_text() + payload)

    diff = make_diff(PACKET_DIR / "repo", tmp_path, change)
    proc, report, _ = run_grader(
        baseline=inputs["baseline"], packet=inputs["packet"], diff=diff,
        hidden=inputs["hidden"], out=tmp_path / name,
        extra=["--hidden-test-timeout-s", str(TORCH_TEST_TIMEOUT_S),
               "--expect-hidden-sha256", tree_sha256(HIDDEN_DIR)])
    return proc, report


def test_forgeries_inside_the_submission_leave_the_baseline_verdict(tmp_path: Path) -> None:
    inputs = closed_inputs(tmp_path)
    hidden_before = tree_sha256(inputs["hidden"])
    # A root-owned file anyone may append to: the grader removes what the candidate creates
    # in shared folders after each run, not what it writes into the judge's files.
    attacks = Path(tempfile.mkdtemp(prefix="seal-attacks-")) / "report.jsonl"
    attacks.touch(mode=0o666)
    os.chmod(attacks, 0o666)
    os.chmod(attacks.parent, 0o755)
    proc, report = grade_payload(tmp_path, inputs, PAYLOAD.replace("@REPORT@", str(attacks)),
                                 "forged")
    assert proc.returncode == 0, proc.stderr
    assert report is not None

    # The verdict the untouched baseline gets: public tests pass, every feature check fails.
    want = {"public-tests": "pass"} | {
        f"hidden:{t.nodeid}": "fail" for t in discover_hidden_tests(HIDDEN_DIR / "checks")}
    got = outcomes(report)
    assert {k.split("[")[0]: v for k, v in got.items()} == want, got
    assert report["verdict"] == "incomplete"
    assert report["seal"]["judge_uid"] == 0
    assert report["seal"]["candidate_uid"] == int(os.environ[sealed.CANDIDATE_UID_VAR])

    # Every attack ran, in every kind of candidate process (public tests, probes, CLI runs),
    # and everything past the candidate's own processes was refused.
    results, processes = attack_results(attacks)
    assert set(results) == ATTACKS, results
    assert processes >= 5, processes
    # No run saw a trail of an earlier one, in a folder or in System V IPC, nor a process of
    # an earlier run still alive (each of these attacks raises when it does).
    for attack in ("trail", "ipc-trail", "ghost"):
        assert results[attack] == {"done"}, (attack, results[attack])
    for attack, ends in results.items():
        if attack not in OWN_PROCESS_ONLY:
            assert ends == {"refused"}, (attack, ends)

    # Nothing of hidden/ came out, nothing changed it, and no candidate process outlived it.
    canary = (HIDDEN_DIR / "CANARY").read_text().strip().encode()
    for path in (tmp_path / "forged").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert canary not in data and b"SEAL-LEAK" not in data, path
    assert not (tmp_path / "forged" / "leak.txt").exists()
    assert tree_sha256(inputs["hidden"]) == hidden_before
    assert sealed.candidate_pids() == []
    written = json.loads((tmp_path / "forged" / "grade.json").read_text())
    assert written["submission_id"] == report["submission_id"] and "contracts" in written


def test_a_probe_result_that_is_a_link_is_never_followed(tmp_path: Path) -> None:
    """A candidate that swaps its probe result for a link to a file the judge can read gets
    no result at all (a crash), never the linked file's content."""
    inputs = closed_inputs(tmp_path)
    swap = '''
import os as _os, sys as _sys
if _sys.argv[1:2] == ["warmup_probe"]:
    _out = _sys.argv[-1]
    _os.symlink("/etc/passwd", _out)
    _os._exit(0)
'''
    proc, report = grade_payload(tmp_path, inputs, swap, "linked")
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    probed = {c["id"]: c for c in report["contracts"] if "test_lr_follows" in c["id"]}
    assert probed and all(c["outcome"] == "crash" for c in probed.values()), probed
    assert all("left no result" in c["evidence"]["message"] for c in probed.values())


def test_the_judge_refuses_hidden_checks_that_import_candidate_code(tmp_path: Path) -> None:
    """A hidden check that puts the candidate's tree on the judge's path is a grader defect:
    the grade is refused, never written."""
    inputs = closed_inputs(tmp_path)
    (inputs["hidden"] / "checks" / "test_leaky.py").write_text(
        "import os, sys\n\n\n"
        "def test_imports_the_candidate():\n"
        '    """A check written wrongly: it imports candidate code into the judge."""\n'
        "    sys.path.insert(0, os.environ['GRADING_WORKDIR'])\n"
        "    import tinytrain  # noqa: F401\n")
    diff = tmp_path / "empty.patch"
    diff.write_text("")
    proc, report, _ = run_grader(baseline=inputs["baseline"], packet=inputs["packet"],
                                 diff=diff, hidden=inputs["hidden"], out=tmp_path / "leaky",
                                 extra=["--hidden-test-timeout-s", str(TORCH_TEST_TIMEOUT_S)])
    assert proc.returncode == 2 and report is None
    assert "grader defect" in proc.stderr and "test_leaky.py" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_hidden_checks_other_than_the_hosts_are_refused(tmp_path: Path) -> None:
    inputs = closed_inputs(tmp_path)
    diff = tmp_path / "empty.patch"
    diff.write_text("")
    proc, report, elapsed = run_grader(
        baseline=inputs["baseline"], packet=inputs["packet"], diff=diff,
        hidden=inputs["hidden"], out=tmp_path / "other",
        extra=["--expect-hidden-sha256", "0" * 64])
    assert proc.returncode == 2 and report is None
    assert "the hidden tree changed" in proc.stderr and proc.stderr.count("\n") == 1
    assert elapsed < 30


def test_a_diff_that_copies_from_outside_the_tree_is_rejected(tmp_path: Path) -> None:
    """git checks the paths it writes, not the source of a copy or rename: such a diff could
    copy hidden files into the tree. It is refused before git runs (and git runs as the
    candidate uid, which could not read them anyway)."""
    inputs = closed_inputs(tmp_path)
    diff = tmp_path / "copy.patch"
    diff.write_text(
        "diff --git a/../../../../in/hidden/CANARY b/tinytrain/canary.txt\n"
        "similarity index 100%\n"
        "copy from ../../../../in/hidden/CANARY\n"
        "copy to tinytrain/canary.txt\n")
    proc, report, _ = run_grader(baseline=inputs["baseline"], packet=inputs["packet"],
                                 diff=diff, hidden=inputs["hidden"], out=tmp_path / "copy")
    assert proc.returncode == 0 and report is not None
    assert report["verdict"] == "diff_rejected"
    assert "copies or renames" in report["diff"]["apply_error"]


def test_finished_jobs_are_closed_to_later_runs(tmp_path: Path) -> None:
    """Every job folder of a grade ends root-owned 0700 (files 0600): a run that learns an
    earlier run's path (a resumed run is told where its checkpoint is) still cannot read it."""
    inputs = closed_inputs(tmp_path)
    work = Path(tempfile.mkdtemp(prefix="grading-work-"))
    os.chmod(work, 0o711)  # the candidate must reach the trees below it
    diff = tmp_path / "empty.patch"
    diff.write_text("")
    proc, report, _ = run_grader(baseline=inputs["baseline"], packet=inputs["packet"],
                                 diff=diff, hidden=inputs["hidden"], out=tmp_path / "jobs",
                                 extra=["--work", str(work / "w"),
                                        "--hidden-test-timeout-s", str(TORCH_TEST_TIMEOUT_S)])
    assert proc.returncode == 0 and report is not None
    jobs = [p for p in (work / "w" / "area").iterdir() if not p.name.startswith("scratch")]
    assert len(jobs) >= 5
    for job in jobs:
        for path in [job, *job.rglob("*")]:
            st = path.lstat()
            assert st.st_uid == 0 and not st.st_mode & 0o077, (path, oct(st.st_mode))
    shutil.rmtree(work, ignore_errors=True)


def killed_by_the_cleanup(proc: subprocess.Popen[bytes]) -> bool:
    """A candidate process this test started and then left to ``end_job``: killed, and perhaps
    already collected by the judge's cleanup (Python then reports 0, the status being gone)."""
    return proc.wait(timeout=10) in (-signal.SIGKILL, 0) and not Path(f"/proc/{proc.pid}").exists()


def test_one_signal_from_the_candidate_uid_ends_every_candidate_process() -> None:
    """What makes ``reap`` hold against a process that forks and exits thousands of times a
    second (never where a /proc scan looks): kill(-1) sent from the candidate uid, which the
    kernel delivers to every process of that uid in one walk. No scan is involved here: the
    processes go, detached ones in their own sessions included, and the judge is spared."""
    who = sealed.popen_identity()
    direct = [subprocess.Popen(["sleep", "600"], start_new_session=True, **who)
              for _ in range(3)]
    subprocess.run(["setsid", "sh", "-c", "sleep 600 & exit 0"], check=True, **who)
    deadline = time.monotonic() + 10
    while len(sealed.candidate_pids()) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(sealed.candidate_pids()) >= 4

    sealed._signal_all_as(who["user"])
    assert [p.wait(timeout=10) for p in direct] == [-signal.SIGKILL] * 3
    deadline = time.monotonic() + 10
    while sealed.candidate_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sealed.candidate_pids() == []


# A candidate that tries everything to outlive its job: it ignores every signal it may ignore,
# hops pids (forks, and the parent exits) without pause, and kills any other process of its
# uid the moment it appears (a kill helper started as the candidate uid would be one). With
# "disguise" every process of it takes a name that reads as a uid-0 line of /proc/PID/status
# to a parser that splits on "\r"; with "starve" it first gives its reaper the idle scheduling
# class and one CPU, and fills that CPU with busy processes.
SURVIVOR = r"""
import ctypes, os, signal, sys, time
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1):
    signal.signal(sig, signal.SIG_IGN)
me = os.getuid()
heartbeat = sys.argv[1]
modes = sys.argv[2].split(",")
libc = ctypes.CDLL(None, use_errno=True)


def disguise():
    if "disguise" in modes:
        libc.prctl(15, b"\rUid:\t0\t0\t0\t0", 0, 0, 0)  # PR_SET_NAME


def reapers():
    # Processes whose effective uid is this one's and whose real uid is not: the reaper.
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/status") as fh:
                for line in fh.read().split("\n"):
                    if line.startswith("Uid:\t"):
                        real, eff = (int(x) for x in line.split()[1:3])
                        if eff == me and real != me:
                            yield int(name)
        except (OSError, ValueError):
            pass


disguise()
if "starve" in modes:
    for pid in reapers():
        try:
            os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
            os.sched_setaffinity(pid, {0})
        except OSError:
            pass
    for _ in range(30):
        if os.fork() == 0:
            disguise()
            os.sched_setaffinity(0, {0})
            while True:
                pass


def strangers():
    # Processes of this uid that are not the survivor: a helper the judge started as it.
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if b"survivor" in fh.read():
                    continue
            with open(f"/proc/{name}/status") as fh:
                if any(l.startswith("Uid:") and int(l.split()[1]) == me for l in fh):
                    yield int(name)
        except OSError:
            pass


if os.fork() == 0:  # the helper killer, woken the moment a kill binary is opened
    disguise()
    watch = libc.inotify_init()
    for path in (b"/bin/kill", b"/usr/bin/kill", b"/usr/bin/ipcrm", b"/bin/sh"):
        libc.inotify_add_watch(watch, path, 0x20 | 0x01)  # IN_OPEN | IN_ACCESS
    os.set_blocking(watch, False)
    while True:
        try:
            os.read(watch, 65536)
            woken = True
        except BlockingIOError:
            woken = False
        for pid in strangers():
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        if not woken:
            time.sleep(0.0005)
while True:  # the pid hopper
    if os.fork():
        os._exit(0)
    disguise()
    if os.getpid() % 7 == 0:
        os.setsid()
    try:  # the judge's file, which the job can write and not remove: it outlives the seal
        beat = os.open(heartbeat, os.O_WRONLY | os.O_APPEND)
        os.write(beat, b".")
        os.close(beat)
    except OSError:
        pass
"""


def test_the_candidate_cannot_signal_or_stop_its_reaper() -> None:
    sealed.ensure_reaper()
    reaper = sealed._reaper
    assert reaper is not None and reaper.alive()
    for sig in ("-STOP", "-KILL"):
        tried = subprocess.run(["kill", sig, str(reaper.proc.pid)], capture_output=True,
                               **sealed.popen_identity())
        assert tried.returncode != 0 and b"not permitted" in tried.stderr.lower()
    assert reaper.alive() and sealed.candidate_pids() == []


def test_a_reaper_that_answers_late_is_replaced_and_its_answer_never_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The candidate can slow its reaper (its scheduling is the candidate's to set). One that
    misses the answer window is ended, the round falls back to a kill from the candidate uid,
    and the next job has a new reaper whose answers are its own: nothing late is read as the
    next request's answer."""
    monkeypatch.setattr(sealed, "_REAPER_ANSWER_S", 0.5)
    sealed.ensure_reaper()
    slow = sealed._reaper
    assert slow is not None and slow.alive()
    os.kill(slow.proc.pid, signal.SIGSTOP)  # the judge is root: a stand-in for a starved reaper
    job = sealed.job_dir("late-reaper")
    sleeper = subprocess.Popen(["sleep", "300"], cwd=job, start_new_session=True,
                               **sealed.popen_identity())
    sealed.end_job()
    assert killed_by_the_cleanup(sleeper)  # the fallback killed it
    assert not slow.alive() and slow.proc.poll() is not None
    sealed.ensure_reaper()
    fresh = sealed._reaper
    assert fresh is not None and fresh is not slow and fresh.alive()
    assert fresh.kill_all() and fresh.alive()


def survivor_outlives_no_job(runs: int, modes: str, *, reaper_gone: bool = False) -> None:
    """Start SURVIVOR as a job ``runs`` times and end the job: no process of it may be alive
    afterwards, by the scans and by the survivor's own heartbeat, which must stop."""
    # Where the candidate can read it (pytest's own folders are closed to it).
    fd, name = tempfile.mkstemp(prefix="survivor-", suffix=".py", dir="/tmp")
    os.write(fd, SURVIVOR.encode())
    os.close(fd)
    script = Path(name)
    script.chmod(0o644)
    for run in range(runs):
        job = sealed.job_dir("survivor")
        # Root's and writable by all, in /tmp: the cleanup leaves it and a survivor could
        # still write it after its job folder is sealed, so a beat after the job is proof.
        fd, beat_name = tempfile.mkstemp(prefix="beat-", dir="/tmp")
        os.close(fd)
        beat = Path(beat_name)
        beat.chmod(0o666)
        sealed.candidate_popen([sys.executable, str(script), str(beat), modes], cwd=job,
                               start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not beat.stat().st_size and time.monotonic() < deadline:
            time.sleep(0.005)
        assert beat.stat().st_size, f"run {run}: the survivor never started"
        if reaper_gone:
            # A stand-in for a judge process killed mid-job: its reaper goes with it, and the
            # job is ended by another judge process, which has no reaper for its uid.
            sealed._end_reaper()
        if jobcgroup.root() is not None:
            # The job's cgroup alone ends it, before any reaper is asked.
            assert jobcgroup.end_all() >= 1
            assert sealed.candidate_pids() == [], f"run {run}: outlived its cgroup's end"
        sealed.end_job()
        assert sealed.candidate_pids() == [], f"run {run}: a candidate process outlived reap"
        last = beat.stat().st_size
        time.sleep(0.3)
        assert beat.stat().st_size == last, f"run {run}: the survivor still beats"
        assert sealed.candidate_pids() == [], f"run {run}: a candidate process came back"
        beat.unlink()
    script.unlink()


def test_a_survivor_that_hops_kills_helpers_and_ignores_signals_outlives_no_job() -> None:
    """Run a few hundred times: the job ends, and no process of it is alive in the next."""
    survivor_outlives_no_job(int(os.environ.get("GRADING_SURVIVOR_RUNS", "300")), "plain")


def test_a_process_named_like_a_uid_line_is_found_by_the_scans() -> None:
    """/proc/PID/status begins with the process's own name, which it sets: one holding
    "\\rUid:\\t0\\t0\\t0\\t0" must still count as the candidate's (it is the job's uid)."""
    code = ("import ctypes, sys, time\n"
            "ctypes.CDLL(None).prctl(15, b'\\rUid:\\t0\\t0\\t0\\t0', 0, 0, 0)\n"
            "sys.stdout.write('named\\n')\n"
            "sys.stdout.flush()\n"
            "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            start_new_session=True, **sealed.popen_identity())
    assert proc.stdout is not None and proc.stdout.readline() == b"named\n"
    with open(f"/proc/{proc.pid}/status", "rb") as fh:
        assert fh.read().startswith(b"Name:\t\rUid:")  # the kernel kept the disguise
    assert proc.pid in sealed.candidate_pids()
    sealed.end_job()
    assert killed_by_the_cleanup(proc)


def test_a_survivor_named_to_hide_from_the_scans_outlives_no_job() -> None:
    """A process name holding "\\rUid:\\t0..." cannot pass for a process of uid 0."""
    survivor_outlives_no_job(30, "disguise")


def test_a_survivor_whose_judge_process_was_killed_outlives_no_job() -> None:
    """The job's reaper is gone with its judge process; the judge that ends the job kills with
    a one-shot reaper the survivor can neither signal nor stop, not with a kill it can race."""
    survivor_outlives_no_job(30, "disguise", reaper_gone=True)


def test_a_survivor_that_starves_its_reaper_outlives_no_job(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its reaper idle-class and pinned under 30 busy processes: the judge kills what its scan
    finds first, and a reaper that still answers late is replaced by a one-shot one."""
    monkeypatch.setattr(sealed, "_REAPER_ANSWER_S", 3.0)
    survivor_outlives_no_job(5, "disguise,starve")


# A process of one job trying to reach another job: signal its process, read that process's
# environment (the kernel's ptrace access check), list its job folder.
REACH = r"""
import json, os, sys
pid, folder, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
reached = []
for what, attempt in (("signal", lambda: os.kill(pid, 0)),
                      ("environ", lambda: open(f"/proc/{pid}/environ", "rb").read()),
                      ("folder", lambda: os.listdir(folder))):
    try:
        attempt()
        reached.append(what)
    except OSError:
        pass
print(json.dumps({"uid": os.getuid(), "reached": reached}))
"""


def test_each_job_has_a_uid_of_its_own_that_no_other_job_can_reach(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two jobs in turn get two uids of the pool. A process of the first job still alive (as if
    it had escaped the kill: the test moves to the next job without the cleanup) can neither
    signal nor inspect the second job's process nor list its folder, nor the other way round,
    while each reaches its own (the probe can see a reach). The next cleanup ends both."""
    monkeypatch.setenv(sealed.CANDIDATE_UIDS_VAR, "8")
    fd, name = tempfile.mkstemp(prefix="reach-", suffix=".py", dir="/tmp")
    os.write(fd, REACH.encode())
    os.close(fd)
    probe = Path(name)
    probe.chmod(0o644)

    def start_job(label: str) -> tuple[Path, subprocess.Popen[bytes], dict[str, Any]]:
        folder = sealed.job_dir(label)
        who = dict(sealed.popen_identity())
        sleeper = subprocess.Popen(["sleep", "600"], cwd=folder, start_new_session=True, **who)
        return folder, sleeper, who

    def reach(who: dict[str, Any], pid: int, folder: Path) -> list[str]:
        out = subprocess.run([sys.executable, str(probe), str(pid), str(folder), "-"],
                             cwd="/", capture_output=True, timeout=60, check=True, **who)
        found = json.loads(out.stdout)
        assert found["uid"] == who["user"]
        return list(found["reached"])

    first, first_sleeper, first_who = start_job("first")
    # A stand-in for a process that escaped the first job's kill: the job is over, no cleanup.
    sealed._end_reaper()
    sealed._end_identity()
    second, second_sleeper, second_who = start_job("second")
    pool = sealed.candidate_uids()
    assert first_who["user"] != second_who["user"]
    assert {first_who["user"], second_who["user"]} <= set(pool)

    assert reach(first_who, second_sleeper.pid, second) == []
    assert reach(second_who, first_sleeper.pid, first) == []
    assert reach(second_who, second_sleeper.pid, second) == ["signal", "environ", "folder"]

    sealed.end_job()
    assert killed_by_the_cleanup(first_sleeper) and killed_by_the_cleanup(second_sleeper)
    assert sealed.candidate_pids() == []
    probe.unlink()


# A job's first process (the judge's child) makes more children of the judge with
# clone(CLONE_PARENT), each named with 12 bytes of a message, that die at once: zombies of the
# judge whose names any uid can read, and whose pids count against the container's limit.
ZOMBIE_WRITER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
SYS_clone, CLONE_PARENT, SIGCHLD, PR_SET_NAME, SYS_exit = 56, 0x8000, 17, 15, 60
data = sys.argv[1].encode()
for i in range(0, len(data), 12):
    name = b"Z" + bytes([0x21 + i // 12]) + data[i:i + 12]
    if libc.syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0) == 0:
        libc.prctl(PR_SET_NAME, name, 0, 0, 0)
        libc.syscall(SYS_exit, 0)
"""

ZOMBIE_READER = r"""
import os
found = []
for p in os.listdir("/proc"):
    try:
        raw = open(f"/proc/{p}/stat", "rb").read()
    except OSError:
        continue
    comm = raw[raw.index(b"(") + 1: raw.rindex(b")")]
    if comm.startswith(b"Z"):
        found.append(comm.decode(errors="replace"))
print(len(found))
"""


def test_dead_children_a_job_gives_the_judge_reach_no_later_job() -> None:
    """The cleanup collects every dead child of the judge that a candidate uid made: the next
    job (another uid) finds none of the message, and the pids are free again."""
    from grading.run import run_command

    log = Path(tempfile.mkdtemp(prefix="zombies-"))
    message = "job A's secret: weights at step 17 were 0.123456789 " * 4
    run_command([sys.executable, "-c", ZOMBIE_WRITER, message], cwd=Path("/"),
                env={"PATH": "/usr/bin:/bin"}, timeout_s=60, log_path=log / "a.log")
    later = subprocess.run([sys.executable, "-c", ZOMBIE_READER], cwd="/", capture_output=True,
                           timeout=60, check=True, **sealed.popen_identity())
    sealed.end_job()
    assert later.stdout.strip() == b"0"
    left = subprocess.run([sys.executable, "-c", ZOMBIE_READER], capture_output=True,
                          timeout=60, check=True)
    assert left.stdout.strip() == b"0"  # none left at all, seen from the judge
    shutil.rmtree(log, ignore_errors=True)


TIME_WAIT = r"""
import socket
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
for _ in range(5):
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    client.close()  # the side that closes first keeps the TIME_WAIT entry
    accepted.close()
server.close()
"""


def test_a_closed_connection_leaves_no_time_wait_entry_for_the_next_job() -> None:
    """The grader container keeps no TIME_WAIT table (``GRADER_SYSCTLS``): a job cannot encode
    data in the addresses and ports of its closed connections, which /proc/net/tcp shows to
    every uid for a minute."""
    subprocess.run([sys.executable, "-c", TIME_WAIT], cwd="/", check=True, timeout=60,
                   **sealed.popen_identity())
    sealed.end_job()
    entries = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    assert [e for e in entries if e[3] == "06"] == []  # 06: TIME_WAIT


# What a candidate job leaves to stop the cleanup or to reach the next job: a tree far deeper
# than any recursion, a folder of 20,000 files, closed modes, a file held open by a child,
# System V objects of every kind, a POSIX message queue, links to the judge's files, and a
# mount it is not allowed to make.
TRACES = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
job = sys.argv[1]
for base in (job, "/tmp", "/dev/shm"):
    top = os.path.join(base, "deep-" + str(os.getpid()))
    os.mkdir(top)
    fd = os.open(top, os.O_DIRECTORY)
    for _ in range(3000):
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
wide = os.path.join("/tmp", "wide-" + str(os.getpid()))
os.mkdir(wide)
for i in range(20000):
    os.close(os.open(os.path.join(wide, str(i)), os.O_CREAT | os.O_WRONLY, 0o600))
closed = os.path.join("/tmp", "closed-" + str(os.getpid()))
os.makedirs(os.path.join(closed, "inner"))
open(os.path.join(closed, "inner", "f"), "w").write("x")
os.chmod(os.path.join(closed, "inner"), 0)
os.chmod(closed, 0)
os.symlink("/etc/passwd", os.path.join("/tmp", "link-" + str(os.getpid())))
held = os.path.join("/dev/shm", "held-" + str(os.getpid()))
if os.fork() == 0:
    # Let go of the pipes so the parent's run ends; the held file is the trace.
    null = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 1, 2):
        os.dup2(null, stream)
    fh = open(held, "w")
    os.setsid()
    import time
    time.sleep(3600)
IPC_CREAT = 0o1000
assert libc.shmget(0, 4096, IPC_CREAT | 0o600) >= 0
assert libc.msgget(0, IPC_CREAT | 0o600) >= 0
assert libc.semget(0, 1, IPC_CREAT | 0o600) >= 0
try:
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
    rt.mq_open(b"/trace-" + str(os.getpid()).encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
except OSError:
    pass
mounted = libc.mount(b"none", os.path.join(job).encode(), b"tmpfs", 0, None)
print("mount", mounted, ctypes.get_errno(), flush=True)
"""

# What the next job looks for: anything of any candidate uid anywhere it could reach.
LOOK = r"""
import json, os, sys
first, count = (int(x) for x in sys.argv[3].split(","))
pool = range(first, first + count)
found = []
for root in ("/tmp", "/dev/shm", "/dev/mqueue", "/var/tmp"):
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            try:
                if os.lstat(path).st_uid in pool:
                    found.append(path)
            except OSError:
                pass
for table in ("/proc/sysvipc/shm", "/proc/sysvipc/msg", "/proc/sysvipc/sem"):
    lines = open(table).read().splitlines()
    found += [f"{table}: {l}" for l in lines[1:]
              if any(f.isdigit() and int(f) in pool for f in l.split())]
try:
    os.listdir(sys.argv[1])
    found.append("the earlier job's folder is readable")
except PermissionError:
    pass
open(sys.argv[2], "w").write(json.dumps(found))
"""


def test_no_trace_of_a_job_stops_the_cleanup_or_reaches_the_next_job() -> None:
    fd, name = tempfile.mkstemp(prefix="traces-", suffix=".py", dir="/tmp")
    os.write(fd, TRACES.encode())
    os.close(fd)
    traces = Path(name)
    traces.chmod(0o644)
    first = sealed.job_dir("traces")
    made = subprocess.run([sys.executable, str(traces), str(first)], cwd=first,
                          capture_output=True, timeout=600, **sealed.popen_identity())
    assert made.returncode == 0, made.stderr[-2000:]
    assert b"mount -1" in made.stdout  # a mount the candidate is not allowed to make
    assert sum(sealed.candidate_ipc_objects().values()) >= 3
    sealed.end_job()  # nothing it left may stop this
    traces.unlink()
    fd, name = tempfile.mkstemp(prefix="look-", suffix=".py", dir="/tmp")
    os.write(fd, LOOK.encode())
    os.close(fd)
    look = Path(name)
    look.chmod(0o644)
    second = sealed.job_dir("look")
    result = second / "found.json"
    pool = sealed.candidate_uids()
    subprocess.run([sys.executable, str(look), str(first), str(result),
                    f"{pool.start},{len(pool)}"], cwd=second,
                   check=True, timeout=300, **sealed.popen_identity())
    sealed.end_job()
    look.unlink()
    assert json.loads(result.read_text()) == []


def job_cgroups() -> Path | None:
    """The delegated hierarchy; without one (a host that cannot give it: cgroup v2, a harness
    that is not root), None once the grade is shown to say so and why: jobs then end by the
    uid reaper alone, which the survivor tests above hold to."""
    root = jobcgroup.root()
    if root is None:
        why = os.environ.get(jobcgroup.NO_JOB_CGROUPS_VAR)
        assert why, "no job cgroups and no reason from the host"
        assert jobcgroup.kill_mechanism() == f"{jobcgroup.KILL_BY_UID} (no job cgroup: {why})"
        return None
    jobcgroup.close_root()
    return root


def test_every_process_of_a_job_runs_in_its_own_cgroup_and_ends_with_it() -> None:
    """A job's first process joins the job's cgroup before it runs anything of the candidate,
    and all it starts (detached, double-forked) is there too; ending the job freezes and kills
    that cgroup and removes it, and the grade says a cgroup ended the job."""
    if (root := job_cgroups()) is None:
        return
    assert jobcgroup.kill_mechanism() == jobcgroup.KILL_BY_CGROUP
    job = sealed.job_dir("cgroup")
    cgroup = sealed.job_cgroup()
    assert cgroup is not None and cgroup.parent == root
    first = sealed.candidate_popen(
        ["sh", "-c", "setsid sh -c 'sleep 600 & sleep 600 & wait' & (sleep 600 &) ; sleep 600"],
        cwd=job, start_new_session=True)
    deadline = time.monotonic() + 10
    while len(sealed.candidate_pids()) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    in_cgroup = {int(x) for x in (cgroup / "cgroup.procs").read_text().split()}
    assert len(in_cgroup) >= 5 and set(sealed.candidate_pids()) <= in_cgroup
    assert first.pid in in_cgroup
    assert sealed.end_job() >= 5
    # (Its exit status is not there to read: the cleanup collects a dead child of the judge.)
    assert not cgroup.exists() and sealed.candidate_pids() == []
    assert not os.path.exists(f"/proc/{first.pid}")


# What a job's process tries against its cgroup; each line says how it ended.
CGROUP_ESCAPE = r"""
import os, sys
own, root = sys.argv[1], sys.argv[2]
sibling = os.path.join(root, "job-escape")
attempts = {
    "leave to the delegated root": (os.path.join(root, "cgroup.procs"), str(os.getpid())),
    "thaw its own cgroup": (os.path.join(own, "freezer.state"), "THAWED"),
    "freeze its own cgroup": (os.path.join(own, "freezer.state"), "FROZEN"),
    "join another job's cgroup": (os.path.join(sibling, "cgroup.procs"), str(os.getpid())),
}
for name, (path, value) in attempts.items():
    try:
        with open(path, "w") as fh:
            fh.write(value)
        print(name, "DONE")
    except OSError as exc:
        print(name, "refused", type(exc).__name__)
try:
    os.mkdir(os.path.join(own, "mine"))
    print("make a cgroup of its own DONE")
except OSError as exc:
    print("make a cgroup of its own refused", type(exc).__name__)
try:
    print("list the jobs", os.listdir(root))
except OSError as exc:
    print("list the jobs refused", type(exc).__name__)
"""


def test_a_job_can_neither_leave_nor_change_nor_see_the_cgroups() -> None:
    if (root := job_cgroups()) is None:
        return
    job = sealed.job_dir("escape")
    cgroup = sealed.job_cgroup()
    assert cgroup is not None
    sibling = root / "job-escape"
    sibling.mkdir()
    try:
        proc = sealed.candidate_run([sys.executable, "-c", CGROUP_ESCAPE, str(cgroup), str(root)],
                                    cwd=job, capture_output=True, text=True, timeout=60)
        lines = proc.stdout.splitlines()
        assert len(lines) == 6, proc.stdout + proc.stderr
        assert all(" refused " in line for line in lines), proc.stdout
        assert (cgroup / "freezer.state").read_text().strip() == "THAWED"
        assert not (sibling / "cgroup.procs").read_text().split()
    finally:
        sealed.end_job()
    # Ending a job ends every job cgroup left there (a judge process killed mid-job).
    assert not sibling.exists() and not cgroup.exists()


# A job that stops and continues its own child without pause: a task that enters the stop
# while its cgroup freezes is never frozen (cgroup v1), so the freeze can stay incomplete
# (found by an adversarial review: about one job in six, before each kill round thawed and
# killed whatever froze or stopped).
STOP_CONT = r"""
import os, signal, sys, time
if os.fork() == 0:
    kid = os.fork()
    if kid == 0:
        while True:
            time.sleep(1)
    while True:
        os.kill(kid, signal.SIGSTOP)
        os.kill(kid, signal.SIGCONT)
time.sleep(0.5)
open(sys.argv[1], "w").write("ready")
time.sleep(600)
"""


def test_a_job_that_stops_and_continues_its_processes_still_ends() -> None:
    """Thirty such jobs each end at once, with nothing of them left (before the fix about one
    in six ended as a grader defect, its tasks frozen past every kill)."""
    for run in range(int(os.environ.get("GRADING_STOP_CONT_RUNS", "30"))):
        job = sealed.job_dir("stop-cont")
        cgroup = sealed.job_cgroup()
        ready = job / "ready"
        sealed.candidate_popen([sys.executable, "-c", STOP_CONT, str(ready)], cwd=job,
                               start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists(), f"run {run}: the job never started"
        sealed.end_job()
        assert sealed.candidate_pids() == [], f"run {run}: a process outlived its job"
        assert cgroup is None or not cgroup.exists(), f"run {run}: the job's cgroup is left"


# A process whose exit takes long: one memfd mapped many times with MAP_POPULATE, so that its
# page tables are large and the kernel spends seconds freeing them after SIGKILL (a candidate
# chooses how long: a second adversarial review reached 30 s of teardown with 1.1 GB of page
# tables, and the job's end gave up on a process that could no longer do anything).
SLOW_EXIT = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
size, maps = 64 << 20, int(sys.argv[2])
fd = os.memfd_create("pages", 0)
os.ftruncate(fd, size)
first = libc.mmap(None, size, 3, 1, fd, 0)  # read-write, shared: fill the file's pages
ctypes.memset(first, 1, size)
for _ in range(maps):  # read-only, shared, populated: page tables only
    if libc.mmap(None, size, 1, 1 | 0x8000, fd, 0) in (None, ctypes.c_void_p(-1).value):
        break
open(sys.argv[1], "w").write("ready")
os.pause()
"""


def test_a_killed_process_still_freeing_its_memory_does_not_stop_the_job_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job ends, clean, while its killed process is still in the kernel's teardown: that
    process can run nothing more. With the kill rounds cut to one short round, a teardown of a
    second or more outlasts them (before the fix the job's end then failed as a grader defect);
    here it must not matter."""
    if job_cgroups() is None:
        return  # the uid reaper's scans count the same processes as ended (procfs)
    monkeypatch.setattr(jobcgroup, "_ROUNDS", 1)
    monkeypatch.setattr(jobcgroup, "_EMPTY_WAIT_S", 0.05)
    job = sealed.job_dir("slow-exit")
    cgroup = sealed.job_cgroup()
    assert cgroup is not None
    ready = job / "ready"
    proc = sealed.candidate_popen([sys.executable, "-c", SLOW_EXIT, str(ready), "1500"], cwd=job,
                                  start_new_session=True, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), "the process never mapped its memory"
    sealed.end_job()
    assert sealed.candidate_pids() == []
    still_exiting = os.path.exists(f"/proc/{proc.pid}")
    print(f"the killed process was {'still' if still_exiting else 'no longer'} exiting when "
          "the job ended")
    deadline = time.monotonic() + 120
    while os.path.exists(f"/proc/{proc.pid}/task") and time.monotonic() < deadline:
        time.sleep(0.1)
        sealed.collect_zombie_children()
    # A later job's end removes the cgroup once the last task is gone.
    jobcgroup.end_all()
    assert not cgroup.exists()
