"""A frozen study's records written by hand, the way sessions, graders and auditors write
them (no Docker): a lock, attempts with transcripts, grades, snapshot grades and judgements.
For the report's unit tests; the integration test reads records real sessions wrote."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grading.hashing import tree_sha256
from harness.audit import evidence
from harness.paths import REPO_ROOT
from harness.records import events
from harness.records.attempt import (
    SESSION_SCHEMA_VERSION,
    AttemptPaths,
    DiffSummary,
    GradeSummary,
    SessionRecord,
    TranscriptHead,
    extend_manifest,
    write_grade_summary,
    write_manifest,
    write_record,
)
from harness.records.budget import Usage
from harness.records.grades import SnapshotGrade, SnapshotGrades
from harness.records.study import load_study
from harness.records.transcript import TranscriptWriter
from harness.study import freeze
from harness.study.freeze import Frozen, GateDecision, LockedSession, StudyLock

TASK = "tiny-regression"
TOOL_FOR = {"run_candidate": "run_candidate", "run_public_tests": "run_public_tests",
            "traincheck": "traincheck", "submit": "submit"}
# A model the agent loop would call (no call is made: the records are written by hand), so the
# decision gate judges the records as a real study's; a scripted one is its own test.
MODEL = "anthropic:claude-unit-test"
PRICES = [
    {"model": MODEL, "category": "input", "per_million_tokens": 3.0,
     "currency": "USD", "date": "2026-12-01", "source": "list A"},
    {"model": MODEL, "category": "output", "per_million_tokens": 15.0,
     "currency": "USD", "date": "2026-12-01", "source": "list A"},
]


def write_study_file(tmp: Path, *, prices: list[dict[str, Any]] | None = None,
                     pairs: int = 2, comparison: str = "treatment-vs-control",
                     model: str = MODEL) -> Path:
    """A study of the tiny task (its packet copied, so a test may change it) whose TrainCheck
    reports root is under ``tmp`` (a test writes calibration and capability reports there)."""
    packet = tmp / "packet"
    if not packet.exists():
        shutil.copytree(REPO_ROOT / "tests/fixtures/task_packets" / TASK, packet)
    (tmp / "agent.yaml").write_text(yaml.safe_dump({"steps": []}))
    study = {
        "name": "unit", "runs_dir": str(tmp / "runs"), "pairs_per_task": pairs, "seed": 7,
        "tasks": [{"id": TASK, "packet": str(packet), "hidden": str(REPO_ROOT / "hidden" / TASK),
                   "reports": str(tmp / "reports"), "comparison": comparison}],
        "arms": {"control": {"image": "control"},
                 "treatment": {"image": "treatment", "extra_tools": ["traincheck"]}},
        "agent": {"model": model},
        "budget": {"wall_seconds": 600, "tokens_total": 50_000},
        "caps": {"cpu_hours": 3.0},
        "prices": PRICES if prices is None else prices,
    }
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def write_track1(tmp: Path) -> None:
    """Calibration and capability reports for the task: two faults (one detected), one
    healthy run with a false alarm, three contracts (one supported)."""
    folder = tmp / "reports" / TASK
    folder.mkdir(parents=True, exist_ok=True)
    run = {"variant": "x", "config": "cpu-1", "seed": 1, "traced": True, "outcome": "ok",
           "cause": "", "wall_s": 1.0, "ranks": {}}

    def row(variant: str, kind: str, verdict: str, confirmed: bool | None) -> dict[str, Any]:
        oracle = None if confirmed is None else {
            "verdict": "incomplete", "failing_contracts": ["c"], "confirmed": confirmed,
            "source": "validation"}
        return {"variant": variant, "kind": kind, "config": "cpu-1", "seed": 1,
                "oracle": oracle, "run": run, "check_outcome": "ok", "verdict": verdict,
                "collect_s": 1.0}

    calibration = {
        "task": TASK, "command": "harness calibrate", "seed": 1,
        "reference_manifest_sha256": "0" * 64,
        "configs": {"cpu-1": {"config": "cpu-1", "plain_s": 1.0, "cost_ratio": 2.0, "rows": [
            row("baseline", "baseline", "false_alarm", None),
            row("reference", "reference", "clean", None),
            row("fault:off-by-one-ramp", "fault", "detected", True),
            row("fault:scheduler-not-resumed", "fault", "not_detected", True)]}},
        "summary": {"faults_confirmed": 2, "faults_detected": 1, "detected": {},
                    "program_failures": {}, "false_alarms": 1, "controls": 2,
                    "unsupported_contracts": []}}
    (folder / "calibration.json").write_text(json.dumps(calibration))
    cell = {"status": "observed", "evidence": "e"}
    capabilities = {
        "task": TASK, "command": "harness traincheck capabilities", "traincheck_version": "0",
        "probes": {"cpu-1": {"config": "cpu-1", "run": run, "parameter_names": {},
                             "names_equal_across_ranks": True, "cross_rank_equal_pairs": [],
                             "kinds": {"api_events": cell, "gradients": {**cell,
                                                                         "status": "not"}}}},
        "stable_names": True, "stable_names_evidence": "e",
        "contracts": [
            {"contract": "hidden:a", "configurations": ["cpu-1"], "needs": [], "relation": "r",
             "status": "supported_by_learned_rule", "reason": ""},
            {"contract": "hidden:b", "configurations": ["cpu-1"], "needs": [], "relation": "r",
             "status": "missing_instrumentation", "reason": ""},
            {"contract": "hidden:c", "configurations": ["cpu-1"], "needs": [], "relation": "r",
             "status": "missing_relation_support", "reason": ""}]}
    (folder / "capabilities.json").write_text(json.dumps(capabilities))


def write_lock(study_path: Path) -> Frozen:
    """The lock ``harness freeze`` writes, less the images' items (no engine here)."""
    study = load_study(study_path)
    sessions = freeze.locked_sessions(study)
    items = freeze.lock_items(study, study_path.resolve(), sessions, None)
    gate = [GateDecision(task=t.id, rule="detection-demonstrated"
                         if t.comparison == "treatment-vs-control" else "coverage-audit",
                         detail="written by the test", detected=[], confirmed_faults=0,
                         calibration_sha256="absent") for t in study.tasks]
    lock = StudyLock(study=study.name, revision=1, frozen_at="2026-12-04T00:00:00Z",
                     study_file=str(study_path.resolve()), items=items, gate=gate,
                     caps=study.caps, max_attempts=study.matrix.max_attempts, sessions=sessions)
    folder = freeze.locks_dir(study)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rev-1.json").write_text(json.dumps(lock.model_dump(mode="json"), indent=1))
    return freeze.read_lock(folder / "rev-1.json")


