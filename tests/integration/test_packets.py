"""Real task packets: valid, canary-free, and their public tests pass in the control image.

Each packet's public suite runs where an agent runs it: inside a fresh control container,
network none, as uid 1000, on the baseline and on the baseline plus the hidden reference
patch (applied on the host; the patch itself never enters the container).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import docker
import pytest

from harness.infra.sandbox import WORKSPACE, Sandbox, SandboxLimits
from harness.infra.workspace import apply_patch, snapshot_baseline, workspace_archive
from harness.paths import REPO_ROOT
from harness.records.packets import load_packet
from tests.conftest import TEST_LABEL
from tests.helpers import load_script

TASKS = sorted(p.parent.name for p in (REPO_ROOT / "task_packets").glob("*/packet.yaml"))


def run_public_tests(client: docker.DockerClient, image: str, tree: Path,
                     command: list[str] | str, artifact: Path) -> tuple[int | None, str]:
    with Sandbox(client, image, labels={TEST_LABEL: "1"}, name_hint="packet-tests",
                 limits=SandboxLimits(pids=1024)) as box:
        box.put_archive(WORKSPACE, workspace_archive(tree))
        result = box.exec(command, timeout_s=600, artifact=artifact)
    return result.exit_code, result.output


@pytest.mark.parametrize("variant", ["baseline", "reference"])
@pytest.mark.parametrize("task", TASKS)
def test_public_tests_pass_in_the_control_image(
    task: str, variant: str, client: docker.DockerClient, control_image: str, tmp_path: Path
) -> None:
    packet = load_packet(REPO_ROOT / "task_packets" / task)
    tree = tmp_path / "baseline"
    snapshot_baseline(packet.repo, tree)
    if variant == "reference":
        patch = (REPO_ROOT / "hidden" / task / "reference" / "solution.patch").read_bytes()
        apply_patch(tree, patch, tmp_path / "reference")
        tree = tmp_path / "reference"
    code, output = run_public_tests(client, control_image, tree,
                                    packet.spec.public_test_command, tmp_path / "tests.log")
    assert code == 0, output[-4000:]
    assert " passed" in output and " failed" not in output


def _teardown_loop() -> ModuleType:
    return load_script("scripts/qualify/teardown_loop.py")


DIAGNOSED_TASKS = [t for t in TASKS
                   if load_packet(REPO_ROOT / "task_packets" / t).spec.diagnostics is not None]


@pytest.mark.parametrize("task", DIAGNOSED_TASKS)
def test_two_rank_runs_end_their_gloo_threads_before_exit(
    task: str, client: docker.DockerClient, control_image: str, tmp_path: Path
) -> None:
    """No gloo thread is alive when a rank's interpreter starts shutting down (the abort's
    precondition), on gloo-ddp-2 and gloo-fsdp-2 with checkpoints and export: the teardown
    loop's census (scripts/qualify/teardown_loop.py), two runs instead of hundreds."""
    loop = _teardown_loop()
    tree = loop.build_tree(REPO_ROOT, task, "reference", tmp_path)
    result = loop.run_loop(client, control_image, tree, runs=2, parallel=1, hogs=0,
                           args=loop.train_args(REPO_ROOT / "task_packets" / task, "reference"),
                           labels={TEST_LABEL: "1"})
    assert [r.config for r in result.runs] == ["gloo-ddp-2", "gloo-fsdp-2"]
    for run in result.runs:
        assert run.exit_code == 0 and not run.aborted, result.failure_tails
        assert run.gloo_threads_at_exit == 0, f"{run.config}: gloo threads alive at exit"


REDUCER_HOLDS_GROUP = REPO_ROOT / "scripts" / "qualify" / "teardown" / "reducer_holds_group.py"


@pytest.mark.parametrize("task", DIAGNOSED_TASKS)
def test_teardown_survives_a_collective_in_flight_while_ddp_holds_the_group(
    task: str, client: docker.DockerClient, control_image: str, tmp_path: Path
) -> None:
    """The teardown hang, staged: DDP's module is cyclic garbage holding the group and a
    collective is still in flight on one rank when its teardown starts
    (scripts/qualify/teardown/reducer_holds_group.py). A teardown that destroys the group
    before collecting the module hangs that rank every run, in its collection; the packet's
    must end both ranks. A hang is the script's watchdog: every stack, exit 1."""
    tree = tmp_path / "baseline"
    snapshot_baseline(REPO_ROOT / "task_packets" / task / "repo", tree)
    (tree / "reducer_holds_group.py").write_bytes(REDUCER_HOLDS_GROUP.read_bytes())
    command = ["torchrun", "--nnodes", "1", "--nproc-per-node", "2", "--master-addr",
               "127.0.0.1", "--master-port", "29531", "reducer_holds_group.py"]
    code, output = run_public_tests(client, control_image, tree, command, tmp_path / "run.log")
    assert code == 0, output[-6000:]
    assert "rank0 done" in output and "rank1 done" in output, output[-6000:]
