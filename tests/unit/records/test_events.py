"""The event models are the one definition writers and readers share."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.records import events
from harness.records.attempt import (
    SESSION_SCHEMA_VERSION,
    SessionRecord,
    atomic_write,
    read_record,
    write_record,
)
from harness.records.doc import DOC_PATH, render
from harness.records.transcript import TranscriptWriter, read_events


def test_the_writer_refuses_an_unknown_kind_or_a_field_no_reader_knows(tmp_path: Path) -> None:
    with TranscriptWriter(tmp_path / "t.jsonl", events.validate) as transcript:
        transcript.append("sandbox_removed", {"container": "c"})
        with pytest.raises(ValueError, match="unknown transcript event kind"):
            transcript.append("made_up", {})
        with pytest.raises(ValueError, match="extra"):
            transcript.append("sandbox_removed", {"container": "c", "note": "x"})
        with pytest.raises(ValueError, match="container"):
            transcript.append("sandbox_removed", {})
    written = read_events(tmp_path / "t.jsonl")
    assert [e.kind for e in written] == ["sandbox_removed"]  # nothing refused was written


def test_a_long_string_is_read_back_as_a_blob_reference(tmp_path: Path) -> None:
    with TranscriptWriter(tmp_path / "t.jsonl", events.validate) as transcript:
        transcript.append("sandbox_lost", {"error": "short"})
        transcript.append("error", {"error": "x" * 200_000, "traceback": None})
    lost, error = (events.parse(e) for e in read_events(tmp_path / "t.jsonl"))
    assert isinstance(lost.data, events.SandboxLost) and lost.data.error == "short"
    assert isinstance(error.data, events.SessionError)
    assert isinstance(error.data.error, events.TextBlob) and error.data.error.size == 200_000


def test_a_reader_names_the_event_that_does_not_fit(tmp_path: Path) -> None:
    with TranscriptWriter(tmp_path / "t.jsonl") as transcript:  # no schema: as a forger would
        transcript.append("tool_call", {"id": "c1", "name": "bash"})
    with pytest.raises(HarnessError, match=r"event 0 \(tool_call\) does not match"):
        events.parse(read_events(tmp_path / "t.jsonl")[0])


def test_a_record_never_holds_an_unclassified_outcome(tmp_path: Path) -> None:
    record = SessionRecord(
        schema_version=SESSION_SCHEMA_VERSION, study="s", session_id="s-1",
        attempt=1, task="t", pair=1, arm="control", seed=1, model="scripted:x",
        packet_dir="p", hidden_dir="h", image="i", image_id="sha256:0", harness_pid=1,
        host="h", started_at="now", outcome="budget_exhausted:tool_calls")
    write_record(tmp_path, record)
    assert read_record(tmp_path).outcome == "budget_exhausted:tool_calls"
    record.outcome = "something_new"  # assignment is not validated; the write is
    with pytest.raises(ValueError, match="unclassified session outcome"):
        write_record(tmp_path, record)
    assert read_record(tmp_path).outcome == "budget_exhausted:tool_calls"


def test_docs_records_md_is_generated_from_the_models() -> None:
    assert DOC_PATH.read_text() == render(), "run `python -m harness.records.doc`"
    for kind in events.EVENT_DATA:
        assert f"### `{kind}`" in DOC_PATH.read_text()


def test_a_record_written_once_is_never_replaced_by_a_second_writer(tmp_path: Path) -> None:
    """Two gradings of one attempt's snapshots at once both find no snapshots.json; the one
    that ends second is refused by name, and the first one's file stays as it was."""
    target = tmp_path / "snapshots.json"
    atomic_write(target, b"first\n", create_only=True)
    with pytest.raises(HarnessError, match="written meanwhile by another run"):
        atomic_write(target, b"second\n", create_only=True)
    assert target.read_bytes() == b"first\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snapshots.json"]  # no temp left
