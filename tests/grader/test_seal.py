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
import tempfile
import time
from pathlib import Path
from typing import Any

from seal_payload import PAYLOAD
from support import (
    HIDDEN_DIR,
    PACKET_DIR,
    TORCH_TEST_TIMEOUT_S,
    make_diff,
    outcomes,
    run_grader,
)

from grading import sealed
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

    sealed._signal_all_as_candidate()
    assert [p.wait(timeout=10) for p in direct] == [-signal.SIGKILL] * 3
    deadline = time.monotonic() + 10
    while sealed.candidate_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sealed.candidate_pids() == []
