"""What the model reads from the `traincheck` tool: the verdict, what was traced, the cost."""

from __future__ import annotations

from grading.packet import DiagnosticsSpec, ResumeProbeSpec
from harness.agent.traincheck_tool import (
    DiagnosticCost,
    DiagnosticReport,
    _traced_run_line,
    render_for_model,
)
from harness.traincheck.reference import Violation

SPEC = DiagnosticsSpec(steps=3, seed=0, args=["--global-batch", "16"],
                       feature_args=["--moe-experts", "4"])
COST = DiagnosticCost(upload_s=1.0, run_s=20.0, collect_s=12.0, check_s=6.0)


def test_a_verdict_says_what_was_traced_and_that_it_is_shorter_than_the_task_runs() -> None:
    traced = _traced_run_line("gloo-ddp-2", SPEC)
    assert traced.startswith("Traced run: `train.py --config gloo-ddp-2 --steps 3 --seed 0 "
                             "--global-batch 16 --moe-experts 4`: 3 optimizer step(s)")
    violation = Violation(id="abc", relation="ConsistencyRelation",
                          rule="Parameter.data stays consistent", first_step=2, ranks=[0, 1])
    found = render_for_model("gloo-ddp-2", DiagnosticReport(
        outcome="violations", new_violations=[violation], has_report=True), "/tmp/r/report.md",
        COST, traced=traced)
    lines = found.splitlines()
    assert lines[0] == ("TrainCheck on gloo-ddp-2: 1 violation(s) of the invariants learned "
                        "from healthy runs of the unmodified code.")
    assert traced in lines and lines[-1].startswith("Cost: 21.0 s")
    clean = render_for_model("cpu-1", DiagnosticReport(outcome="no_new_violations"),
                             "/tmp/r/report.md", COST, traced=traced)
    assert clean.startswith("TrainCheck on cpu-1: no violation of the invariants") and \
        traced in clean


def test_no_verdict_is_never_worded_as_a_traced_clean_run() -> None:
    crashed = render_for_model("gloo-ddp-2", DiagnosticReport(
        outcome="diagnostic_crash", cause="rank 1 failed first (exit code 1)"),
        "/tmp/r/report.md", COST, traced=_traced_run_line("gloo-ddp-2", SPEC))
    assert "there is no verdict, and this is not a clean result" in crashed
    assert "Traced run:" not in crashed


RESUMING = SPEC.model_copy(update={"resume": ResumeProbeSpec(
    save_every=1, save_args=["--ckpt", "{ckpt}", "--save-every", "{k}"],
    resume_args=["--resume", "{checkpoint}"], checkpoint="{ckpt}/step_{k}")})


def test_the_resume_probe_is_said_with_its_rules_or_why_they_were_not_checked() -> None:
    traced = _traced_run_line("gloo-ddp-2", RESUMING)
    assert "Resume probe: the same run with a checkpoint at step 1" in traced
    assert "checkpoint, resume and export paths" not in traced  # the probe takes resume
    cost = COST.model_copy(update={"resume_s": 30.0})
    violation = Violation(id="r1", relation="ResumePreservation",
                          rule="state.rng.torch.digest is preserved by resume", first_step=1,
                          ranks=[1])
    checked = render_for_model("gloo-ddp-2", DiagnosticReport(
        outcome="violations", new_violations=[violation], n_checked=10, n_not_triggered=2,
        resume={"outcome": "ok", "n_checked": 40, "n_not_triggered": 3}),
        "/tmp/r/report.md", cost, traced=traced)
    assert "- [ResumePreservation] state.rng.torch.digest is preserved by resume (first " \
           "fired at step 1, rank 1)" in checked
    assert "40 resume rules checked, 3 of them not triggered" in checked
    assert "resume probe 30.0 s, beside the check" in checked
    # A probe that died leaves a violation found standing, and says its rules went unchecked.
    crash = {"outcome": "crash", "cause": "resumed run: rank 0 failed first (exit code 1)"}
    died = render_for_model("gloo-ddp-2", DiagnosticReport(
        outcome="violations", new_violations=[violation], resume=crash),
        "/tmp/r/report.md", cost, traced=traced)
    assert "the resume probe did not finish (crash: resumed run: rank 0" in died
    assert "so its rules were not checked" in died
    # With nothing found, it is no verdict: never a clean resume.
    alone = render_for_model("gloo-ddp-2", DiagnosticReport(
        outcome="resume_probe_crash", cause=f"resume probe: {crash['cause']}", resume=crash),
        "/tmp/r/report.md", cost, traced=traced)
    assert ("but the resume probe's run of your code CRASHED, so its resume rules were not "
            "checked: there is no verdict, and this is not a clean result.") in alone
    assert "Cause: resume probe: resumed run: rank 0 failed first" in alone


def test_a_selective_collection_is_said_in_what_was_traced() -> None:
    full = _traced_run_line("cpu-1", SPEC)
    selective = _traced_run_line("cpu-1", SPEC, selective=True)
    assert "only the torch calls the frozen invariants name" not in full
    assert selective.startswith(full) and \
        "records only the torch calls the frozen invariants name" in selective
