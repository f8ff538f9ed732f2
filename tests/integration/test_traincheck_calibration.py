"""The calibration track end to end on the fixture task, in real containers.

Gold validation (the real grader), the frozen reference build (traced runs, real
``traincheck-infer`` and ``traincheck-check``), the capability probe and track 1 calibration,
all on cpu-1 of ``tiny-regression``, with outputs under a temporary folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.records.tasks import ValidationReport
from harness.traincheck import capabilities as cap
from harness.traincheck.calibrate import calibrate, detections_by_contract, render_markdown
from harness.traincheck.reference import build_reference, load_frozen
from harness.traincheck.variants import task_files
from tests.conftest import FIXTURE_HIDDEN, FIXTURE_PACKET

FIXTURE, HIDDEN = FIXTURE_PACKET, FIXTURE_HIDDEN


# The whole track on real containers: a reference build (a learning run, 4 policy runs and 5
# resume probes) and a calibration (6 traced runs, 6 resume probes) is about 10 minutes on a
# loaded 2-core host, past the suite's default 600 s per test.
@pytest.mark.timeout(1800)
def test_calibration_track_on_the_fixture_task(
    tiny_validation: ValidationReport, tmp_path: Path
) -> None:
    files = task_files("tiny-regression", packet_dir=FIXTURE, hidden_dir=HIDDEN,
                       reports_root=tmp_path / "traincheck",
                       validation_dir=tmp_path / "validation")
    quiet = lambda _m: None  # noqa: E731

    # Calibration needs the grader's verdicts first, and says so.
    with pytest.raises(HarnessError, match="no gold validation summary"):
        calibrate(files, ["cpu-1"], command="test", log=quiet)
    validation = tiny_validation  # the real grader's, shared with test_validate.py
    files.validation_summary.parent.mkdir(parents=True)
    files.validation_summary.write_text(validation.model_dump_json())

    manifest = build_reference(files, ["cpu-1"], log=quiet)
    frozen = manifest.configs["cpu-1"]
    assert frozen.n_learned > 0 and frozen.n_kept == frozen.n_learned - frozen.n_dropped
    assert frozen.learn_run.outcome == "ok"
    # The policy decided on healthy baseline runs at two more seeds and on the reference at two.
    roles = sorted((p.role, p.run.variant, p.run.seed) for p in frozen.policy_runs)
    seed = frozen.learn_run.seed
    assert roles == [("healthy", "baseline", seed + 10), ("healthy", "baseline", seed + 20),
                     ("reference", "reference", seed), ("reference", "reference", seed + 10)]
    assert all(p.run.outcome == "ok" for p in frozen.policy_runs)
    # Then the policy again, collected as the agent's tool collects (selectively, for the
    # kept rules), in rounds until a round's runs violate nothing.
    assert frozen.collection == "selective"
    rounds = sorted({p.round for p in frozen.selective_policy_runs})
    assert rounds == list(range(1, rounds[-1] + 1))
    last = [p for p in frozen.selective_policy_runs if p.round == rounds[-1]]
    assert sorted((p.role, p.run.seed) for p in last) == sorted(
        (p.role, p.run.seed) for p in frozen.policy_runs)
    assert all(p.run.outcome == "ok" and not p.violated_ids for p in last)
    violated = {i for p in (*frozen.policy_runs, *frozen.selective_policy_runs)
                for i in p.violated_ids}
    assert frozen.n_dropped == len(violated)  # every violated rule is dropped, nothing else
    # The resume rules, learned from a healthy probe, with the same policy probes.
    resume = frozen.resume
    assert resume is not None and resume.learn_probe.outcome == "ok"
    assert sorted((p.role, p.probe.seed) for p in resume.policy_probes) == [
        ("healthy", seed + 10), ("healthy", seed + 20), ("reference", seed),
        ("reference", seed + 10)]
    assert len(resume.selective_policy_probes) == 4
    assert resume.n_kept == resume.n_learned - resume.n_dropped > 0
    _, files_ok = load_frozen(files, "cpu-1")  # hashes verified
    assert files_ok.invariants.count(b"\n") == frozen.n_kept
    assert files_ok.resume_rules is not None
    assert files_ok.resume_rules.count(b"\n") == resume.n_kept
    # Editing a frozen file is refused.
    control = files.reports / "reference" / "cpu-1.control.json"
    control.write_text(control.read_text().replace("cpu-1", "cpu-1 "))
    with pytest.raises(HarnessError, match="does not match its hash"):
        load_frozen(files, "cpu-1")
    control.write_text(control.read_text().replace("cpu-1 ", "cpu-1"))

    version, probes = cap.probe(files, ["cpu-1"], log=quiet)
    kinds = {k: v.status for k, v in probes["cpu-1"].kinds.items()}
    assert version == "0.2.0"
    assert kinds["api_events"] == "observed" and kinds["model_parameters"] == "observed"
    assert kinds["optimizer_state"] == "not" and kinds["tensor_representation"] == "partly"
    assert kinds["rank_identity"] == kinds["step_identity"] == "observed"

    report = calibrate(files, ["cpu-1"], command="test", log=quiet)
    all_rows = report.configs["cpu-1"].rows
    rows = {r.variant: r for r in all_rows if r.seed == report.seed}
    assert set(rows) == {"baseline", "reference", "fault:off-by-one-ramp",
                         "fault:scheduler-not-resumed"}
    # The healthy runs again at a second held-out seed, none of the policy's seeds.
    second = sorted((r.variant, r.seed) for r in all_rows if r.seed != report.seed)
    assert second == [("baseline", report.seed + 1), ("reference", report.seed + 1)]
    policy_seeds = {p.run.seed for p in frozen.policy_runs} | {frozen.learn_run.seed}
    assert not policy_seeds & {r.seed for r in all_rows}
    for name in ("fault:off-by-one-ramp", "fault:scheduler-not-resumed"):
        row = rows[name]
        assert row.oracle is not None and row.oracle.confirmed, name  # the real grader's verdict
        assert row.oracle.failing_contracts
        assert row.verdict in ("detected", "not_detected") and row.check_outcome == "ok"
    assert rows["baseline"].verdict in ("clean", "false_alarm")
    # Every row was also probed through a resume. The resume rules come from the baseline,
    # which has no scheduler, so they cannot speak about this task's two (scheduler) faults;
    # tests/integration/test_traincheck_resume.py shows a detection. Here: healthy code's
    # resumes break none of them.
    assert all(r.resume_outcome == "ok" and r.resume_s > 0 for r in all_rows)
    assert not [v for r in all_rows if r.kind != "fault" for v in r.beyond_control
                if v.relation == "ResumePreservation"]
    summary = report.summary
    assert summary.controls == 4 and summary.faults_confirmed == 2
    assert summary.false_alarms == sum(r.verdict == "false_alarm" for r in all_rows)
    assert report.configs["cpu-1"].cost_ratio > 1.0
    assert "faults detected by TrainCheck" in render_markdown(report)

    coverage = cap.contract_coverage(files, probes, detections_by_contract(report))
    statuses = {c.contract: c.status for c in coverage}
    assert set(statuses) == set(validation.contracts)
    resume = "hidden:test_warmup.py::test_resume_mid_warmup_equals_uninterrupted"
    if resume not in detections_by_contract(report):
        assert statuses[resume] == "missing_instrumentation"  # file contents are never traced


def test_a_rule_that_fires_on_healthy_code_is_not_a_detection() -> None:
    from harness.traincheck.calibrate import CalibrationRow, ConfigCalibration, judge
    from harness.traincheck.reference import RunSummary, Violation

    def violation(vid: str) -> Violation:
        return Violation(id=vid, relation="R", rule=f"rule {vid}", first_step=0, ranks=[0, 1])

    def row(name: str, kind: str, ids: list[str]) -> CalibrationRow:
        found = [violation(i) for i in ids]
        return CalibrationRow(
            variant=name, kind=kind, config="gloo-ddp-2", seed=1, oracle=None,
            run=RunSummary(variant=name, config="gloo-ddp-2", seed=1, traced=True,
                           outcome="ok", wall_s=1.0),
            check_outcome="ok", beyond_control=found, beyond_matching=found,
            verdict="detected" if kind == "fault" and ids else "clean", collect_s=1.0,
            cross_rank_only=[f"rule {i} [R]" for i in ids] if kind == "fault" else None)

    cal = judge(ConfigCalibration(config="gloo-ddp-2", plain_s=1.0, cost_ratio=2.0, rows=[
        row("baseline", "baseline", ["noise"]), row("reference", "reference", []),
        row("fault:a", "fault", ["noise"]), row("fault:b", "fault", ["noise", "real"])]))
    verdicts = {r.variant: (r.verdict, [v.id for v in r.beyond_matching], r.cross_rank_only)
                for r in cal.rows}
    assert verdicts["fault:a"] == ("not_detected", [], None)
    assert verdicts["fault:b"] == ("detected", ["real"], ["rule real [R]"])
