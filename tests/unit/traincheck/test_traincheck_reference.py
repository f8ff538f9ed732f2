"""The treatment arm's `traincheck` tool, for real: treatment container, TrainCheck, the frozen
moe-router reference (reports/traincheck/moe-router/reference/), the scripted agent."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.agent.traincheck_tool import TraincheckTool
from harness.errors import HarnessError
from harness.paths import REPO_ROOT
from harness.records.packets import load_packet
from harness.study.session import SessionOptions, run_session
from tests.conftest import write_script, write_study

TASK = "moe-router"
AGENT = REPO_ROOT / "tests/fixtures/agents/moe-router-traincheck.yaml"
# The files the scripted agent edits; nothing else may show up in its diff.
EDITED = {"tinylm/config.py", "tinylm/model.py", "tinylm/export.py", "tinylm/distributed.py",
          "train.py", "README.md"}


def test_a_task_without_a_usable_reference_fails_before_any_container(tmp_path: Path) -> None:
    # opsd-distill (qualified, not selected) declares no diagnostics runs: nothing to run.
    script = write_script(tmp_path, [{"tool": "submit", "args": {"summary": "s"}}])
    study = write_study(tmp_path, agent={"model": f"scripted:{script}"},
                        tasks=[{"id": "opsd-distill",
                                "packet": str(REPO_ROOT / "task_packets" / "opsd-distill"),
                                "hidden": str(REPO_ROOT / "hidden" / "opsd-distill")}],
                        arms={"control": {"image": "control"},
                              "treatment": {"image": "treatment",
                                            "extra_tools": ["traincheck"]}})
    with pytest.raises(HarnessError, match="declares no diagnostics runs"):
        run_session(SessionOptions(study_path=study, pair=1, arm="treatment", grade=False),
                    log=lambda _m: None)
    assert not (tmp_path / "runs").exists()

    # A reference frozen for another packet repo would report the drift as violations.
    packet = tmp_path / "packet"
    shutil.copytree(REPO_ROOT / "task_packets" / TASK, packet)
    (packet / "repo" / "train.py").write_text((packet / "repo" / "train.py").read_text() + "\n")
    with pytest.raises(HarnessError, match=r"other inputs: the packet's repo/ changed") as exc:
        TraincheckTool.for_task(TASK, load_packet(packet), REPO_ROOT / "hidden" / TASK)
    assert "harness traincheck reference --task moe-router" in exc.value.line()
