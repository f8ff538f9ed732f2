"""Evidence chains over synthetic attempts: transcripts written as the session writes them
(TranscriptWriter + events.validate), a session record and manifest that verify, and
hand-built snapshot grades, so the chain builder's improved/regressed logic is checked
without a container."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from harness.agent.snapshots import SNAPSHOT_TOOLS
from harness.audit import evidence
from harness.errors import HarnessError
from harness.records import chains, events
from harness.records.attempt import (
    MANIFEST_NAME,
    RECORD_NAME,
    SESSION_SCHEMA_VERSION,
    SNAPSHOT_GRADES_NAME,
    TRANSCRIPT_NAME,
    AttemptPaths,
    SessionRecord,
    TranscriptHead,
    manifest_problem,
    write_manifest,
    write_record,
)
from harness.records.grades import SnapshotGrade, SnapshotGrades
from harness.records.transcript import TranscriptWriter
from tests.helpers import one_error_line, run_cli

COMMON = ["bash", "read_file", "write_file", "edit_file", "run_public_tests", "run_candidate",
          "submit"]
BROKEN = "    if ddp:\n        ignore(experts)\n        ignore(more)\n        ignore(all)\n" \
         "        return DDP(\n"
GOOD = "    if ddp:\n        return DDP(\n"
VIOLATION = {"relation": "ConsistencyRelation", "rule": "Parameter.data stays consistent",
             "plain_rule": "every rank must hold the same Parameter.data", "ranks": [0, 1],
             "first_step": 0, "id": "ebba3e44f2716e99"}


def diff_sha(index: int) -> str:
    return hashlib.sha256(f"diff {index}".encode()).hexdigest()


class Attempt:
    """Writes one attempt folder the way a session does, one scripted turn at a time."""

    def __init__(self, folder: Path, arm: str, *, tools: list[str] | None = None) -> None:
        self.folder = folder
        self.arm = arm
        folder.mkdir(parents=True)
        self.writer = TranscriptWriter(folder / TRANSCRIPT_NAME, events.validate)
        self.calls = self.snapshots = 0
        if tools is None:
            tools = COMMON + (["traincheck"] if arm == "treatment" else [])
        self.writer.append("session_start", {
            "study": "s", "session": f"t-pair1-{arm}", "attempt": 1, "task": "t", "pair": 1,
            "arm": arm, "seed": 1, "model": {}, "image": arm, "image_id": "sha256:0",
            "in_frozen_study": False, "tools": tools, "system_prompt": "p", "budget": {}})

    def turn(self, name: str, args: dict[str, Any], *, text: str = "", ok: bool = True,
             exit_code: int | None = 0, output: str = "", details: dict[str, Any] | None = None
             ) -> int:
        """One model turn with one tool call; returns the seq of its tool_result."""
        self.calls += 1
        call_id = f"call_{self.calls}"
        call = {"id": call_id, "name": name, "args": args}
        self.writer.append("model_response", {
            "text": text, "tool_calls": [call], "usage": {}, "stop_reason": "tool_use",
            "model": "scripted", "provider_content": None, "duration_s": 0.0})
        self.writer.append("tool_call", call)
        if name in SNAPSHOT_TOOLS:
            self.snapshots += 1
            # The snapshot's diff is the file its event vouches for (verify checks it).
            snap = self.folder / "snapshots" / f"{self.snapshots:04d}.diff"
            snap.parent.mkdir(exist_ok=True)
            snap.write_text(f"diff {self.snapshots}")
            self.writer.append("snapshot", {
                "index": self.snapshots, "trigger": name, "call_id": call_id,
                "diff": f"snapshots/{self.snapshots:04d}.diff",
                "sha256": diff_sha(self.snapshots), "bytes": 10, "files_changed": ["a.py"],
                "duration_s": 0.1})
        return self.writer.append("tool_result", {
            "id": call_id, "name": name, "ok": ok, "output": output, "exit_code": exit_code,
            "timed_out": False, "duration_s": 0.1, "output_bytes": len(output),
            "output_truncated": False, "artifact": None, "artifact_truncated": False,
            "artifact_bytes": 0, "kill": "none", "ends_session": name == "submit",
            "details": details or {}, "shown_to_model": output, "cut_for_model": False}).seq

    def close(self) -> Path:
        self.writer.append("session_end", {"status": "finished", "outcome": "submitted",
                                           "usage": {}, "diff": None})
        head = TranscriptHead(events=self.writer.next_seq, head=self.writer.last_hash)
        self.writer.close()
        write_record(self.folder, SessionRecord(
            schema_version=SESSION_SCHEMA_VERSION, study="s",
            session_id=f"t-pair1-{self.arm}", attempt=1, task="t", pair=1,
            arm=self.arm,  # type: ignore[arg-type]
            seed=1, model="scripted:x", packet_dir="p", hidden_dir="h", image="i",
            image_id="sha256:0", harness_pid=1, host="h", started_at="now",
            status="finished", outcome="submitted", transcript=head))
        write_manifest(self.folder)
        return self.folder


def traincheck(outcome: str, violations: list[dict[str, Any]]) -> dict[str, Any]:
    return {"outcome": outcome, "cause": "", "new_violations": violations,
            "configuration": "gloo-ddp-2"}


def regression_caught(folder: Path, *, note_text: str = "Put the experts back under DDP.",
                      ) -> tuple[Path, dict[str, int]]:
    """Breaks DDP, is told so by the diagnostic, reverts, checks again, fails its public tests,
    rewrites a file and submits."""
    attempt = Attempt(folder, "treatment")
    attempt.turn("edit_file", {"path": "d.py", "old": GOOD, "new": BROKEN},
                 text="Keep the experts local.")
    seqs = {"tc1": attempt.turn("traincheck", {"configuration": "gloo-ddp-2"},
                                output="TrainCheck on gloo-ddp-2: 1 violation",
                                details=traincheck("violations", [VIOLATION]))}
    attempt.turn("edit_file", {"path": "d.py", "old": BROKEN, "new": GOOD}, text=note_text)
    attempt.turn("bash", {"command": "git diff --stat"}, output="1 file changed")
    seqs["tc2"] = attempt.turn("traincheck", {"configuration": "gloo-ddp-2"},
                               output="TrainCheck on gloo-ddp-2: no new violations",
                               details=traincheck("no_new_violations", []))
    seqs["tests"] = attempt.turn("run_public_tests", {}, ok=False, exit_code=1,
                                 output="F.\n1 failed, 1 passed\n\n[exit code 1]")
    attempt.turn("write_file", {"path": "e.py", "content": "a\nb\nc\n"}, exit_code=None)
    seqs["submit"] = attempt.turn("submit", {"summary": "done"}, exit_code=None)
    return attempt.close(), seqs


def write_grades(folder: Path, contracts: dict[int, dict[str, str]], *,
                 sha: dict[int, str] | None = None) -> None:
    graded = SnapshotGrades(graded_at="now", snapshots=[
        SnapshotGrade(index=i, trigger="traincheck", call_id=None,
                      diff_sha256=(sha or {}).get(i, diff_sha(i)), folder=f"g{i}",
                      verdict="complete" if all(o == "pass" for o in c.values())
                      else "incomplete", contracts=c)
        for i, c in contracts.items()])
    (folder / "grades").mkdir(exist_ok=True)
    (folder / SNAPSHOT_GRADES_NAME).write_text(graded.model_dump_json())


def test_a_chain_runs_from_the_observation_to_the_next_run_with_the_independent_change(
    tmp_path: Path,
) -> None:
    attempt, seqs = regression_caught(tmp_path / "a")
    write_grades(attempt, {
        1: {"public": "pass", "experts_synced": "fail", "export": "pass", "cuda": "not_run",
            "resume": "crash"},
        2: {"public": "pass", "experts_synced": "pass", "export": "fail", "cuda": "pass",
            "resume": "not_run"},
        3: {"public": "fail", "experts_synced": "pass", "export": "fail", "cuda": "pass",
            "resume": "pass"},
        # Snapshot 4 (the submit) is not graded.
    })
    proposal = evidence.propose(attempt)
    assert [c.id for c in proposal.chains] == [f"c{seqs['tc1']}", f"c{seqs['tc2']}",
                                               f"c{seqs['tests']}"]
    first, second, tests = proposal.chains

    assert first.observation.source == "diagnostic" and first.observation.outcome == "violations"
    assert first.observation.label == "1 new violation(s)"
    [violation] = first.observation.violations
    assert (violation.relation, violation.ranks) == ("ConsistencyRelation", [0, 1])
    assert [m.text for m in first.messages] == ["Put the experts back under DDP."]
    [edit] = first.edits
    assert (edit.tool, edit.path, edit.added, edit.removed, edit.ok) == (
        "edit_file", "d.py", 0, 3, True)
    assert [c.tool for c in first.other_calls] == ["bash"]
    assert first.next_run is not None and first.next_run.tool == "traincheck"
    assert first.next_run.seq == seqs["tc2"] - 2  # its tool_call, before its snapshot
    assert first.before is not None and first.after is not None
    assert (first.before.index, first.after.index) == (1, 2)
    assert first.before.failing == ["experts_synced", "resume"]
    assert first.before.not_run == ["cuda"]
    # Judged failing -> pass only: not_run -> pass is no improvement, pass -> not_run no loss.
    assert first.improved == ["experts_synced"] and first.regressed == ["export"]

    assert second.observation.label == "clean: no new violations"
    assert second.messages == [] and second.edits == []
    assert second.next_run is not None and second.next_run.tool == "run_public_tests"
    assert second.improved == [] and second.regressed == ["public"]  # resume: not_run -> pass

    assert tests.observation.source == "own_run"
    assert tests.observation.label == "failed (exit 1)"
    assert "1 failed" in tests.observation.output_head
    assert [(e.tool, e.added, e.removed) for e in tests.edits] == [("write_file", 3, None)]
    assert tests.after is not None and not tests.after.graded
    assert tests.improved == tests.regressed == []
    assert "not graded" in evidence.describe(tests)["after"]

    # Bound to the exact bytes, and written byte-identically when proposed again.
    raw = AttemptPaths(root=attempt).chains.read_bytes()
    assert proposal.transcript_sha256 == hashlib.sha256(
        (attempt / TRANSCRIPT_NAME).read_bytes()).hexdigest()
    assert proposal.snapshot_grades_sha256 == hashlib.sha256(
        (attempt / SNAPSHOT_GRADES_NAME).read_bytes()).hexdigest()
    evidence.propose(attempt)
    assert AttemptPaths(root=attempt).chains.read_bytes() == raw


def test_without_grades_every_snapshot_is_not_graded(tmp_path: Path) -> None:
    attempt, _ = regression_caught(tmp_path / "a")
    proposal = evidence.propose(attempt)
    assert proposal.snapshot_grades_sha256 is None
    for chain in proposal.chains:
        assert chain.before is not None and not chain.before.graded
        assert chain.improved == chain.regressed == []


def test_a_grade_of_another_diff_is_refused(tmp_path: Path) -> None:
    attempt, _ = regression_caught(tmp_path / "a")
    write_grades(attempt, {1: {"x": "pass"}}, sha={1: "0" * 64})
    with pytest.raises(HarnessError, match="grades snapshot 1 as a diff"):
        evidence.propose(attempt)


def test_the_control_arm_gets_chains_from_its_own_failed_runs(tmp_path: Path) -> None:
    attempt = Attempt(tmp_path / "c", "control")
    attempt.turn("run_public_tests", {}, output="ok\n[exit code 0]")  # passed: no observation
    failed = attempt.turn("run_candidate", {"configuration": "gloo-ddp-2"}, ok=False,
                          exit_code=1, output="Traceback\nRuntimeError: boom\n[exit code 1]")
    attempt.turn("edit_file", {"path": "a.py", "old": "x\n", "new": "y\nz\n"}, text="Fix it.")
    # The tool is not offered to the control arm: an unknown tool, no observation, but a run.
    attempt.turn("traincheck", {}, ok=False, exit_code=None, output="unknown tool 'traincheck'")
    attempt.turn("submit", {"summary": "s"}, exit_code=None)
    proposal = evidence.propose(attempt.close())
    [chain] = proposal.chains
    assert chain.id == f"c{failed}" and chain.observation.source == "own_run"
    assert "RuntimeError: boom" in chain.observation.output_head
    assert [(e.added, e.removed) for e in chain.edits] == [(2, 1)]
    assert chain.next_run is not None and chain.next_run.tool == "traincheck"


def test_a_treatment_session_that_never_called_the_tool_gets_one_proposal_for_it(
    tmp_path: Path,
) -> None:
    attempt = Attempt(tmp_path / "t", "treatment")
    attempt.turn("submit", {"summary": "s"}, exit_code=None)
    folder = attempt.close()
    [chain] = evidence.propose(folder).chains
    assert chain.id == evidence.TOOL_NOT_USED_ID
    assert chain.observation.source == "tool_not_used"
    recorded = evidence.judge(folder, chain.id, "tool_not_used", "ann")
    assert recorded.category == "tool_not_used"


def test_judgements_round_trip_and_are_refused_when_the_transcript_is_replaced(
    tmp_path: Path,
) -> None:
    attempt, seqs = regression_caught(tmp_path / "a")
    proposal = evidence.propose(attempt)
    chain = f"c{seqs['tc1']}"
    evidence.judge(attempt, chain, "helped", "ann", "revert followed the report")
    evidence.judge(attempt, f"c{seqs['tc2']}", "no_defect_present", "bob")
    [first, second] = evidence.read_judgements(attempt)
    assert first.judgement.model_dump(exclude={"at"}) == {
        "chain": chain, "category": "helped", "auditor": "ann",
        "note": "revert followed the report", "transcript_sha256": proposal.transcript_sha256,
        "chains_sha256": hashlib.sha256(
            AttemptPaths(root=attempt).chains.read_bytes()).hexdigest()}
    assert second.judgement.category == "no_defect_present"
    judgements = AttemptPaths(root=attempt).judgements
    kept = judgements.read_bytes()

    with pytest.raises(HarnessError, match="not in the proposal"):
        evidence.judge(attempt, "c99999", "helped", "ann")
    with pytest.raises(HarnessError, match="unknown category"):
        evidence.judge(attempt, chain, "useful", "ann")
    assert judgements.read_bytes() == kept

    # A replacement that verifies on its own (a new chain, record and manifest to match): only
    # the binding to the proposal's digest can tell.
    forged_dir = tmp_path / "forged"
    forged, _ = regression_caught(forged_dir, note_text="Something else entirely.")
    for name in (TRANSCRIPT_NAME, RECORD_NAME, MANIFEST_NAME):
        (attempt / name).write_bytes((forged / name).read_bytes())
    with pytest.raises(HarnessError, match="the transcript changed since"):
        evidence.judge(attempt, chain, "helped", "ann")
    assert judgements.read_bytes() == kept
    # A new proposal on it is possible, but the earlier judgements still bind the file.
    evidence.propose(attempt)
    with pytest.raises(HarnessError, match="judgement 0 was made on a transcript"):
        evidence.judge(attempt, chain, "helped", "ann")
    assert judgements.read_bytes() == kept


def test_a_tampered_audit_file_is_refused_and_nothing_is_added(tmp_path: Path) -> None:
    attempt, seqs = regression_caught(tmp_path / "a")
    evidence.propose(attempt)
    evidence.judge(attempt, f"c{seqs['tc1']}", "helped", "ann")
    path = AttemptPaths(root=attempt).judgements
    path.write_bytes(path.read_bytes().replace(b'"helped"', b'"diagnostic_misleading"'))
    tampered = path.read_bytes()
    with pytest.raises(HarnessError, match="does not verify"):
        evidence.read_judgements(attempt)
    with pytest.raises(HarnessError, match="does not verify"):
        evidence.judge(attempt, f"c{seqs['tc1']}", "helped", "ann")
    assert path.read_bytes() == tampered


def test_the_audit_folder_is_never_part_of_the_manifest(tmp_path: Path) -> None:
    attempt, seqs = regression_caught(tmp_path / "a")
    evidence.propose(attempt)
    evidence.judge(attempt, f"c{seqs['tc1']}", "helped", "ann")
    assert manifest_problem(attempt) is None
    # A later grading rewrites the manifest: the audit stays out of it, so judging goes on.
    listed = write_manifest(attempt)["files"]
    assert not any(rel.startswith("audit/") for rel in listed)
    evidence.judge(attempt, f"c{seqs['tc2']}", "no_defect_present", "ann")
    assert manifest_problem(attempt) is None
    (attempt / "stray.txt").write_text("x")  # anything else unlisted still is a problem
    assert manifest_problem(attempt) == "stray.txt is not in the manifest"


def test_the_command_line_shows_transcript_text_inert_and_refuses_in_one_line(
    tmp_path: Path,
) -> None:
    hostile = "[bold red]markup[/] \x1b]0;title\x07 \u202eevil"
    attempt, seqs = regression_caught(tmp_path / "a", note_text=hostile)
    result = run_cli("audit", "propose", str(attempt))
    assert result.returncode == 0, result.stderr
    assert "[bold red]markup[/]" in result.stdout  # shown as written, never interpreted
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "\\x1b]0;title\\x07" in result.stdout and "\\u202eevil" in result.stdout
    assert f"c{seqs['tc1']}" in result.stdout
    chain = f"c{seqs['tc1']}"
    result = run_cli("audit", "judge", str(attempt), "--chain", chain, "--category", "helped",
                     "--auditor", "[i]ann[/i]", "--note", "the revert fixed it")
    assert result.returncode == 0, result.stderr
    shown = run_cli("audit", "show", str(attempt))
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if chain in line)
    for cell in ("helped", "[i]ann[/i]", "the revert fixed it", "this one", "current"):
        assert cell in row, row
    one_error_line(run_cli("audit", "judge", str(attempt), "--chain", "c1", "--category", "helped",
                           "--auditor", "a"), "not in the proposal")
    one_error_line(run_cli("audit", "judge", str(attempt), "--chain", chain), "--category")
    one_error_line(run_cli("audit", str(attempt)), "propose, judge, show")
    data = json.loads(AttemptPaths(root=attempt).chains.read_text())
    assert data["schema_version"] == chains.CHAINS_SCHEMA_VERSION


def test_reexecution_pairs_a_reused_call_id_by_position() -> None:
    """Some servers reuse call ids (call_0 every turn): each call's recorded result is the one
    that followed it, not the last result with that id."""
    from types import SimpleNamespace

    from harness.audit.reexecute import results_by_call

    def event(seq: int, kind: str, **data: object) -> SimpleNamespace:
        return SimpleNamespace(seq=seq, kind=kind, data=data)

    stream = [event(1, "tool_call", id="dup"), event(2, "tool_result", id="dup", output="a"),
              event(3, "tool_call", id="dup"), event(4, "tool_result", id="dup", output="b"),
              event(5, "tool_call", id="other")]
    paired = results_by_call(stream)
    assert paired[1].data["output"] == "a" and paired[3].data["output"] == "b"
    assert 5 not in paired
