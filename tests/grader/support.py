"""Helpers of the grader tests: diffs of real trees, and ``python -m grading`` as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from grading.run import marked_pids

ROOT = Path(__file__).resolve().parents[2]
PACKET_DIR = ROOT / "tests" / "fixtures" / "task_packets" / "tiny-regression"
HIDDEN_DIR = ROOT / "hidden" / "tiny-regression"
REFERENCE_PATCH = HIDDEN_DIR / "reference" / "solution.patch"

# Hidden per-test limit for the torch runs: the slowest healthy check (the resume: a probe and
# two command-line runs, each importing torch) took 25 s on 2 CPUs at a load of 8, where 30 s
# made it a hang; 60 s leaves room for a busy host. No test here relies on it to see a hang.
TORCH_TEST_TIMEOUT_S = 60  # a hidden check plus pytest start-up, with room for a loaded machine
# A host shared with other heavy jobs (a load of 10 on 2 cores) can need several times that,
# and more than the packet's 120 s for the public tests: GRADER_TEST_TIMEOUT_S raises both.
if os.environ.get("GRADER_TEST_TIMEOUT_S"):
    TORCH_TEST_TIMEOUT_S = int(os.environ["GRADER_TEST_TIMEOUT_S"])


def git(args: list[str], cwd: Path) -> str:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@localhost",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@localhost",
    }
    # The grader image's tests run as root on trees owned by uid 1000.
    proc = subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, env=env,
                          capture_output=True, check=True)
    return proc.stdout.decode()


def make_diff(baseline: Path, tmp: Path, change: Callable[[Path], None]) -> Path:
    """The ``git diff --binary`` a harness would produce for ``change`` applied to a copy."""
    repo = tmp / f"repo-{uuid.uuid4().hex[:8]}"
    subprocess.run(["cp", "-a", str(baseline), str(repo)], check=True)
    git(["init", "-q"], repo)
    git(["add", "-A"], repo)
    git(["commit", "-q", "-m", "baseline"], repo)
    change(repo)
    git(["add", "-A"], repo)
    patch = tmp / f"{repo.name}.patch"
    patch.write_text(git(["diff", "--cached", "--binary", "--full-index", "HEAD"], repo))
    return patch


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not unique in {path}"
    path.write_text(text.replace(old, new))


def run_grader(
    *,
    baseline: Path,
    packet: Path,
    diff: Path,
    hidden: Path,
    out: Path,
    extra: list[str] | None = None,
    timeout: float = 300,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None, float]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    argv = [
        sys.executable, "-m", "grading",
        "--baseline", str(baseline),
        "--packet", str(packet),
        "--diff", str(diff),
        "--hidden", str(hidden),
        "--out", str(out),
        "--submission-id", f"test-{out.name}",
        *(extra or []),
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    elapsed = time.monotonic() - t0
    grade_json = out / "grade.json"
    report = json.loads(grade_json.read_text()) if grade_json.exists() else None
    print(f"grading {out.name}: {elapsed:.1f} s")  # shown with -s: the measured durations
    return proc, report, elapsed


def outcomes(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["outcome"] for c in report["contracts"]}


def processes_with(token: str) -> list[int]:
    """PIDs whose command line contains ``token``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline:
            found.append(int(name))
    return found


def parent_pid(pid: int) -> int:
    status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return int(status["PPid"])


def daemon_pids(sock: Path) -> list[int]:
    """The warm daemon listening on ``sock``: of the processes whose command line names it, the
    one whose parent is none of them (its sessions and their children are its forks)."""
    pids = processes_with(str(sock))
    return [pid for pid in pids if parent_pid(pid) not in pids]


def assert_no_run_survives(report: dict[str, Any]) -> None:
    for contract in report["contracts"]:
        run_id = contract["evidence"].get("run_id")
        if run_id:
            assert marked_pids(run_id) == [], f"{contract['id']} left processes behind"


def grade_tiny(
    tmp_path: Path,
    diff: Path,
    name: str,
    *,
    packet_overrides: dict[str, Any] | None = None,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    packet = PACKET_DIR / "packet.yaml"
    if os.environ.get("GRADER_TEST_TIMEOUT_S"):
        packet_overrides = {"public_test_timeout_s": 4 * TORCH_TEST_TIMEOUT_S,
                            **(packet_overrides or {})}
    if packet_overrides:
        data = yaml.safe_load(packet.read_text()) | packet_overrides
        packet = tmp_path / f"{name}-packet.yaml"
        packet.write_text(yaml.safe_dump(data))
    proc, report, _ = run_grader(
        baseline=PACKET_DIR / "repo",
        packet=packet,
        diff=diff,
        hidden=HIDDEN_DIR,
        out=tmp_path / name,
        extra=["--hidden-test-timeout-s", str(TORCH_TEST_TIMEOUT_S)],
    )
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    return proc, report


def apply_reference(repo: Path) -> None:
    git(["apply", "--binary", str(REFERENCE_PATCH)], repo)


def hidden_outcomes(report: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in outcomes(report).items() if k.startswith("hidden:")}


