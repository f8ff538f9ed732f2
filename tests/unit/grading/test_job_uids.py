"""The candidate uid pool: which uid each job takes (grading.sealed), without starting any
candidate process (the in-image suite, tests/grader/test_seal.py, runs them)."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from grading import sealed

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the grader refuses to run unless root")


@pytest.fixture()
def pool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> range:
    monkeypatch.setenv(sealed.CANDIDATE_UID_VAR, "5000")
    monkeypatch.setenv(sealed.CANDIDATE_UIDS_VAR, "4")
    monkeypatch.setenv(sealed.CANDIDATE_AREA_VAR, str(tmp_path))
    monkeypatch.setattr(sealed, "_job_uid", None)
    return sealed.candidate_uids()


def test_each_job_takes_the_next_uid_and_keeps_it_until_its_end(pool: range) -> None:
    taken = []
    for _ in range(6):
        first = sealed.candidate().uid
        assert sealed.candidate().uid == first  # the same job: the same uid
        taken.append(first)
        sealed._end_identity()
    assert taken == [5000, 5001, 5002, 5003, 5000, 5001]


def _take_uids(area: str, n: int, out: multiprocessing.Queue[list[int]]) -> None:
    os.environ[sealed.CANDIDATE_AREA_VAR] = area
    sealed._job_uid = None
    taken = []
    for _ in range(n):
        taken.append(sealed._next_job_index())
    out.put(taken)


def test_judge_processes_of_one_grade_share_the_count(pool: range, tmp_path: Path) -> None:
    """The grade and its hidden checks' pytest count jobs in one file: no index is taken twice,
    even by processes that take them at the same moment."""
    queue: multiprocessing.Queue[list[int]] = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_take_uids, args=(str(tmp_path), 200, queue))
             for _ in range(3)]
    for proc in procs:
        proc.start()
    indexes = [i for _ in procs for i in queue.get(timeout=60)]
    for proc in procs:
        proc.join(timeout=60)
    assert sorted(indexes) == list(range(600))
    assert (tmp_path / ".job-uids").read_text() == "600"
    assert (tmp_path / ".job-uids").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(("first", "count", "problem"), [
    ("0", "4", "non-root uid"), ("x", "4", "non-root uid"), ("5000", "0", "count from 1"),
    ("5000", "-3", "count from 1"), ("5000", "70000", "count from 1"),
])
def test_a_bad_pool_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch, first: str,
                                           count: str, problem: str) -> None:
    monkeypatch.setenv(sealed.CANDIDATE_UID_VAR, first)
    monkeypatch.setenv(sealed.CANDIDATE_UIDS_VAR, count)
    with pytest.raises(sealed.SealError, match=problem):
        sealed.candidate_uids()


def test_the_reapers_uid_is_outside_the_pool(pool: range,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert sealed.reaper_uid() == 5004
    monkeypatch.setenv(sealed.REAPER_UID_VAR, "5002")
    with pytest.raises(sealed.SealError, match="outside the candidate uids"):
        sealed.reaper_uid()
