"""The distributed launcher: crash and hang name the rank, and nothing survives.

Runs inside the grader image (tests/integration/test_grader_image.py), where grading runs for
real: the
ranks run as the candidate uid, in a job folder of their own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from grading import sealed
from grading.launch import LaunchResult, launch

JOB = Path(__file__).parents[1] / "fixtures" / "dist" / "allreduce_job.py"


def run(mode: str, tmp_path: Path, timeout_s: float = 60) -> tuple[LaunchResult, Path]:
    out = sealed.job_dir(f"launch-{mode}")
    result = launch([sys.executable, str(JOB), mode, str(out)], nproc=2, cwd=out,
                    env={"PATH": os.environ["PATH"], "GLOO_SOCKET_IFNAME": "lo"},
                    timeout_s=timeout_s, log_dir=tmp_path / "logs", grace_s=3,
                    expected_outputs=lambda r: [out / f"rank{r}.txt"])
    return result, out


def no_process_left() -> bool:
    """No candidate process, and no stray sleeper of the fixture job."""
    if sealed.candidate_pids():
        return False
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"sleep\x001000" in cmdline:
            return False
    return True


def test_ok(tmp_path: Path) -> None:
    result, out = run("ok", tmp_path)
    assert result.outcome == "ok" and result.culprit_ranks == []
    assert (out / "rank0.txt").read_text() == (out / "rank1.txt").read_text() == "3.0\n"
    assert all(Path(r.log).is_file() for r in result.ranks)


@pytest.mark.parametrize("mode", ["crash1", "abort1"])
def test_a_crashing_rank_is_named(tmp_path: Path, mode: str) -> None:
    result, _ = run(mode, tmp_path)
    assert result.outcome == "crash" and result.culprit_ranks == [1], result.detail
    assert "rank 1" in result.detail
    if mode == "abort1":
        assert result.ranks[1].signal == "SIGABRT"
    assert no_process_left()


def test_a_hanging_rank_is_a_hang_within_the_limit(tmp_path: Path) -> None:
    result, _ = run("hang1", tmp_path, timeout_s=15)
    assert result.outcome == "hang" and 1 in result.culprit_ranks, result.detail
    assert result.duration_s < 15 + 10
    assert no_process_left()


def test_a_rank_without_output_is_a_crash(tmp_path: Path) -> None:
    result, _ = run("silent1", tmp_path)
    assert result.outcome == "crash" and result.culprit_ranks == [1]
    assert "left no output" in result.detail


def test_daemonised_children_do_not_survive(tmp_path: Path) -> None:
    result, _ = run("daemon", tmp_path)
    assert result.outcome == "ok"
    assert no_process_left()
