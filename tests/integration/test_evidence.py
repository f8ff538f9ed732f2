"""`harness audit` on a real scripted treatment session (moe-router): the agent breaks DDP
for the experts, TrainCheck reports it, the agent reverts and checks again. The proposal
must hold that chain; judgements round-trip and are refused once the transcript changed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grading.hashing import file_sha256
from harness.audit import evidence
from harness.paths import REPO_ROOT
from harness.records.attempt import TRANSCRIPT_NAME, AttemptPaths, manifest_problem, read_record
from harness.study.session import SessionOptions, run_session
from tests.conftest import write_script, write_study
from tests.helpers import harness, one_error_line
from tests.integration.test_providers import session_events
from tests.integration.test_traincheck_tool import TASK

PILOT = REPO_ROOT / "studies/agents/pilot-offline/moe-router-treatment.yaml"


def break_check_revert_check() -> list[dict[str, object]]:
    """The offline pilot's treatment agent without its reads and its other runs: the feature,
    the experts kept out of DDP, traincheck, the revert, traincheck, submit."""
    steps = yaml.safe_load(PILOT.read_text())["steps"]
    kept = [s for s in steps if s["tool"] in ("write_file", "edit_file", "traincheck", "submit")]
    assert [s["tool"] for s in kept[-5:]] == ["edit_file", "traincheck", "edit_file",
                                              "traincheck", "submit"]
    return kept


# Two traced runs of the diagnostic in one session: longer than one test's default.
@pytest.mark.timeout(2400)
def test_audit_proposes_the_diagnostic_chain_and_binds_judgements_to_the_transcript(
    tmp_path: Path,
) -> None:
    steps = break_check_revert_check()
    revert_text = steps[-3]["text"]
    study = write_study(
        tmp_path, tasks=[{"id": TASK, "packet": str(REPO_ROOT / "task_packets" / TASK),
                          "hidden": str(REPO_ROOT / "hidden" / TASK)}],
        agent={"model": f"scripted:{write_script(tmp_path, steps)}"},
        arms={"control": {"image": "control"},
              "treatment": {"image": "treatment", "extra_tools": ["traincheck"]}},
        budget={"wall_seconds": 3600, "tool_calls": 40, "candidate_runs": 2})
    attempt = run_session(SessionOptions(study_path=study, pair=1, arm="treatment", grade=False),
                          log=lambda _m: None)
    record = read_record(attempt)
    assert record.status == "finished" and record.outcome == "submitted", record.error

    result = harness("audit", "propose", str(attempt))
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout)  # the table an auditor reads (shown with -s)
    proposal, _ = evidence.read_proposal(attempt)
    assert proposal.arm == "treatment" and proposal.transcript_sha256 == (
        file_sha256(attempt / TRANSCRIPT_NAME))

    calls = [e for e in session_events(attempt, "tool_call") if e["name"] == "traincheck"]
    assert len(calls) == 2
    first, second = proposal.chains  # one per diagnostic report; no run of its own failed
    obs = first.observation
    assert obs.source == "diagnostic" and obs.outcome == "violations", obs
    assert obs.call_id == calls[0]["id"]
    assert any(v.relation == "ConsistencyRelation" and "Parameter" in v.rule
               and "data" in v.rule and v.ranks == [0, 1] for v in obs.violations), obs
    assert first.id == f"c{obs.seq}"
    # The response: the agent's words and the revert of tinylm/distributed.py, nothing else.
    assert [m.text for m in first.messages] == [revert_text]
    assert [(e.tool, e.path, e.added, e.removed, e.ok) for e in first.edits] == [
        ("edit_file", "tinylm/distributed.py", 0, 3, True)]
    assert first.other_calls == []
    assert first.next_run is not None and first.next_run.tool == "traincheck"
    assert first.next_run.call_id == calls[1]["id"]
    # The code that was observed and the code after the edits, not graded in this test.
    assert first.before is not None and first.after is not None
    assert (first.before.trigger, first.after.trigger) == ("traincheck", "traincheck")
    assert first.after.index == first.before.index + 1
    assert "tinylm/distributed.py" in first.before.files_changed
    assert not first.before.graded and first.improved == first.regressed == []
    assert second.observation.label == "clean: no new violations"
    assert second.next_run is not None and second.next_run.tool == "submit"
    assert first.id in result.stdout and "not graded" in result.stdout

    judged = harness("audit", "judge", str(attempt), "--chain", first.id, "--category", "helped",
                     "--auditor", "ann", "--note", "the revert followed the report")
    assert judged.returncode == 0, judged.stderr
    [entry] = evidence.read_judgements(attempt)
    assert entry.judgement.model_dump(exclude={"at"}) == {
        "chain": first.id, "category": "helped", "auditor": "ann",
        "note": "the revert followed the report",
        "transcript_sha256": proposal.transcript_sha256,
        "chains_sha256": file_sha256(AttemptPaths(root=attempt).chains)}
    shown = harness("audit", "show", str(attempt))
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if first.id in line)
    for cell in ("helped", "ann", "the revert followed the report", "this one", "current"):
        assert cell in row, row
    assert manifest_problem(attempt) is None  # the audit/ folder is not the session's

    judgements = AttemptPaths(root=attempt).judgements
    kept = judgements.read_bytes()
    transcript = attempt / TRANSCRIPT_NAME
    data = bytearray(transcript.read_bytes())
    at = data.index(revert_text.encode())
    data[at] ^= 0x20  # one byte: the case of the agent's first letter
    transcript.write_bytes(bytes(data))
    one_error_line(harness("audit", "judge", str(attempt), "--chain", first.id,
                           "--category", "helped", "--auditor", "ann"), "does not verify")
    assert judgements.read_bytes() == kept
