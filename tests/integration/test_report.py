"""`harness report` on a small study run for real (tests/integration/report_study.py: frozen,
run, graded, snapshots graded, one judgement; a session outside the frozen study, an
infrastructure retry, grades with a configuration not run, a diff altered after its grade and
a session not yet run): the three files, every number recomputed from the records, each state
shown as described, every plot visible in headless Chromium, and a price change that moves
only the money lines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from tests.helpers import harness
from tests.integration.report_study import TINY, ReportStudy, build
from tests.report_page import page_problems
from tests.report_recompute import compare, recompute

CONTROL1, TREATMENT1 = f"{TINY}-pair1-control", f"{TINY}-pair1-treatment"
CONTROL2, TREATMENT2 = f"{TINY}-pair2-control", f"{TINY}-pair2-treatment"


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory, client: docker.DockerClient) -> ReportStudy:
    return build(tmp_path_factory.mktemp("report"), client)


@pytest.fixture(scope="module")
def written(study: ReportStudy) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = study.tmp / "out"
    result = harness("report", "--study", str(study.study), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    return out, result


def report_json(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "report.json").read_text())


# The whole study: sessions, gradings and snapshot gradings in real containers.
@pytest.mark.timeout(3600)
def test_the_report_writes_three_files_whose_numbers_the_records_give_again(
    study: ReportStudy, written: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    out, result = written
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    data = report_json(out)
    compare(data, recompute(study.study))
    assert data["status_line"] == "partial: 2 of 4 sessions graded"
    assert "partial: 2 of 4 sessions graded" in result.stdout
    text = (out / "report.md").read_text()
    assert data["lock"]["sha256"] in text
    for session in data["sessions"]:
        if session["used"]:
            assert session["transcript_head"] in text
    again = study.tmp / "again"
    assert harness("report", "--study", str(study.study), "--out", str(again)).returncode == 0
    assert (again / "report.json").read_bytes() == (out / "report.json").read_bytes()


def test_each_state_of_the_study_is_shown_as_described(
    written: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    data = report_json(written[0])
    why = {(x["session_id"], x["attempt"]): x["why"] for x in data["left_out"]}
    assert why == {
        (CONTROL1, 1): "infrastructure failure (sandbox_lost); retried as attempt 2",
        (CONTROL2, 1): "does not verify: submission.diff changed since the manifest was written",
        (TREATMENT2, 1): "outside the frozen study (run before the freeze, with another model "
                         "or GPUs, or by hand outside it)"}
    sessions = {s["session_id"]: s for s in data["sessions"]}
    assert (sessions[CONTROL1]["used"], sessions[CONTROL1]["attempt"]) == (True, 2)
    assert sessions[CONTROL2]["state"] == "damaged" and not sessions[CONTROL2]["used"]
    assert sessions[TREATMENT2]["why_not_used"] == "not yet run"
    primary = {r["session_id"]: r for r in data["primary"]["rows"]}
    for sid in (CONTROL1, TREATMENT1):  # the packet copy declares cuda-ddp-2; no GPU here
        assert primary[sid]["label"] == "feature complete on CPU, not determined for CUDA"
        assert list(primary[sid]["not_determined_for"]) == ["cuda-ddp-2"]
    assert primary[TREATMENT2]["label"] == "not yet run"
    assert primary[CONTROL2]["label"].startswith("damaged: attempt 1 does not verify")

    trajectories = {t["session_id"]: t for t in data["trajectory"]["sessions"]}
    regressions = trajectories[TREATMENT1]["regressions"]
    assert regressions and all(r["repaired_before_submit"] for r in regressions), regressions
    assert all(r["contract"].startswith("hidden:") for r in regressions)
    assert trajectories[TREATMENT1]["residual_defects"] == []
    assert trajectories[TREATMENT1]["first_passing_snapshot"] is not None
    assert not trajectories[CONTROL1]["graded"]  # its snapshots were not graded
    [diagnostic] = data["diagnostics"]["sessions"]
    assert diagnostic["audit_label"] == "audited: 1 tool_not_used"
    assert not diagnostic["tool_offered"] and diagnostic["tool_calls"] == 0
    [track] = data["calibration"]["tasks"]
    assert track["comparison"] == "coverage-audit" and track["gate_rule"] == "coverage-audit"
    costs = {c["session_id"]: c for c in data["costs"]["sessions"]}
    assert costs[TREATMENT1]["tokens_input"] > 0 and costs[TREATMENT1]["money_total"]["amount"]
    assert data["paired"]["comparable_pairs"] == 0  # a coverage audit is no benefit evidence
    text = (written[0] / "report.md").read_text()
    for words in ("not yet run", "retried as attempt 2", "outside the frozen study",
                  "does not verify", "not determined for CUDA", "coverage audit"):
        assert words in text, words


def test_every_plot_is_visible_in_headless_chromium(
    written: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    shot = tmp_path / "page.png"
    assert page_problems(written[0] / "report.html", shot) == []
    assert shot.stat().st_size > 10_000


def test_a_price_change_moves_only_the_money_lines(
    study: ReportStudy, written: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    original = study.study.read_text()
    data = yaml.safe_load(original)
    data["prices"][0].update(per_million_tokens=6.0, source="test price list B")
    study.study.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        out = tmp_path / "priced"
        result = harness("report", "--study", str(study.study), "--out", str(out))
        assert result.returncode == 0, result.stderr
    finally:
        study.study.write_text(original)
    old = (written[0] / "report.md").read_text().splitlines()
    new = (out / "report.md").read_text().splitlines()
    assert len(old) == len(new)
    changed = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    assert changed
    for a, b in changed:  # the money tables' lines, nothing else
        assert "USD" in a or a.startswith("| 1 | +"), (a, b)
    before, after = report_json(written[0]), report_json(out)
    for key in ("sessions", "left_out", "primary", "contracts", "trajectory", "quality",
                "diagnostics", "calibration", "decision"):
        assert before[key] == after[key], key
    for a, b in zip(before["costs"]["sessions"], after["costs"]["sessions"], strict=True):
        assert {k: v for k, v in a.items() if not k.startswith("money")} == \
            {k: v for k, v in b.items() if not k.startswith("money")}
        assert b["money_input"]["amount"] == round(b["tokens_input"] * 6.0 / 1e6, 6)
        assert b["money_output"] == a["money_output"]
