"""The study layer: the pilot files, the lock, drift, the diagnostic gate, the default study."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import docker

from harness.paths import REPO_ROOT
from harness.records.attempt import read_record
from harness.study.freeze import read_lock
from harness.study.session import SessionOptions, run_session
from tests.conftest import session_containers, write_study
from tests.helpers import HARNESS, harness, one_error_line

TINY = "tiny-regression"


def task_copy(tmp: Path, task: str, *, packet: Path | None = None, reports: bool = False,
              **extra: object) -> dict[str, object]:
    """A study task whose packet, hidden tree (and TrainCheck reports) are copies under tmp,
    so a test can change a byte without touching the repository's."""
    packet = packet or REPO_ROOT / "task_packets" / task
    shutil.copytree(packet, tmp / "packets" / task, symlinks=True)
    shutil.copytree(REPO_ROOT / "hidden" / task, tmp / "hidden" / task, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    entry: dict[str, object] = {"id": task, "packet": str(tmp / "packets" / task),
                                "hidden": str(tmp / "hidden" / task), **extra}
    if reports:
        shutil.copytree(REPO_ROOT / "reports/traincheck" / task, tmp / "reports" / task)
        entry["reports"] = str(tmp / "reports")
    return entry


# --- the study files -------------------------------------------------------------------------


# --- the default study -----------------------------------------------------------------------


def test_the_default_study_is_the_pilot_and_needs_an_api_key(
    tmp_path: Path, client: docker.DockerClient
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")
           and k != "HARNESS_STUDY"}
    session = REPO_ROOT / "runs/pilot/moe-router-pair3-control"
    attempts = set(session.glob("attempt-*"))
    result = subprocess.run([*HARNESS, "session", "--pair", "3", "--arm", "control"],
                            capture_output=True, text=True, timeout=120, env=env)
    one_error_line(result, "ANTHROPIC_API_KEY is not set", "anthropic:")
    assert session_containers(client, "moe-router-pair3-control", session.parent) == []
    assert set(session.glob("attempt-*")) == attempts  # nothing recorded
    help_text = harness("session", "--help", env={"COLUMNS": "200"}).stdout
    assert "HARNESS_STUDY" in help_text and "studies/pilot.yaml" in help_text
    # HARNESS_STUDY overrides it: this study has one pair, so pair 3 is refused by name.
    study = write_study(tmp_path)
    result = subprocess.run([*HARNESS, "session", "--pair", "3", "--arm", "control"],
                            capture_output=True, text=True, timeout=120,
                            env={**env, "HARNESS_STUDY": str(study)})
    one_error_line(result, "study fixture has pairs 1-1, not 3")


# --- the diagnostic gate ---------------------------------------------------------------------


def test_the_gate_refuses_a_comparison_without_demonstrated_detection(tmp_path: Path) -> None:
    # hybrid-arch's committed calibration detected none of its faults: a current calibration
    # without a detection, which the gate must refuse. The copy is bound to the copied
    # reference's manifest here, so the refusal is for the missing detection even while the
    # repository's calibration waits on a rebuilt reference (then it would be refused as stale).
    hybrid = task_copy(tmp_path, "hybrid-arch", reports=True)
    calibration = tmp_path / "reports/hybrid-arch/calibration.json"
    data = json.loads(calibration.read_text())
    data["reference_manifest_sha256"] = hashlib.sha256(
        (tmp_path / "reports/hybrid-arch/reference/manifest.json").read_bytes()).hexdigest()
    calibration.write_text(json.dumps(data))
    study = write_study(tmp_path, name="gate", tasks=[hybrid],
                        arms={"control": {"image": "control"},
                              "treatment": {"image": "treatment", "extra_tools": ["traincheck"]}})
    result = harness("freeze", "--study", str(study))
    one_error_line(result, "diagnostic gate", "hybrid-arch", "none of its 6 oracle-confirmed",
                   "comparison: coverage-audit")
    assert not (tmp_path / "runs/gate/locks").exists()

    write_study(tmp_path, name="gate", tasks=[{**hybrid, "comparison": "coverage-audit"},
                                              {"id": "moe-router"}],
                arms={"control": {"image": "control"},
                      "treatment": {"image": "treatment", "extra_tools": ["traincheck"]}})
    result = harness("freeze", "--study", str(study))
    assert result.returncode == 0, result.stderr
    lock = read_lock(tmp_path / "runs/gate/locks/rev-1.json").lock
    rules = {g.task: g for g in lock.gate}
    assert rules["hybrid-arch"].rule == "coverage-audit"
    assert "not evidence of benefit" in rules["hybrid-arch"].detail
    assert rules["moe-router"].rule == "detection-demonstrated"
    assert rules["moe-router"].detected == ["expert-grads-unsynced (gloo-ddp-2)",
                                            "rng-shared-key (gloo-ddp-2, gloo-fsdp-2)"]
    assert {s.comparison for s in lock.sessions if s.task == "hybrid-arch"} == {"coverage-audit"}


def test_the_gate_refuses_a_calibration_made_against_another_reference(tmp_path: Path) -> None:
    task = task_copy(tmp_path, "moe-router", reports=True)
    calibration = tmp_path / "reports/moe-router/calibration.json"
    data = json.loads(calibration.read_text())
    data["reference_manifest_sha256"] = "0" * 64
    calibration.write_text(json.dumps(data))
    study = write_study(tmp_path, name="stale", tasks=[task])
    one_error_line(harness("freeze", "--study", str(study)), "moe-router",
                   "calibrated against another frozen reference", "harness calibrate")


# --- the lock and drift ----------------------------------------------------------------------


def test_one_changed_byte_anywhere_is_drift_that_every_study_command_refuses(
    tmp_path: Path,
) -> None:
    task = task_copy(tmp_path, "moe-router", reports=True)
    study = write_study(tmp_path, name="drift", tasks=[task],
                        arms={"control": {"image": "control"},
                              "treatment": {"image": "treatment", "extra_tools": ["traincheck"]}},
                        agent={"model": "scripted:" + str(
                            REPO_ROOT / "tests/fixtures/agents/moe-router-solve.yaml")})
    result = harness("freeze", "--study", str(study))
    assert result.returncode == 0, result.stderr
    assert "detection-demonstrated" in result.stdout
    assert harness("freeze", "--study", str(study), "--verify").returncode == 0
    lock = read_lock(tmp_path / "runs/drift/locks/rev-1.json").lock
    names = [item.name for item in lock.items]
    for wanted in ("study file", "packet moe-router", "hidden moe-router checks",
                   "hidden moe-router faults", "hidden moe-router reference",
                   "traincheck reference moe-router", "traincheck policy moe-router",
                   "calibration moe-router", "grading code", "diagnostics code", "image grader",
                   "image treatment inputs", "arm treatment tools and prompt", "model settings",
                   "budgets and caps", "seeds", "assignment"):
        assert wanted in names, wanted
    assert len(lock.sessions) == 2 and {s.order for s in lock.sessions} == {1, 2}

    def flip(path: Path) -> bytes:
        original = path.read_bytes()
        path.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        return original

    check = next((tmp_path / "hidden/moe-router/checks").glob("test_*.py"))
    packet_file = tmp_path / "packets/moe-router/repo/train.py"
    reference = next((tmp_path / "reports/moe-router/reference").glob("*.control.json"))
    originals = {path: flip(path) for path in (check, packet_file, reference)}

    result = harness("freeze", "--study", str(study), "--verify", env={"COLUMNS": "250"})
    assert result.returncode == 1
    for item in ("hidden moe-router checks", "packet moe-router",
                 "traincheck reference moe-router"):
        assert item in result.stdout, result.stdout
    first = "packet moe-router"  # the lock's order: the packet comes before the hidden tree
    for command in (["matrix", "run"], ["matrix", "plan"],
                    ["session", "--pair", "1", "--arm", "control"]):
        one_error_line(harness(*command, "--study", str(study)), "drifted from its lock",
                       first, "harness freeze")
    status = harness("matrix", "status", "--study", str(study))
    assert status.returncode == 2 and first in status.stderr  # the table, then the refusal
    assert not list((tmp_path / "runs/drift").glob("*/attempt-*"))  # nothing ran

    for path, original in originals.items():
        path.write_bytes(original)
    assert harness("freeze", "--study", str(study), "--verify").returncode == 0
    # A changed study is a new revision; the old lock stays.
    flip(check)
    assert harness("freeze", "--study", str(study)).returncode == 0
    assert sorted(p.name for p in (tmp_path / "runs/drift/locks").iterdir()) == [
        "rev-1.json", "rev-2.json"]
    assert harness("freeze", "--study", str(study), "--verify").returncode == 0


def test_a_frozen_session_records_its_lock_and_grading_it_refuses_drift(
    tmp_path: Path, client: docker.DockerClient
) -> None:
    task = task_copy(tmp_path, TINY, packet=REPO_ROOT / "tests/fixtures/task_packets" / TINY,
                     comparison="coverage-audit")
    study = write_study(tmp_path, name="frozen", tasks=[task])
    # Never frozen: the session runs, recorded as outside the frozen study.
    outside = run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                          log=lambda _m: None)
    assert read_record(outside).in_frozen_study is False
    assert harness("freeze", "--study", str(study)).returncode == 0
    frozen = read_lock(tmp_path / "runs/frozen/locks/rev-1.json")
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                          log=lambda _m: None)
    record = read_record(attempt)
    assert record.in_frozen_study and record.lock_sha256 == frozen.sha256
    assert record.study_revision == 1 and record.launch is None
    check = next((tmp_path / "hidden" / TINY / "checks").glob("test_*.py"))
    original = check.read_bytes()
    check.write_bytes(original + b"\n# one more byte\n")
    result = harness("grade", str(attempt))
    one_error_line(result, f"hidden {TINY} checks", "changed since revision 1")
    assert not (attempt / "grades").exists()
    result = harness("session", "--study", str(study), "--pair", "1", "--arm", "treatment")
    one_error_line(result, f"hidden {TINY} checks")
    assert not (tmp_path / f"runs/frozen/{TINY}-pair1-treatment").exists()
    assert session_containers(client, f"{TINY}-pair1-treatment", tmp_path / "runs/frozen") == []
    check.write_bytes(original)
