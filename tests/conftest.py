"""Shared fixtures: the real Docker engine, the built images, and one real demo session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml

from harness import images
from harness.images import REPO_ROOT
from harness.sandbox import MANAGED_LABEL, OWNER_PID_LABEL, RUNS_LABEL, Sandbox, SandboxLimits

TEST_LABEL = "org.harness.test"
# tests/grader/ runs inside the grader image (tests/test_grader_image.py), where grading runs.
collect_ignore = ["grader"]


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    # No skip: the suite exists to exercise the real engine (scripts/test.sh starts it).
    return images.docker_client()


@pytest.fixture(scope="session")
def control_image(client: docker.DockerClient) -> str:
    return images.image_id(client, "control")


@pytest.fixture
def sandbox(client: docker.DockerClient, control_image: str) -> Iterator[Sandbox]:
    box = Sandbox(client, control_image, labels={TEST_LABEL: "1"}, name_hint="test",
                  limits=SandboxLimits(pids=128, memory_bytes=2 * 1024**3))
    with box:
        yield box


def write_study(tmp: Path, **overrides: object) -> Path:
    """A copy of the fixture study that writes its runs under ``tmp``."""
    study = yaml.safe_load((REPO_ROOT / "tests/fixtures/studies/fixture.yaml").read_text())
    study["runs_dir"] = str(tmp / "runs")
    for task in study["tasks"]:
        task["packet"] = str(REPO_ROOT / task["packet"])
        task["hidden"] = str(REPO_ROOT / task["hidden"])
    study["agent"]["model"] = "scripted:" + str(REPO_ROOT / study["agent"]["model"][9:])
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(study.get(key), dict):
            study[key].update(value)
        else:
            study[key] = value
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def write_script(tmp: Path, steps: list[dict[str, object]], name: str = "agent.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump({"steps": steps}))
    return path


@pytest.fixture(scope="session")
def demo_attempt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo study's first session, run once for real (container, agent, diff, grade)."""
    from harness.session import SessionOptions, run_session

    tmp = tmp_path_factory.mktemp("demo")
    return run_session(SessionOptions(study_path=write_study(tmp), pair=1, arm="control"),
                       log=lambda _m: None)


def session_containers(client: docker.DockerClient, session_id: str,
                       runs_root: Path) -> list[object]:
    """This test's containers of a session: another run of the same study may share the host."""
    return client.containers.list(
        all=True, filters={"label": [MANAGED_LABEL, f"org.harness.session={session_id}",
                                     f"{RUNS_LABEL}={runs_root}"]}
    )


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_test_containers(client: docker.DockerClient) -> Iterator[None]:
    yield
    # Only this test process's containers: another pytest run may be using its own right now.
    mine = [TEST_LABEL, f"{OWNER_PID_LABEL}={os.getpid()}"]
    for container in client.containers.list(all=True, filters={"label": mine}):
        container.remove(force=True, v=True)
