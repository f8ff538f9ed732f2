"""Shared fixtures: the real Docker engine, the built images, and one real demo session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml

from harness.infra import images
from harness.infra.sandbox import MANAGED_LABEL, OWNER_PID_LABEL, RUNS_LABEL, Sandbox, SandboxLimits
from harness.paths import REPO_ROOT
from harness.records.study import RetryPolicy
from tests.fake_model_server import FakeModelServer

TEST_LABEL = "org.harness.test"
# tests/grader/ runs inside the grader image (tests/integration/test_grader_image.py), where
# grading runs.
collect_ignore = ["grader"]
UNIT_DIR = Path(__file__).parent / "unit"


# The integration layer runs in two pytest-xdist workers, a file at a time, handed out in
# collection order (scripts/test.sh, --no-loadscope-reorder). These files take minutes each
# (measured with --durations): started first, they do not leave one worker running alone at
# the end.
LONGEST_FIRST = ("test_grader_image.py", "test_traincheck_calibration.py", "test_snapshots.py",
                 "test_matrix.py", "test_oracle_strength.py", "test_validate.py",
                 "test_evidence.py", "test_report.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The layer is the folder: tests/unit needs no engine, everything else is integration,
    # so `-m "not integration"` and `pytest tests/unit` select the same tests.
    for item in items:
        if UNIT_DIR not in item.path.parents:
            item.add_marker(pytest.mark.integration)
    # A stable sort: the order inside each file, and of the other files, is kept.
    items.sort(key=lambda item: LONGEST_FIRST.index(item.path.name)
               if item.path.name in LONGEST_FIRST else len(LONGEST_FIRST))


@pytest.fixture(scope="session")
def client() -> Iterator[docker.DockerClient]:
    # No skip: the suite exists to exercise the real engine (scripts/test.sh starts it).
    # Only tests that ask for the engine connect to it: tests/unit runs with no daemon.
    engine = images.docker_client()
    yield engine
    # Only this test process's containers: another pytest run may be using its own right now.
    mine = [TEST_LABEL, f"{OWNER_PID_LABEL}={os.getpid()}"]
    for container in engine.containers.list(all=True, filters={"label": mine}):
        container.remove(force=True, v=True)


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
    from harness.study.session import SessionOptions, run_session

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


# Retries fast enough for a test, with the same shape as a study's policy.
FAST_RETRY = RetryPolicy(max_attempts=5, initial_wait_s=0.05, max_wait_s=2.0, jitter_s=0.01)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeModelServer]:
    """The local API server, with the SDKs' environment pointing at it."""
    with FakeModelServer() as srv:
        for kind in ("OPENAI", "ANTHROPIC"):
            monkeypatch.setenv(f"{kind}_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", f"{srv.url}/v1")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
        yield srv
