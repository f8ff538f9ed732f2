"""The treatment arm's `traincheck` tool, for real: treatment container, TrainCheck, the frozen
moe-router reference (reports/traincheck/moe-router/reference/), the scripted agent."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from diagnostics.checking import invariant_id
from harness.agent.loop import build_system_prompt
from harness.agent.toolsets import EXTRA_TOOLS, tools_for_arm
from harness.agent.traincheck_tool import _last_json_line
from harness.paths import REPO_ROOT
from harness.records.attempt import TRANSCRIPT_NAME, read_record
from harness.records.transcript import verify
from harness.study.session import SessionOptions, run_session
from harness.traincheck.reference import load_frozen
from harness.traincheck.variants import task_files
from tests.conftest import write_script, write_study
from tests.integration.test_providers import session_events

TASK = "moe-router"
AGENT = REPO_ROOT / "tests/fixtures/agents/moe-router-traincheck.yaml"
# The files the scripted agent edits; nothing else may show up in its diff.
EDITED = {"tinylm/config.py", "tinylm/model.py", "tinylm/export.py", "tinylm/distributed.py",
          "train.py", "README.md"}


def moe_study(tmp: Path, script: Path, **overrides: Any) -> Path:
    """The fixture study on the real moe-router packet, the treatment arm with `traincheck`."""
    return write_study(
        tmp, tasks=[{"id": TASK, "packet": str(REPO_ROOT / "task_packets" / TASK),
                     "hidden": str(REPO_ROOT / "hidden" / TASK)}],
        agent={"model": f"scripted:{script}"},
        arms={"control": {"image": "control"},
              "treatment": {"image": "treatment", "extra_tools": ["traincheck"]}},
        budget={"wall_seconds": 1800, "tool_calls": 40, "candidate_runs": 2}, **overrides)


def tool_results(attempt: Path, name: str) -> list[dict[str, Any]]:
    return [e for e in session_events(attempt, "tool_result") if e["name"] == name]


# --- sessions, real containers -------------------------------------------------------------


def test_only_the_treatment_arm_has_the_tool_and_bad_configurations_are_clear_errors(
    tmp_path: Path,
) -> None:
    script = write_script(tmp_path, [
        {"tool": "traincheck", "args": {"configuration": "cuda-ddp-2"}},
        {"tool": "traincheck", "args": {"configuration": "no-such-config"}},
        {"tool": "traincheck", "args": {}},
        {"tool": "submit", "args": {"summary": "s"}},
    ])
    study = moe_study(tmp_path, script)
    attempts = {arm: run_session(SessionOptions(study_path=study, pair=1, arm=arm, grade=False),
                                 log=lambda _m: None) for arm in ("control", "treatment")}
    starts = {arm: session_events(a, "session_start")[0] for arm, a in attempts.items()}
    assert "traincheck" not in starts["control"]["tools"]
    assert starts["treatment"]["tools"] == [*starts["control"]["tools"], "traincheck"]
    line = f"- traincheck: {EXTRA_TOOLS['traincheck'].description}"
    assert starts["treatment"]["system_prompt"].splitlines() == [
        *starts["control"]["system_prompt"].splitlines(), line]
    assert build_system_prompt(None, tools_for_arm([])) == starts["control"]["system_prompt"]

    control = tool_results(attempts["control"], "traincheck")
    assert [r["output"] for r in control] == ["unknown tool 'traincheck'"] * 3

    treatment = tool_results(attempts["treatment"], "traincheck")
    assert not any(r["ok"] for r in treatment)
    for result, asked in zip(treatment[:2], ("cuda-ddp-2", "no-such-config"), strict=True):
        assert result["output"].startswith(
            f"error: no TrainCheck reference for configuration '{asked}'; use one of: ")
        assert "gloo-ddp-2" in result["output"] and "cuda" not in result["output"].split(":")[-1]
    assert treatment[2]["output"].startswith("error: bad arguments for traincheck")
    for attempt in attempts.values():
        record = read_record(attempt)
        assert record.outcome == "submitted"
        assert record.usage is not None and record.usage.diagnostic_runs == 0
        assert "diagnostics" not in record.usage.compute_seconds  # refused calls cost nothing


def test_traincheck_finds_unsynchronised_experts_without_touching_the_workspace(
    tmp_path: Path,
) -> None:
    # The agent's feature steps are those of the solve script, so the reference applies.
    solve = yaml.safe_load((REPO_ROOT / "tests/fixtures/agents/moe-router-solve.yaml")
                           .read_text())["steps"]
    steps = yaml.safe_load(AGENT.read_text())["steps"]
    feature = [s for s in solve if s["tool"] in ("write_file", "edit_file")]
    assert steps[:len(feature)] == feature
    # What detection relies on: the frozen gloo-ddp-2 set keeps the cross-rank Parameter.data
    # invariant and the healthy control run did not violate it (else it is subtracted).
    _, frozen = load_frozen(task_files(TASK), "gloo-ddp-2")
    control_ids = set(json.loads(frozen.control)["violated_ids"])
    usable = [inv for inv in map(json.loads, frozen.invariants.decode().splitlines())
              if inv["relation"] == "ConsistencyRelation"
              and {p.get("attr_name") for p in inv["params"]} == {"data"}
              and invariant_id(inv) not in control_ids]
    assert usable, ("the frozen moe-router gloo-ddp-2 reference cannot show this fault: its "
                    "cross-rank Parameter.data invariant was dropped (policy.json) or is in "
                    "the control's violations; rebuild it")

    attempt = run_session(SessionOptions(study_path=moe_study(tmp_path, AGENT), pair=1,
                                         arm="treatment", grade=False), log=lambda _m: None)
    record = read_record(attempt)
    assert record.status == "finished" and record.outcome == "submitted", record.error

    [result] = tool_results(attempt, "traincheck")
    details, output = result["details"], result["output"]
    print(output)  # the text the model read (shown with -s)
    assert details["outcome"] == "violations", output
    consistency = [v for v in details["new_violations"]
                   if v["relation"] == "ConsistencyRelation" and "Parameter" in v["rule"]
                   and "data" in v["rule"]]
    assert consistency and consistency[0]["ranks"] == [0, 1], output
    assert "[ConsistencyRelation]" in output and "ranks 0, 1" in output
    assert "/tmp/traincheck/run-1/report.md" in output and "Cost:" in output
    # The answer says what was traced and that it is shorter than the task's own runs.
    steps = details["train_args"][details["train_args"].index("--steps") + 1]
    assert f"Traced run: `train.py --config gloo-ddp-2 --steps {steps} " in output
    assert "shorter than the task's full runs" in output
    assert details["report"] == "/tmp/traincheck/run-1/report.md"
    assert details["reference_uploaded"] is True
    assert details["diagnostics_s"] > 0 and details["collect_s"] > 0 and details["check_s"] > 0
    # The resume probe began before the check ended: it runs beside the check.
    raw = _last_json_line(Path(result["artifact"]))
    check, resume = raw["check"], raw["resume"]
    assert resume["outcome"] == "ok" and resume["n_checked"] > 0, resume
    assert resume["started_s"] < check["started_s"] + check["wall_s"], (check, resume)
    assert Path(result["artifact"]).is_file()

    # The transcript verifies and the session's usage carries the diagnostic compute apart.
    assert verify(attempt / TRANSCRIPT_NAME).ok
    cli = subprocess.run([sys.executable, "-m", "harness.cli", "verify", str(attempt)],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert record.usage is not None and record.usage.diagnostic_runs == 1
    assert record.usage.compute_seconds["diagnostics"] >= details["diagnostics_s"] > 0
    assert "candidate_runs" not in record.usage.compute_seconds
    end = session_events(attempt, "session_end")[0]
    assert end["usage"]["compute_seconds"]["diagnostics"] > 0

    # The workspace is the same before and after the call, and the diff holds only the edits.
    before, after = (r["output"] for r in tool_results(attempt, "bash"))
    assert before == after and "[exit code 0]" in before
    assert record.diff is not None and set(record.diff.files_changed) == EDITED
    diff = (attempt / "submission.diff").read_text()
    for leaked in ("_traincheck_", "traincheck", "_diag_entry"):
        assert leaked not in diff


def test_a_crashing_program_is_reported_as_a_crash_never_as_a_clean_result(
    tmp_path: Path,
) -> None:
    script = write_script(tmp_path, [
        {"tool": "write_file", "args": {"path": "train.py", "content":
                                        "raise SystemExit('deliberate failure')\n"}},
        {"tool": "traincheck", "args": {"configuration": "gloo-ddp-2"}},
        {"tool": "submit", "args": {"summary": "s"}},
    ])
    attempt = run_session(SessionOptions(study_path=moe_study(tmp_path, script), pair=1,
                                         arm="treatment", grade=False), log=lambda _m: None)
    [result] = tool_results(attempt, "traincheck")
    details, output = result["details"], result["output"]
    print(output)
    assert result["ok"] is False and details["outcome"] == "diagnostic_crash", output
    assert output.startswith("TrainCheck on gloo-ddp-2: the traced run of your code CRASHED")
    # Both ranks exit; which one torchrun saw first depends on timing.
    assert re.search(r"\nCause: rank [01] failed first \(exit code 1\)\n", output), output
    assert "Program output (tail):" in output and "\x1b[" not in output
    assert "/tmp/traincheck/run-1/run/output.log" in output
    assert "no violations" not in output and details["new_violations"] == []
    record = read_record(attempt)
    assert record.usage is not None and record.usage.diagnostic_runs == 1
    assert record.usage.compute_seconds["diagnostics"] > 0
