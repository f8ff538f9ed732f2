"""The host's half of a cgroup per candidate job, against the real engine and kernel.

A grader container gets a cgroup v1 freezer folder of its own where the host can give one
(harness.infra.job_cgroups); the judge freezes a job's cgroup to end it. A container removed
while one of its jobs is frozen (a judge killed between its freeze and its thaw, or the
removal racing the judge's kill) must still go, and take its folder with it: a frozen task does
not die, and would keep the container's pid namespace from ending.
"""

from __future__ import annotations

import time

import docker
import pytest

from harness.infra import images, job_cgroups
from harness.oracle.grade import JUDGE_USER, grader_sandbox
from tests.conftest import TEST_LABEL

pytestmark = pytest.mark.integration

# Root in the container: a job cgroup with a sleeping candidate process in it, then frozen.
FREEZE_A_JOB = r"""
import os, subprocess, sys, time
root = os.environ["GRADING_JOB_CGROUPS"]
job = os.path.join(root, "job-0")
os.mkdir(job)
child = subprocess.Popen(["sleep", "600"], user=2000, group=2000, start_new_session=True)
with open(os.path.join(job, "cgroup.procs"), "w") as fh:
    fh.write(str(child.pid))
with open(os.path.join(job, "freezer.state"), "w") as fh:
    fh.write("FROZEN")
for _ in range(200):
    if open(os.path.join(job, "freezer.state")).read().strip() == "FROZEN":
        print("frozen", child.pid)
        sys.exit(0)
    time.sleep(0.01)
sys.exit("the job did not freeze")
"""


def test_a_grader_container_with_a_frozen_job_is_removed_with_its_folder(
    client: docker.DockerClient,
) -> None:
    found = job_cgroups.support(client)
    box = grader_sandbox(client, images.image_id(client, "grader"), labels={TEST_LABEL: "1"},
                         name_hint="frozen-job")
    with box:
        assert box.job_cgroups is not None
        folder = box.job_cgroups.path
        if not found.available:
            # The container is told why, and the grade will say the uid reaper ended its jobs.
            assert folder is None
            env = box.exec(["sh", "-c", 'echo "$GRADING_NO_JOB_CGROUPS"'], timeout_s=30,
                           user=JUDGE_USER)
            assert env.output.strip() == found.reason
            return
        assert folder is not None and folder.is_dir()
        result = box.exec(["python", "-c", FREEZE_A_JOB], timeout_s=60, user=JUDGE_USER)
        assert result.exit_code == 0 and "frozen" in result.output, result.output
        assert (folder / "job-0" / "freezer.state").read_text().strip() == "FROZEN"
        started = time.monotonic()
    # The removal (Sandbox.close) thaws while it kills: it ends, and the folder is gone.
    assert time.monotonic() - started < 120
    assert not folder.exists()
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(box.name)
