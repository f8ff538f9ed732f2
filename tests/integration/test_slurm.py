"""`harness matrix run --executor slurm` on a real single-node Slurm cluster.

scripts/slurm/cluster.sh starts slurmctld, slurmd and munged on loopback from Debian's
packages (scripts/test.sh does it before pytest; the fixture makes sure, idempotently), with
scripts/slurm/epilog.sh as the Epilog.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import docker
import pytest

from harness.paths import REPO_ROOT
from harness.study.matrix import slurm
from tests.conftest import write_script
from tests.helpers import HARNESS
from tests.integration.test_matrix import TINY, attempts, matrix_study, study_containers, wait_for

CLUSTER = REPO_ROOT / "scripts/slurm/cluster.sh"


@pytest.fixture(scope="module")
def slurm_env() -> dict[str, str]:
    started = subprocess.run([str(CLUSTER), "start"], capture_output=True, text=True,
                             timeout=900)
    assert started.returncode == 0, started.stdout + started.stderr
    conf = subprocess.run([str(CLUSTER), "conf"], capture_output=True, text=True,
                          check=True).stdout.strip()
    return {**os.environ, "SLURM_CONF": conf}


def test_sbatch_asks_for_the_sessions_resources_and_time() -> None:
    args = slurm.sbatch_args(job_name="harness-s-x", cpus=2.0, gpus=2, minutes=81,
                             output=Path("/tmp/x.log"), env={"HARNESS_QUEUED_AT": "1.5"},
                             extra=["--partition=gpu"])
    assert "--cpus-per-task=2" in args and "--gres=gpu:2" in args and "--time=81" in args
    assert "--export=ALL,HARNESS_QUEUED_AT=1.5" in args and args[-1] == "--partition=gpu"
    assert "--gres" not in " ".join(slurm.sbatch_args(
        job_name="j", cpus=1, gpus=0, minutes=1, output=Path("/x"), env={}, extra=[]))
    # One hour of session, the grader's 900 s and the 300 s margin: 80 minutes.
    assert slurm.time_limit_minutes(3600, 900) == 80
    assert "exec " in slurm.job_script(["--study", "s.yaml", "--session", "a b"])


def test_a_cancelled_job_leaves_no_container_is_interrupted_and_a_rerun_resumes_it(
    tmp_path: Path, client: docker.DockerClient, slurm_env: dict[str, str]
) -> None:
    write_script(tmp_path, [
        {"tool": "bash", "args": {"command": "echo '# touched' >> train.py && sleep 20"}},
        {"tool": "submit", "args": {"summary": "slow"}}])
    study, name = matrix_study(tmp_path, pairs=1, model=f"scripted:{tmp_path}/agent.yaml")
    control, treatment = f"{TINY}-pair1-control", f"{TINY}-pair1-treatment"
    run = subprocess.Popen([*HARNESS, "matrix", "run", "--study", str(study), "--executor",
                            "slurm"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=slurm_env)

    def box(session: str) -> docker.models.containers.Container | None:
        found = client.containers.list(filters={"label": [f"org.harness.study={name}",
                                                          f"org.harness.session={session}"]})
        return found[0] if found else None

    def sleeping(session: str) -> bool:
        container = box(session)
        try:
            return container is not None and any(
                "sleep 20" in row[-1] for row in container.top().get("Processes") or [])
        except docker.errors.APIError:
            return False

    try:
        wait_for(lambda: sleeping(control) and sleeping(treatment), 300,
                 "both sessions to run in their Slurm jobs", run)
        # An operator's scancel: Slurm sends SIGTERM; the worker records the session
        # interrupted and removes its container itself.
        cancelled = box(control)
        assert cancelled is not None
        job = cancelled.labels["org.harness.slurm-job"]
        subprocess.run(["scancel", job], check=True, env=slurm_env)
        # A worker killed outright (a job past its time after KillWait, an OOM kill): only
        # the Epilog can remove its container, by the job label.
        killed = box(treatment)
        assert killed is not None
        killed_job = killed.labels["org.harness.slurm-job"]
        os.kill(int(killed.labels["org.harness.owner-pid"]), signal.SIGKILL)
        wait_for(lambda: box(control) is None and box(treatment) is None, 60,
                 "the jobs' containers to go")
        out, _ = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, out
    assert "2 interrupted" in out
    first = attempts(tmp_path, name)
    for session, job_id in ((control, job), (treatment, killed_job)):
        [record] = first[session]
        assert record.status == "interrupted" and record.outcome == "interrupted"
        assert record.launch is not None and record.launch.executor == "slurm"
        assert record.launch.job_id == job_id and record.launch.job_started_at
        assert record.launch.queue_seconds is not None
    assert not study_containers(client, name)

    again = subprocess.run([*HARNESS, "matrix", "run", "--study", str(study), "--executor",
                            "slurm"], capture_output=True, text=True, timeout=900,
                           env=slurm_env)
    assert again.returncode == 0, again.stdout + again.stderr
    resumed_all = attempts(tmp_path, name)
    for session in (control, treatment):
        interrupted, resumed = resumed_all[session]
        assert interrupted.status == "interrupted" and resumed.status == "finished"
        assert resumed.launch is not None and resumed.launch.job_id not in (job, killed_job)
        assert resumed.grades and resumed.grades[-1].verdict != "grader_error"  # in the job
    assert not study_containers(client, name)
    status = subprocess.run([*HARNESS, "matrix", "status", "--study", str(study)],
                            capture_output=True, text=True, timeout=120, env=slurm_env)
    assert status.returncode == 0 and "2/2 finished" in status.stdout
    state = (tmp_path / "runs" / name / "matrix/rev-1.json").read_text()
    assert f'"job_id": "{job}"' in state
