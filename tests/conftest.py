"""Shared fixtures: the real Docker engine, the built images, and one real demo session."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest
import yaml

from harness.infra import images
from harness.infra.sandbox import MANAGED_LABEL, OWNER_PID_LABEL, RUNS_LABEL, Sandbox, SandboxLimits
from harness.paths import REPO_ROOT
from harness.records.study import RetryPolicy
from harness.records.tasks import ValidationReport
from tests.fake_model_server import FakeModelServer

TEST_LABEL = "org.harness.test"
FIXTURE_PACKET = REPO_ROOT / "tests/fixtures/task_packets/tiny-regression"
FIXTURE_HIDDEN = REPO_ROOT / "hidden/tiny-regression"
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


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str,
               build: Callable[[Path], None]) -> Path:
    """A folder ``build`` fills once per test run, shared by the xdist workers: the first to
    ask builds it under a lock while the others wait, then all read it. For results several
    files need and none changes (e.g. one gold validation of the fixture task): built twice,
    they only repeated the same real work on the same 2 cores."""
    # The workers' base folders share a parent per run (pytest-xdist's documented pattern);
    # without workers that parent holds every run of this user, so the run's own folder.
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / f"shared-{name}"
    done = root / "BUILT"
    root.mkdir(exist_ok=True)
    with open(root.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            folder = root / "data"
            if folder.exists():  # a build that failed in another worker: start again
                shutil.rmtree(folder)
            folder.mkdir()
            build(folder)
            done.touch()
    return root / "data"


@pytest.fixture(scope="session")
def tiny_validation(tmp_path_factory: pytest.TempPathFactory) -> ValidationReport:
    """The fixture task's gold validation (reference, baseline and both faults graded for
    real), run once for the files that read it; its grade folders are under ``runs/``."""
    from harness.oracle.validate import validate_task

    def validate(folder: Path) -> None:
        report = validate_task("tiny-regression", FIXTURE_PACKET, FIXTURE_HIDDEN,
                               folder / "runs", log=lambda _m: None)
        (folder / "validation.json").write_text(report.model_dump_json())

    folder = built_once(tmp_path_factory, "tiny-validation", validate)
    return ValidationReport.model_validate_json((folder / "validation.json").read_text())


@pytest.fixture(scope="session")
def demo_attempt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo study's first session, run once for real (container, agent, diff, grade) and
    shared by the workers: read it, or change a copy of it."""
    from harness.study.session import SessionOptions, run_session

    def run(folder: Path) -> None:
        attempt = run_session(SessionOptions(study_path=write_study(folder), pair=1,
                                             arm="control"), log=lambda _m: None)
        (folder / "attempt.txt").write_text(str(attempt))

    folder = built_once(tmp_path_factory, "demo", run)
    return Path((folder / "attempt.txt").read_text())


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