@dataclass
class Step:
    """One snapshot-taking call: its tool (a snapshot trigger), the snapshot's blind grade
    (contract -> outcome; None: not graded), and for a traincheck call its violations."""

    trigger: str
    grade: dict[str, str] | None = None
    violations: int = 0
    failed_run: bool = False


@dataclass
class AttemptSpec:
    session: LockedSession
    attempt: int = 1
    outcome: str = "submitted"
    steps: list[Step] = field(default_factory=list)
    final: dict[str, str] | None = field(default_factory=lambda: {"public-tests": "pass"})
    not_run: dict[str, str] = field(default_factory=dict)
    properties: dict[str, dict[str, str]] = field(default_factory=dict)
    tokens: tuple[int, int] = (1000, 200)
    in_frozen_study: bool = True
    lock_sha256: str | None = None
    grade_seconds: float = 12.5
    tools: list[str] = field(default_factory=list)


def _verdict(contracts: dict[str, str], not_run: dict[str, str]) -> str:
    if any(o != "pass" for o in contracts.values()):
        return "incomplete"
    return "complete_on_cpu" if not_run else "complete"


def _grade_report(task: str, contracts: dict[str, str], not_run: dict[str, str],
                  properties: dict[str, dict[str, str]]) -> dict[str, Any]:
    results = [{"id": cid, "kind": "public_tests" if cid == "public-tests" else "hidden_check",
                "statement": "s", "outcome": outcome,
                "evidence": {"properties": properties.get(cid, {})}}
               for cid, outcome in contracts.items()]
    counts = dict.fromkeys(("pass", "fail", "crash", "hang", "flaky", "not_run",
                             "diff_rejected"), 0)
    for outcome in contracts.values():
        counts[outcome] += 1
    return {
        "submission_id": "s" * 32, "task_id": task, "verdict": _verdict(contracts, not_run),
        "contracts": results, "counts": counts,
        "diff": {"sha256": "0" * 64, "size_bytes": 1, "empty": False, "applied": True},
        "restore": {}, "started_at": "t", "finished_at": "t", "duration_s": 1.0,
        "grader_source_sha256": "0" * 64, "baseline_tree_sha256": "0" * 64,
        "hidden_tree_sha256": "0" * 64, "python_version": "3.11", "torch_version": None,
        "seal": {"judge_uid": 0, "candidate_uid": 1000},
        "configurations_not_run": not_run,
        "configurations": {"cpu-1": {"outcome": "pass" if all(
            o == "pass" for o in contracts.values()) else "fail"},
            **{name: {"outcome": "not_run", "reason": why} for name, why in not_run.items()}}}


