"""The host's half of the per-job cgroups: what a grader container is told, and when."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from grading import jobcgroup
from harness.infra import job_cgroups


def test_the_host_and_the_judge_agree_on_the_names() -> None:
    assert job_cgroups.JOB_CGROUPS_VAR == jobcgroup.JOB_CGROUPS_VAR
    assert job_cgroups.NO_JOB_CGROUPS_VAR == jobcgroup.NO_JOB_CGROUPS_VAR


def test_a_remote_engine_gets_no_job_cgroups_and_is_told_why() -> None:
    remote = SimpleNamespace(api=SimpleNamespace(base_url="http://10.0.0.7:2375"))
    found = job_cgroups.support(remote)
    assert not found.available and found.reason
    made = job_cgroups.JobCgroups.make("harness-grade-x", remote)
    assert made.path is None
    volumes, env = made.container_settings()
    assert volumes == {} and env == {job_cgroups.NO_JOB_CGROUPS_VAR: found.reason}


def test_a_delegated_folder_is_bound_read_write_and_named_to_the_judge() -> None:
    volumes, env = job_cgroups.JobCgroups(Path("/sys/fs/cgroup/freezer/x/y")).container_settings()
    assert volumes == {"/sys/fs/cgroup/freezer/x/y": {"bind": job_cgroups.CONTAINER_PATH,
                                                      "mode": "rw"}}
    assert env == {job_cgroups.JOB_CGROUPS_VAR: job_cgroups.CONTAINER_PATH}


def test_the_grade_says_how_jobs_ended(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(jobcgroup.JOB_CGROUPS_VAR, raising=False)
    monkeypatch.setenv(jobcgroup.NO_JOB_CGROUPS_VAR, "the host runs cgroup v2")
    assert jobcgroup.kill_mechanism() == "uid reaper (no job cgroup: the host runs cgroup v2)"
    # A folder that is not a freezer cgroup is not taken for one, and the grade says so.
    monkeypatch.delenv(jobcgroup.NO_JOB_CGROUPS_VAR)
    monkeypatch.setenv(jobcgroup.JOB_CGROUPS_VAR, str(tmp_path))
    assert jobcgroup.root() is None
    assert jobcgroup.kill_mechanism() == (
        f"uid reaper (no job cgroup: {jobcgroup.JOB_CGROUPS_VAR}={tmp_path} is not a freezer "
        "cgroup folder)")
    (tmp_path / "freezer.state").write_text("THAWED\n")
    assert jobcgroup.root() == tmp_path
    assert jobcgroup.kill_mechanism() == jobcgroup.KILL_BY_CGROUP
