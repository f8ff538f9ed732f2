"""`harness report` on a study whose records are written by hand (no Docker): every section's
numbers recomputed independently, each attempt left out with its reason, the partial label,
money from the price table only, refusals that write nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.audit.evidence import build_chains
from harness.errors import HarnessError
from harness.report.build import write_report
from harness.report.model import EARLY_EVIDENCE, NO_PRICE, NOT_AUDITED
from tests.helpers import one_error_line, run_cli
from tests.report_recompute import compare, recompute
from tests.report_records import (
    MODEL,
    AttemptSpec,
    Step,
    judge,
    write_attempt,
    write_lock,
    write_study_file,
    write_track1,
)

HIDDEN = ["public-tests", "hidden:test_a", "hidden:test_b", "hidden:test_c"]


def passing(*failing: str, outcome: str = "fail") -> dict[str, str]:
    return {c: (outcome if c in failing else "pass") for c in HIDDEN}


class Built:
    def __init__(self, tmp: Path, *, prices: list[dict[str, Any]] | None = None,
                 model: str = MODEL) -> None:
        self.tmp = tmp
        self.study = write_study_file(tmp, prices=prices, model=model)
        write_track1(tmp)
        self.frozen = write_lock(self.study)
        self.runs = tmp / "runs" / "unit"
        self.by_id = {s.session_id: s for s in self.frozen.lock.sessions}

    def session(self, pair: int, arm: str) -> Any:
        return self.by_id[f"tiny-regression-pair{pair}-{arm}"]

    def attempt(self, spec: AttemptSpec) -> Path:
        return write_attempt(self.runs, self.frozen, spec)


def full_study(tmp: Path) -> Built:
    """Pair 1 complete: the control passes; the treatment's diagnostic reports violations on
    code failing test_b, it repairs test_b and regresses test_c (a silent regression at
    submit) and crashes test_a; an auditor judged the report's chain helped.
    Pair 2: the control's first attempt lost its sandbox, its retry passes on CPU with CUDA
    not run; the treatment was never run. Outside the study: one attempt."""
    built = Built(tmp)
    built.attempt(AttemptSpec(
        session=built.session(1, "control"),
        steps=[Step("run_public_tests", passing("hidden:test_b")), Step("submit", passing())],
        final=passing(), properties={"hidden:test_c": {
            "heldout_loss": "0.61", "train_s": "9.5", "reference_heldout_loss": "0.6",
            # A check's own run and its run of the pristine baseline, as hybrid-arch records
            # them: only the first is the submission's.
            "run:candidate-cpu1:wall_s": 4.5, "run:baseline-cpu1:wall_s": 4.0}}))
    treated = built.attempt(AttemptSpec(
        session=built.session(1, "treatment"),
        steps=[Step("run_public_tests", passing("hidden:test_b")),
               Step("traincheck", passing("hidden:test_b"), violations=2),
               Step("run_candidate", passing("hidden:test_c"), failed_run=True),
               Step("submit", {**passing("hidden:test_c"), "hidden:test_a": "crash"})],
        final={**passing("hidden:test_c"), "hidden:test_a": "crash"}, tokens=(3000, 600)))
    built.attempt(AttemptSpec(session=built.session(2, "control"), outcome="sandbox_lost",
                              final=None, steps=[Step("run_public_tests")]))
    built.attempt(AttemptSpec(session=built.session(2, "control"), attempt=2,
                              steps=[Step("submit", passing())], final=passing(),
                              not_run={"cuda-ddp-2": "no GPU on this host"}))
    built.attempt(AttemptSpec(session=built.session(2, "treatment"), in_frozen_study=False,
                              steps=[Step("submit")], final=None))
    chain = next(c for c in build_chains(treated / "transcript.jsonl", _typed(treated),
                                         "treatment", None)
                 if c.observation.source == "diagnostic")
    judge(treated, chain.id, "helped")
    return built


def _typed(folder: Path) -> list[Any]:
    from harness.records import events
    from harness.records.transcript import read_events

    return [events.parse(e) for e in read_events(folder / "transcript.jsonl")]


def report_json(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "report.json").read_text())


def test_every_section_is_recomputed_independently_from_the_records(tmp_path: Path) -> None:
    built = full_study(tmp_path)
    report, folder = write_report(built.study, tmp_path / "out")
    data = report_json(folder)
    compare(data, recompute(built.study))
    assert report.status_line == "partial: 3 of 4 sessions graded"

    why = {(x["session_id"], x["attempt"]): x["why"] for x in data["left_out"]}
    assert why[("tiny-regression-pair2-control", 1)] == (
        "infrastructure failure (sandbox_lost); retried as attempt 2")
    assert why[("tiny-regression-pair2-treatment", 1)].startswith("outside the frozen study")
    rows = {r["session_id"]: r for r in data["primary"]["rows"]}
    assert rows["tiny-regression-pair2-treatment"]["label"] == "not yet run"
    assert rows["tiny-regression-pair2-control"]["label"] == (
        "feature complete on CPU, not determined for CUDA")
    assert rows["tiny-regression-pair2-control"]["not_determined_for"] == {
        "cuda-ddp-2": "no GPU on this host"}
    assert rows["tiny-regression-pair1-treatment"]["label"] == "not feature complete"

    totals = data["contracts"]["totals"]
    assert totals["treatment"]["silent_regression"] == 1 and totals["treatment"]["crash"] == 1
    [treatment] = [t for t in data["trajectory"]["sessions"]
                   if t["session_id"] == "tiny-regression-pair1-treatment"]
    assert [(r["contract"], r["passed_at"], r["failed_at"], r["repaired_before_submit"])
            for r in treatment["regressions"]] == [("hidden:test_c", 2, 3, False),
                                                   ("hidden:test_a", 3, 4, False)]
    assert treatment["first_passing_snapshot"] is None
    assert [p["diagnostic"] for p in treatment["snapshots"]] == [False, True, False, False]
    assert [(f["figure"], f["kind"]) for f in data["quality"]["figures"]] == [
        ("heldout_loss", "held-out loss"), ("run:candidate-cpu1:wall_s", "time"),
        ("train_s", "time")]

    [diagnostic] = data["diagnostics"]["sessions"]
    assert (diagnostic["reports_with_violations"], diagnostic["audited"],
            diagnostic["unresolved_alarms"]) == (1, True, 1)
    cost = {c["session_id"]: c for c in data["costs"]["sessions"]}
    treated = cost["tiny-regression-pair1-treatment"]
    assert (treated["diagnostics_tracing_s"], treated["diagnostics_checking_s"],
            treated["failed_runs_s"], treated["grading_s"]) == (20.0, 7.0, 2.0, 12.5 + 4 * 3.0)
    assert data["costs"]["cap_cpu_hours"] == 3.0
    [track] = data["calibration"]["tasks"]
    assert (track["false_alarms"], track["controls"], track["coverage_denominator"],
            track["unsupported_contracts"]) == (1, 2, 3, ["hidden:b", "hidden:c"])
    assert data["paired"]["label"] == EARLY_EVIDENCE
    met = {c["name"]: c["met"] for c in data["decision"]["conditions"]}
    assert met == {"actionable diagnostic evidence observed": True,
                   "credible mechanism shown by an audited chain": True}
    assert data["decision"]["scale_up"] is True

    text = (folder / "report.md").read_text()
    assert "partial: 3 of 4 sessions graded" in text and EARLY_EVIDENCE in text
    for head in (s["transcript_head"] for s in data["sessions"] if s["used"]):
        assert head in text
    assert data["lock"]["sha256"] in text


def test_a_flaky_contract_is_neither_a_pass_nor_a_silent_regression(tmp_path: Path) -> None:
    # Grading reruns a crash or hang; a pass on the rerun is flaky (grade schema 4).
    built = Built(tmp_path)
    built.attempt(AttemptSpec(
        session=built.session(1, "control"),
        steps=[Step("run_public_tests", passing()),
               Step("submit", passing("hidden:test_a", outcome="flaky"))],
        final=passing("hidden:test_a", outcome="flaky")))
    _report, folder = write_report(built.study, tmp_path / "out")
    data = report_json(folder)
    compare(data, recompute(built.study))
    totals = data["contracts"]["totals"]["control"]
    assert (totals["flaky"], totals["pass"], totals["silent_regression"], totals["crash"]) \
        == (1, 3, 0, 0)
    assert data["contracts"]["grid"]["tiny-regression-pair1-control"]["hidden:test_a"] == "flaky"
    rows = {r["session_id"]: r for r in data["primary"]["rows"]}
    assert rows["tiny-regression-pair1-control"]["complete"] is False
    [trajectory] = [t for t in data["trajectory"]["sessions"]
                    if t["session_id"] == "tiny-regression-pair1-control"]
    assert trajectory["residual_defects"] == ["hidden:test_a"]
    assert [(r["contract"], r["passed_at"], r["failed_at"]) for r in trajectory["regressions"]] \
        == [("hidden:test_a", 1, 2)]


def test_an_altered_diff_leaves_the_session_out_and_says_why(tmp_path: Path) -> None:
    built = full_study(tmp_path)
    diff = built.runs / "tiny-regression-pair1-control/attempt-1/submission.diff"
    diff.write_bytes(diff.read_bytes() + b"# changed after grading\n")
    _report, folder = write_report(built.study, tmp_path / "out")
    data = report_json(folder)
    compare(data, recompute(built.study))
    why = {(x["session_id"], x["attempt"]): x["why"] for x in data["left_out"]}
    assert why[("tiny-regression-pair1-control", 1)] == (
        "does not verify: submission.diff changed since the manifest was written")
    [row] = [s for s in data["sessions"] if s["session_id"] == "tiny-regression-pair1-control"]
    assert not row["used"] and row["state"] == "damaged"
    assert data["paired"]["comparable_pairs"] == 0


def test_the_same_records_give_the_same_bytes(tmp_path: Path) -> None:
    built = full_study(tmp_path)
    write_report(built.study, tmp_path / "a")
    write_report(built.study, tmp_path / "b")
    for name in ("report.json", "report.md", "report.html"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def _flat(value: Any, path: str = "") -> dict[str, Any]:
    """Every leaf of a JSON value by its path (``/costs/sessions/0/money_total/amount``)."""
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, list) else None)
    if items is None:
        return {path: value}
    return {k: v for key, item in items for k, v in _flat(item, f"{path}/{key}").items()}


def test_a_price_change_changes_only_the_money_lines(tmp_path: Path) -> None:
    built = full_study(tmp_path)
    write_report(built.study, tmp_path / "before")
    study = yaml.safe_load(built.study.read_text())
    study["prices"][0].update(per_million_tokens=4.5, date="2026-12-05", source="list B")
    built.study.write_text(yaml.safe_dump(study, sort_keys=False))
    write_report(built.study, tmp_path / "after")
    before, after = _flat(report_json(tmp_path / "before")), _flat(report_json(tmp_path / "after"))
    changed = sorted(k for k in before if before[k] != after.get(k))
    assert changed and set(before) == set(after)
    assert all("/money" in k or k.startswith("/costs/prices/") for k in changed), changed
    old = (tmp_path / "before/report.md").read_text().splitlines()
    new = (tmp_path / "after/report.md").read_text().splitlines()
    assert len(old) == len(new)
    lines = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    assert lines
    for a, b in lines:  # money tables only: every other line, tokens included, is unchanged
        assert "USD" in a + b or "no price" in a + b or a.startswith("| 1 |"), (a, b)
    # The one pair whose both arms are used: its money difference moved (treatment 3000 input
    # tokens, control 1000: 2000 more at 3.0, then 4.5 per million), nothing else of it.
    assert [(a, b) for a, b in lines if a.startswith("| 1 |")] == [
        ("| 1 | +0.0120 |", "| 1 | +0.0150 |")]


def test_a_missing_price_is_no_price_never_zero(tmp_path: Path) -> None:
    built = Built(tmp_path, prices=[{
        "model": MODEL, "category": "input", "per_million_tokens": 3.0,
        "date": "2026-12-01", "source": "list A"}])
    built.attempt(AttemptSpec(session=built.session(1, "control"),
                              steps=[Step("submit", passing())], final=passing()))
    _report, folder = write_report(built.study, tmp_path / "out")
    [cost] = report_json(folder)["costs"]["sessions"]
    assert cost["money_input"]["amount"] == 0.003
    assert cost["money_output"]["amount"] is None and cost["money_total"]["amount"] is None
    text = (folder / "report.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith(
        f"| tiny-regression-pair1-control | {MODEL} |"))
    assert row.endswith(f"| 0.0030 USD | {NO_PRICE} | {NO_PRICE} |"), row
    arm = next(line for line in text.splitlines() if line.startswith("| arm control |"))
    assert arm.endswith(f"| {NO_PRICE} |") and "0.0000 USD" not in text, arm


def test_a_treatment_session_without_judgements_is_not_audited(tmp_path: Path) -> None:
    built = Built(tmp_path)
    built.attempt(AttemptSpec(session=built.session(1, "treatment"),
                              steps=[Step("traincheck", violations=1), Step("submit")],
                              final=passing()))
    _report, folder = write_report(built.study, tmp_path / "out")
    data = report_json(folder)
    [session] = data["diagnostics"]["sessions"]
    assert session["audit_label"] == NOT_AUDITED and data["diagnostics"]["not_audited"] == 1
    assert not data["decision"]["scale_up"]
    assert any(g.startswith("audit: 1 treatment session(s) not audited")
               for g in data["decision"]["gaps"])
    assert "no benefit" not in json.dumps(session)


def test_scripted_agents_never_support_scaling_whatever_the_records_show(
        tmp_path: Path) -> None:
    """The offline pilot's shape: a scripted treatment agent reacts to a violation report with
    the repair its script holds, an auditor judges the chain helped; both conditions show in
    the records, and the gate still says no, naming why."""
    built = Built(tmp_path, model="scripted:agent.yaml")
    treated = built.attempt(AttemptSpec(
        session=built.session(1, "treatment"),
        steps=[Step("traincheck", passing("hidden:test_b"), violations=2),
               Step("submit", passing())], final=passing()))
    chain = next(c for c in build_chains(treated / "transcript.jsonl", _typed(treated),
                                         "treatment", None)
                 if c.observation.source == "diagnostic")
    judge(treated, chain.id, "helped")
    _report, folder = write_report(built.study, tmp_path / "out")
    decision = report_json(folder)["decision"]
    assert all(c["met"] for c in decision["conditions"])
    assert decision["scale_up"] is False
    assert decision["gaps"][0].startswith("agent response: 1 of 1 treatment session(s) ran a "
                                          "scripted agent")
    assert "no basis for scaling" in decision["paragraph"]


def test_a_lock_that_does_not_verify_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    built = full_study(tmp_path)
    (tmp_path / "packet/TASK.md").write_text("changed after the freeze\n")
    out = tmp_path / "out"
    result = run_cli("report", "--study", str(built.study), "--out", str(out),
                     env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    one_error_line(result, "lock does not verify", "packet tiny-regression", "changed")
    assert not out.exists()


def test_a_lock_changed_after_sessions_ran_is_refused(tmp_path: Path) -> None:
    built = full_study(tmp_path)
    path = built.frozen.path
    path.write_text(path.read_text().replace('"frozen_at": "2026-12-04T00:00:00Z"',
                                             '"frozen_at": "2026-12-04T00:00:01Z"'))
    with pytest.raises(HarnessError, match="which no lock in"):
        write_report(built.study, tmp_path / "out")


def test_an_unknown_or_unfrozen_study_is_one_error_line(tmp_path: Path) -> None:
    one_error_line(run_cli("report", "--study", str(tmp_path / "nope.yaml")), "does not exist")
    study = write_study_file(tmp_path)
    one_error_line(run_cli("report", "--study", str(study), "--out", str(tmp_path / "o")),
                   "is not frozen")
    assert not (tmp_path / "o").exists()


def test_the_page_is_self_contained(tmp_path: Path) -> None:
    built = full_study(tmp_path)
    _report, folder = write_report(built.study, tmp_path / "out")
    page = (folder / "report.html").read_text()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert page.count('<figure id="plot-') == 4
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    assert page.count("data:image/svg+xml;base64,") == 4


def test_the_command_prints_a_summary_by_arm_and_writes_the_three_files(tmp_path: Path) -> None:
    built = full_study(tmp_path)
    out = tmp_path / "out"
    result = run_cli("report", "--study", str(built.study), "--out", str(out),
                     env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    assert "partial: 3 of 4 sessions graded" in result.stdout
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in result.stdout.splitlines() if line.startswith("│")}
    # arm: used, feature complete, pass/silent/crash/hang/flaky, tokens, money, ...
    assert rows["control"][:5] == ["2 of 2", "2", "8 / 0 / 0 / 0 / 0", "2400", "0.0120 USD"]
    assert rows["treatment"][:5] == ["1 of 2", "0", "2 / 1 / 1 / 0 / 0", "3600", "0.0180 USD"]
    assert rows["treatment"][6:] == ["1", "1 of 1"]
    assert "2 attempt(s) left out" in result.stdout


def test_an_attempt_of_a_session_the_lock_does_not_have_is_left_out(tmp_path: Path) -> None:
    built = Built(tmp_path)
    stranger = built.session(1, "control").model_copy(
        update={"session_id": "tiny-regression-pair9-control", "pair": 9})
    built.attempt(AttemptSpec(session=stranger, steps=[Step("submit", passing())],
                              final=passing()))
    _report, folder = write_report(built.study, tmp_path / "out")
    assert report_json(folder)["left_out"] == [{
        "session_id": "tiny-regression-pair9-control", "attempt": 1,
        "folder": "tiny-regression-pair9-control/attempt-1",
        "why": "names a session the lock does not have"}]
