"""The oracle's regressions as held-out variants: built like faults, judged like faults,
reported apart from the calibration."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.traincheck.calibrate import (
    CalibrationReport,
    CalibrationRow,
    ConfigCalibration,
    judge,
    render_markdown,
    summarise,
)
from harness.traincheck.reference import RunSummary, Violation
from harness.traincheck.variants import build_variants, task_files
from tests.conftest import FIXTURE_HIDDEN, FIXTURE_PACKET


def test_regressions_are_built_on_the_reference_and_faults_left_out(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    shutil.copytree(FIXTURE_HIDDEN, hidden)
    # The fixture has no regressions folder: one of its faults stands in as a regression.
    shutil.copytree(hidden / "faults" / "off-by-one-ramp",
                    hidden / "regressions" / "off-by-one-ramp")
    files = task_files("tiny-regression", packet_dir=FIXTURE_PACKET, hidden_dir=hidden)

    only = build_variants(files, tmp_path / "regressions", faults=False, regressions=True)
    assert [(v.name, v.kind) for v in only] == [
        ("baseline", "baseline"), ("reference", "reference"),
        ("regression:off-by-one-ramp", "regression")]
    regression, reference = only[2], only[1]
    assert regression.feature and regression.fault is not None
    patched = [p.relative_to(regression.tree) for p in regression.tree.rglob("*.py")
               if p.read_bytes() != (reference.tree / p.relative_to(regression.tree))
               .read_bytes()]
    assert patched, "the regression's patch changed nothing in the reference"

    both = build_variants(files, tmp_path / "both", faults=True, regressions=True)
    assert [v.kind for v in both].count("fault") == 2
    assert [v.name for v in both][-1] == "regression:off-by-one-ramp"


def _row(name: str, kind: str, ids: list[str]) -> CalibrationRow:
    found = [Violation(id=i, relation="R", rule=f"rule {i}", first_step=0, ranks=[0])
             for i in ids]
    return CalibrationRow(
        variant=name, kind=kind, config="cpu-1", seed=3, oracle=None,
        run=RunSummary(variant=name, config="cpu-1", seed=3, traced=True, outcome="ok",
                       wall_s=1.0),
        check_outcome="ok", beyond_control=found, beyond_matching=found,
        verdict="clean", collect_s=1.0)


def test_a_regression_is_judged_as_a_fault_and_reported_as_a_regression() -> None:
    cal = judge(ConfigCalibration(config="cpu-1", plain_s=1.0, cost_ratio=3.0, rows=[
        _row("baseline", "baseline", ["noise"]), _row("reference", "reference", []),
        _row("regression:a", "regression", ["noise"]),
        _row("regression:b", "regression", ["noise", "real"])]))
    verdicts = {r.variant: (r.verdict, [v.id for v in r.beyond_matching]) for r in cal.rows}
    # A rule the healthy baseline breaks at the same seed is no detection.
    assert verdicts["regression:a"] == ("not_detected", [])
    assert verdicts["regression:b"] == ("detected", ["real"])
    summary = summarise({"cpu-1": cal}, [])
    assert summary.detected == {"regression:b": ["cpu-1"]} and summary.controls == 2
    report = CalibrationReport(task="t", command="harness calibrate --regressions", seed=3,
                               reference_manifest_sha256="0" * 64, configs={"cpu-1": cal},
                               summary=summary, variants="regressions")
    text = render_markdown(report)
    assert "held-out oracle regressions" in text
    assert "regressions detected by TrainCheck / oracle-confirmed regressions" in text
    assert "faults detected" not in text