def _tool_result(call_id: str, name: str, *, ok: bool = True, exit_code: int | None = 0,
                 details: dict[str, Any] | None = None, duration: float = 2.0) -> dict[str, Any]:
    return {"id": call_id, "name": name, "ok": ok, "output": "out", "exit_code": exit_code,
            "timed_out": False, "duration_s": duration, "output_bytes": 3,
            "output_truncated": False, "artifact": None, "artifact_truncated": False,
            "artifact_bytes": 0, "kill": "", "ends_session": name == "submit",
            "details": details or {}, "shown_to_model": "out", "cut_for_model": False}


def write_attempt(runs_root: Path, frozen: Frozen, spec: AttemptSpec) -> Path:
    """One ended attempt of ``spec.session`` under ``frozen``, graded unless ``final`` is None
    (or the outcome is an infrastructure failure, which leaves no diff)."""
    session = spec.session
    folder = runs_root / session.session_id / f"attempt-{spec.attempt}"
    paths = AttemptPaths(root=folder)
    infra = spec.outcome in ("sandbox_lost", "harness_error")
    for tree in (paths.baseline, paths.final):
        tree.mkdir(parents=True)
        (tree / "a.py").write_text("x = 1\n" if tree == paths.final else "")
    paths.snapshots.mkdir()
    diff = f"diff --git a/a.py b/a.py\n+x = 1  # {session.session_id}\n".encode()
    tools = spec.tools or (["bash", "run_candidate", "run_public_tests", "submit"]
                           + (["traincheck"] if session.arm == "treatment" else []))
    tokens_in, tokens_out = spec.tokens
    with TranscriptWriter(paths.transcript, events.validate) as writer:
        writer.append("session_start", {
            "study": "unit", "session": session.session_id, "attempt": spec.attempt,
            "task": session.task, "pair": session.pair, "arm": session.arm,
            "seed": session.seed, "model": {}, "image": "i", "image_id": "sha256:0",
            "in_frozen_study": spec.in_frozen_study, "tools": tools, "system_prompt": "p",
            "budget": {}})
        used_in = used_out = runs = 0
        share = max(1, len(spec.steps))
        for index, step in enumerate(spec.steps, 1):
            used_in += tokens_in // share
            used_out += tokens_out // share
            writer.append("budget", {"tokens_input": used_in, "tokens_output": used_out,
                                     "tokens_total": used_in + used_out})
            call = f"call_{index}"
            name = TOOL_FOR[step.trigger]
            runs += name == "run_candidate"
            writer.append("tool_call", {"id": call, "name": name, "args": {}})
            writer.append("budget", {"tool_calls": index, "candidate_runs": runs})
            snapshot = f"diff --git a/a.py b/a.py\n+x = {index}\n".encode()
            (folder / AttemptPaths.snapshot_diff_name(index)).write_bytes(snapshot)
            writer.append("snapshot", {
                "index": index, "trigger": step.trigger, "call_id": call,
                "diff": AttemptPaths.snapshot_diff_name(index),
                "sha256": hashlib.sha256(snapshot).hexdigest(), "bytes": len(snapshot),
                "files_changed": ["a.py"], "duration_s": 0.1, "paused": True})
            details: dict[str, Any] = {}
            if name == "traincheck":
                details = {"outcome": "violations" if step.violations else "no_new_violations",
                           "new_violations": [{"relation": "ConsistencyRelation",
                                               "rule": f"rule {v}", "ranks": [0]}
                                              for v in range(step.violations)],
                           "diagnostics_s": 30.0, "collect_s": 20.0, "check_s": 7.0}
            writer.append("tool_result", _tool_result(
                call, name, ok=not step.failed_run, exit_code=1 if step.failed_run else 0,
                details=details, duration=30.0 if name == "traincheck" else 2.0))
        if not infra:
            writer.append("diff", {
                "extract": {}, "patch_path": None, "bytes": len(diff), "files_changed": ["a.py"],
                "added": [], "deleted": [], "modified": ["a.py"], "skipped": [],
                "sha256": hashlib.sha256(diff).hexdigest(),
                "final_tree_sha256": tree_sha256(paths.final)})
            paths.diff.write_bytes(diff)
        writer.append("session_end", {"status": "finished", "outcome": spec.outcome,
                                      "usage": {}, "diff": None})
        head = TranscriptHead(events=writer.next_seq, head=writer.last_hash)
    usage = Usage(tokens_input=tokens_in, tokens_output=tokens_out,
                  tokens_total=tokens_in + tokens_out, wall_seconds=120.0 + spec.attempt,
                  cpu_hours=session.cpus * 120.0 / 3600, tool_calls=len(spec.steps),
                  candidate_runs=sum(s.trigger == "run_candidate" for s in spec.steps),
                  compute_seconds={"inference": 10.0, "agent_tools": 5.0, "candidate_runs": 4.0,
                                   "diagnostics": 30.0, "retries": 1.5},
                  harness_seconds=0.5)
    write_record(folder, SessionRecord(
        schema_version=SESSION_SCHEMA_VERSION, study="unit", session_id=session.session_id,
        attempt=spec.attempt, task=session.task, pair=session.pair, arm=session.arm,
        seed=session.seed, model=session.model, in_frozen_study=spec.in_frozen_study,
        study_revision=1, lock_sha256=spec.lock_sha256 or frozen.sha256,
        packet_dir="p", hidden_dir="h", image="i", image_id="sha256:0", harness_pid=1,
        host="h", started_at="2026-12-04T00:00:00+00:00", ended_at="2026-12-04T00:02:00+00:00",
        status="finished", outcome=spec.outcome, transcript=head, usage=usage,
        diff=None if infra else DiffSummary(sha256=hashlib.sha256(diff).hexdigest(),
                                            bytes=len(diff), files_changed=["a.py"])))
    write_manifest(folder)
    if infra or spec.final is None:
        return folder
    grade_dir = paths.grades / "grade-1"
    (grade_dir / "out").mkdir(parents=True)
    (grade_dir / "out" / "grade.json").write_text(json.dumps(
        _grade_report(session.task, spec.final, spec.not_run, spec.properties)))
    (grade_dir / "grader.json").write_text(json.dumps({"duration_s": spec.grade_seconds}))
    write_grade_summary(grade_dir, GradeSummary(
        verdict=_verdict(spec.final, spec.not_run), folder="grades/grade-1",  # type: ignore[arg-type]
        configurations_not_run=spec.not_run))
    graded = [(i, s) for i, s in enumerate(spec.steps, 1) if s.grade is not None]
    if graded:
        entries = []
        for n, (index, step) in enumerate(graded, 1):
            snap_dir = paths.snapshot_grade_dirs / f"grade-{n}"
            snap_dir.mkdir(parents=True)
            (snap_dir / "grader.json").write_text(json.dumps({"duration_s": 3.0}))
            snapshot = (folder / AttemptPaths.snapshot_diff_name(index)).read_bytes()
            assert step.grade is not None
            entries.append(SnapshotGrade(
                index=index, trigger=step.trigger, call_id=f"call_{index}",
                diff_sha256=hashlib.sha256(snapshot).hexdigest(),
                folder=f"grades/snapshots/grade-{n}",
                verdict=_verdict(step.grade, spec.not_run),  # type: ignore[arg-type]
                contracts=step.grade))
        paths.snapshot_grades.write_text(SnapshotGrades(
            graded_at="t", snapshots=entries).model_dump_json(indent=1))
    extend_manifest(folder)
    return folder


def judge(folder: Path, chain: str, category: str) -> None:
    """An auditor's judgement, through the audit's own functions."""
    evidence.propose(folder)
    evidence.judge(folder, chain, category, "tester", "written by the test")
