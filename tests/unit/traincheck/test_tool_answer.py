"""What the model reads from the `traincheck` tool: the verdict, what was traced, the cost."""

from __future__ import annotations

from grading.packet import DiagnosticsSpec
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
