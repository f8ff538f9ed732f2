"""Which recorded gradings may be copied: only a finished one, read as hostile.

The copy itself, from a real grading of a real session, is tests/integration/test_snapshots.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.oracle.reuse import GradingInputs, recorded_inputs

INPUTS = {"task_id": "tiny-regression", "diff_sha256": "d" * 64,
          "baseline_tree_sha256": "b" * 64, "hidden_tree_sha256": "h" * 64,
          "grader_source_sha256": "g" * 64}


def _grader_json(folder: Path, **changes: Any) -> Path:
    record: dict[str, Any] = {
        "grader_image_id": "sha256:" + "1" * 64, "submission_id": "0" * 32,
        "graded_at": "2026-12-05T00:00:00Z", "expected": {"submission_id": "0" * 32, **INPUTS},
        "exit_code": 0, "timed_out": False, "duration_s": 12.5, "packet_yaml_sha256": "p" * 64}
    record.update(changes)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "grader.json").write_text(json.dumps(record))
    return folder


def test_a_finished_grading_names_its_inputs_without_the_submission_id(tmp_path: Path) -> None:
    got = recorded_inputs(_grader_json(tmp_path / "ok"))
    assert got == GradingInputs(grader_image_id="sha256:" + "1" * 64,
                                packet_yaml_sha256="p" * 64, **INPUTS)


def test_a_grading_that_did_not_end_in_a_grade_is_never_a_source(tmp_path: Path) -> None:
    for name, changes in {
        "grader-error": {"error": "the grader timed out; its output is not used"},
        "exit-1": {"exit_code": 1},
        "timed-out": {"timed_out": True},
        "killed-before-the-end": {"exit_code": None, "timed_out": None},
        "no-image": {"grader_image_id": None},
        "no-packet-digest": {"packet_yaml_sha256": None},
        "inputs-missing": {"expected": {"submission_id": "0" * 32, "task_id": "x"}},
        "inputs-not-a-map": {"expected": ["task_id"]},
    }.items():
        assert recorded_inputs(_grader_json(tmp_path / name, **changes)) is None, name


def test_a_record_that_is_not_the_hosts_is_read_as_nothing(tmp_path: Path) -> None:
    cases = {"not-json": b"{\"exit_code\": 0", "a-list": b"[]", "not-utf8": b"\xff\xfe",
             "huge": b" " * (64 * 1024 + 1) + b"{}"}
    for name, raw in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "grader.json").write_bytes(raw)
        assert recorded_inputs(folder) is None, name
    (tmp_path / "missing").mkdir()
    assert recorded_inputs(tmp_path / "missing") is None
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "grader.json").symlink_to(_grader_json(tmp_path / "real") / "grader.json")
    assert recorded_inputs(linked) is None
    folder = tmp_path / "a-folder"
    (folder / "grader.json").mkdir(parents=True)
    assert recorded_inputs(folder) is None
