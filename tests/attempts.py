"""A finished attempt folder written by hand, the way a session writes one (no Docker): for
tests of the commands that read attempts back."""

from __future__ import annotations

import hashlib
from pathlib import Path

from grading.hashing import tree_sha256
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
from harness.records.transcript import TranscriptWriter

DIFF = b"diff --git a/a.py b/a.py\n+x = 1\n"
SNAPSHOT = b"diff --git a/a.py b/a.py\n+x = 0\n"


def finished_attempt(folder: Path, *, graded: bool = False) -> Path:
    """Tree, snapshot, diff, events, record, manifest; with ``graded``, one grading too."""
    paths = AttemptPaths(root=folder)
    for tree in (paths.baseline, paths.final):
        tree.mkdir(parents=True)
        (tree / "a.py").write_text("x = 1\n" if tree == paths.final else "")
    paths.snapshots.mkdir()
    (folder / AttemptPaths.snapshot_diff_name(1)).write_bytes(SNAPSHOT)
    paths.diff.write_bytes(DIFF)
    with TranscriptWriter(paths.transcript, events.validate) as writer:
        writer.append("snapshot", {
            "index": 1, "trigger": "run_candidate", "call_id": "c1",
            "diff": AttemptPaths.snapshot_diff_name(1),
            "sha256": hashlib.sha256(SNAPSHOT).hexdigest(), "bytes": len(SNAPSHOT),
            "files_changed": ["a.py"], "duration_s": 0.1})
        writer.append("diff", {
            "extract": {}, "patch_path": None, "bytes": len(DIFF), "files_changed": ["a.py"],
            "added": [], "deleted": [], "modified": ["a.py"], "skipped": [],
            "sha256": hashlib.sha256(DIFF).hexdigest(),
            "final_tree_sha256": tree_sha256(paths.final)})
        writer.append("session_end", {"status": "finished", "outcome": "submitted",
                                      "usage": {}, "diff": None})
        head = TranscriptHead(events=writer.next_seq, head=writer.last_hash)
    write_record(folder, SessionRecord(
        schema_version=SESSION_SCHEMA_VERSION, study="s", session_id="t-pair1-control",
        attempt=1, task="t", pair=1, arm="control", seed=1, model="scripted:x",
        packet_dir="p", hidden_dir="h", image="i", image_id="sha256:0", harness_pid=1,
        host="h", started_at="2026-12-04T00:00:00+00:00", status="finished",
        outcome="submitted", transcript=head,
        diff=DiffSummary(sha256=hashlib.sha256(DIFF).hexdigest(), bytes=len(DIFF),
                         files_changed=["a.py"])))
    write_manifest(folder)
    if graded:
        grade_dir = paths.grades / "grade-1"
        (grade_dir / "out").mkdir(parents=True)
        (grade_dir / "out" / "grade.json").write_text('{"contracts": []}\n')
        write_grade_summary(grade_dir, GradeSummary(verdict="complete", folder="grades/grade-1"))
        extend_manifest(folder)
    return folder
