"""Tests for the hash-chained transcript: writing, reopening, crash recovery, tamper detection."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import harness.records.transcript as transcript_module
from harness.errors import HarnessError
from harness.records.transcript import (
    GENESIS_HASH,
    BlobRef,
    Event,
    TranscriptWriter,
    blob_path,
    canonical_json,
    event_hash,
    read_blob,
    read_events,
    read_text,
    verify,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
KINDS = [
    "session_start",
    "model_request",
    "tool_call",
    "tool_result",
    "budget",
    "tool_call",
    "tool_result",
    "error",
    "model_request",
    "session_end",
]


class _Usage(BaseModel):
    input_tokens: int
    output_tokens: int


def make_transcript(tmp_path: Path, n: int = len(KINDS)) -> Path:
    """A finished transcript with varied kinds and data (nested, unicode, numbers)."""
    path = tmp_path / "transcript.jsonl"
    with TranscriptWriter(path) as writer:
        for i in range(n):
            writer.append(
                KINDS[i % len(KINDS)],
                {
                    "index": i,
                    "text": f"step {i}: héllo wörld",
                    "nested": {"ok": True, "ratio": 0.5, "items": [1, 2, None]},
                },
            )
    return path


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(lines))


def set_byte(path: Path, offset: int, value: int) -> None:
    raw = bytearray(path.read_bytes())
    assert raw[offset] != value
    raw[offset] = value
    path.write_bytes(bytes(raw))


def line_offset(path: Path, index: int) -> int:
    return sum(len(line) for line in lines_of(path)[:index])


def chain_line(seq: int, kind: str, data: dict[str, Any], prev_hash: str) -> bytes:
    """A well-formed line built by hand, for chains the writer would never produce."""
    ts = "2024-01-01T00:00:00.000000Z"
    event = Event(
        seq=seq,
        ts=ts,
        kind=kind,
        data=data,
        prev_hash=prev_hash,
        hash=event_hash(seq, ts, kind, data, prev_hash),
    )
    return event.line()


# -- writing and reading -------------------------------------------------------------------------


def test_append_read_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "run" / "transcript.jsonl"
    with TranscriptWriter(path) as writer:
        assert writer.next_seq == 0
        assert writer.last_hash == GENESIS_HASH
        written = [
            writer.append("session_start", {"task": "t1", "workdir": Path("/work/x")}),
            writer.append("budget", {"usage": _Usage(input_tokens=3, output_tokens=4)}),
            writer.append("tool_call", {"argv": ("ls", "-l"), "env": {"A": "ü"}}),
            writer.append("session_end"),
        ]
        assert writer.next_seq == 4
        assert writer.last_hash == written[-1].hash

    assert read_events(path) == written
    assert [e.seq for e in written] == [0, 1, 2, 3]
    assert written[0].prev_hash == GENESIS_HASH
    for before, after in itertools.pairwise(written):
        assert after.prev_hash == before.hash
    for event in written:
        assert event.hash == event.computed_hash()
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", event.ts)
    # Models, paths and tuples are stored as plain JSON.
    assert written[0].data["workdir"] == "/work/x"
    assert written[1].data["usage"] == {"input_tokens": 3, "output_tokens": 4}
    assert written[2].data["argv"] == ["ls", "-l"]
    assert written[3].data == {}
    # Each line is exactly the canonical JSON of the event.
    for line, event in zip(lines_of(path), written, strict=True):
        assert line == canonical_json(event.model_dump()) + b"\n"


def test_canonical_json_is_compact_sorted_and_utf8() -> None:
    assert canonical_json({"b": 1, "a": ["é", 1.5]}) == '{"a":["é",1.5],"b":1}'.encode()
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_append_rejects_unserialisable_data(tmp_path: Path) -> None:
    with TranscriptWriter(tmp_path / "t.jsonl") as writer:
        with pytest.raises(TypeError):
            writer.append("x", {"s": {1, 2}})
        with pytest.raises(TypeError):
            writer.append("x", {"d": {1: "int key"}})
        with pytest.raises(ValueError):
            writer.append("x", {"f": float("inf")})
        # Failed appends consume nothing.
        assert writer.next_seq == 0
        writer.append("ok")
    assert verify(tmp_path / "t.jsonl").events == 1


def test_append_after_close_fails(tmp_path: Path) -> None:
    writer = TranscriptWriter(tmp_path / "t.jsonl")
    writer.close()
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.append("late")


def test_read_events_skips_partial_tail_and_rejects_bad_lines(tmp_path: Path) -> None:
    path = make_transcript(tmp_path, 3)
    with path.open("ab") as fh:
        fh.write(b'{"seq":3,"ts":"20')
    assert [e.seq for e in read_events(path)] == [0, 1, 2]

    lines = lines_of(path)
    lines[1] = b"not json\n"
    write_lines(path, lines)
    with pytest.raises(HarnessError, match="line 2"):
        read_events(path)


# -- verify: clean transcripts -------------------------------------------------------------------


def test_verify_ok(tmp_path: Path) -> None:
    path = make_transcript(tmp_path)
    report = verify(path)
    assert report.ok, report.error
    assert report.events == len(KINDS)
    assert report.error is None
    assert report.bad_seq is None
    assert not report.partial_tail
    assert report.last_hash == read_events(path)[-1].hash


def test_verify_empty_file_is_ok(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"")
    report = verify(path)
    assert report.ok
    assert report.events == 0
    assert report.last_hash == GENESIS_HASH


def test_verify_missing_file_is_a_harness_error(tmp_path: Path) -> None:
    with pytest.raises(HarnessError) as info:
        verify(tmp_path / "nope.jsonl")
    assert "does not exist" in info.value.problem
    assert info.value.fix


# -- verify: tampering ---------------------------------------------------------------------------


def _field_value_offset(line: bytes, field: str, needle: bytes = b"") -> int:
    """Offset inside ``line`` of the first byte of ``field``'s value (or of needle after it)."""
    start = line.index(f'"{field}":'.encode()) + len(field) + 3
    if needle:
        return line.index(needle, start)
    return start + 1 if line[start : start + 1] == b'"' else start


@pytest.mark.parametrize(
    ("field", "needle", "expected"),
    [
        ("data", b"step", "hash mismatch (content edited)"),
        ("data", b"ratio", "hash mismatch (content edited)"),
        ("kind", b"", "hash mismatch (content edited)"),
        ("ts", b"", "hash mismatch (content edited)"),
        ("hash", b"", "hash mismatch (stored hash edited)"),
        ("prev_hash", b"", "prev_hash does not match event 4"),
    ],
)
def test_one_edited_byte_names_the_event(
    tmp_path: Path, field: str, needle: bytes, expected: str
) -> None:
    path = make_transcript(tmp_path)
    line = lines_of(path)[5]
    pos = _field_value_offset(line, field, needle)
    old = line[pos]
    # Swap for another character of the same class so the line stays valid JSON.
    new = ord("3") if old in b"0123456789abcdef" and old != ord("3") else ord("5")
    if field in ("data", "kind") and chr(old).isalpha():
        new = ord("X")
    set_byte(path, line_offset(path, 5) + pos, new)

    report = verify(path)
    assert not report.ok
    assert report.bad_seq == 5
    assert report.events == 5
    kind = read_events(path)[5].kind
    assert f"event 5 ({kind}) at line 6" in (report.error or "")
    assert expected in (report.error or "")
    assert "\n" not in (report.error or "")


def test_edited_hash_of_last_event_is_detected(tmp_path: Path) -> None:
    path = make_transcript(tmp_path)
    line = lines_of(path)[-1]
    pos = _field_value_offset(line, "hash")
    set_byte(
        path, line_offset(path, len(KINDS) - 1) + pos, ord("a") if line[pos] != ord("a") else 98
    )
    report = verify(path)
    assert not report.ok
    assert report.bad_seq == len(KINDS) - 1
    assert "hash mismatch (content or stored hash edited)" in (report.error or "")


def test_every_single_byte_edit_of_a_line_is_detected(tmp_path: Path) -> None:
    path = make_transcript(tmp_path)
    pristine = path.read_bytes()
    start = line_offset(path, 5)
    length = len(lines_of(path)[5])  # includes the newline
    for pos in range(start, start + length):
        set_byte(path, pos, pristine[pos] ^ 0x01)
        report = verify(path)
        assert not report.ok, f"edit at byte {pos - start} of line 6 went unnoticed"
        assert "line 6" in (report.error or ""), report.error
        assert report.events <= 5
        path.write_bytes(pristine)


def test_deleted_line_is_detected(tmp_path: Path) -> None:
    path = make_transcript(tmp_path)
    lines = lines_of(path)
    write_lines(path, lines[:4] + lines[5:])
    report = verify(path)
    assert not report.ok
    assert report.bad_seq == 5
    assert report.events == 4
    assert "expected seq 4" in (report.error or "")
    assert "event 5 (tool_call) at line 5" in (report.error or "")


def test_deleted_first_line_is_detected(tmp_path: Path) -> None:
    path = make_transcript(tmp_path)
    write_lines(path, lines_of(path)[1:])
    report = verify(path)
    assert not report.ok
    assert report.bad_seq == 1
    assert "expected seq 0" in (report.error or "")


def test_deleted_last_line_needs_the_recorded_head(tmp_path: Path) -> None:
    path = make_transcript(tmp_path)
    head = verify(path).last_hash
    write_lines(path, lines_of(path)[:-1])
    # The chain alone cannot see a cut-off end ...
    assert verify(path).ok
    # ... but the head recorded at close time can.
    report = verify(path, expect_last_hash=head)
    assert not report.ok
    assert "cut off" in (report.error or "")
    assert verify(make_transcript(tmp_path / "other"), expect_last_hash=None).ok


def test_swapped_lines_are_detected(tmp_path: Path) -> None:
    path = make_transcript(tmp_path)
    lines = lines_of(path)
    lines[3], lines[4] = lines[4], lines[3]
    write_lines(path, lines)
    report = verify(path)
    assert not report.ok
    assert report.bad_seq == 4
    assert report.events == 3
    assert "expected seq 3" in (report.error or "")


def test_edit_with_recomputed_hash_breaks_the_next_link(tmp_path: Path) -> None:
    path = make_transcript(tmp_path)
    lines = lines_of(path)
    obj = json.loads(lines[5])
    obj["data"]["text"] = "forged"
    obj["hash"] = event_hash(obj["seq"], obj["ts"], obj["kind"], obj["data"], obj["prev_hash"])
    lines[5] = canonical_json(obj) + b"\n"
    write_lines(path, lines)
    report = verify(path)
    assert not report.ok
    assert report.bad_seq == 6
    assert "prev_hash does not match event 5" in (report.error or "")


def test_wrong_genesis_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    first = chain_line(0, "session_start", {}, "f" * 64)
    second = chain_line(1, "session_end", {}, json.loads(first)["hash"])
    write_lines(path, [first, second])
    report = verify(path)
    assert not report.ok
    assert report.bad_seq == 0
    assert "genesis" in (report.error or "")


def test_line_that_is_not_json_names_the_line(tmp_path: Path) -> None:
    path = make_transcript(tmp_path)
    lines = lines_of(path)
    lines[2] = b"{garbage\n"
    write_lines(path, lines)
    report = verify(path)
    assert not report.ok
    assert report.bad_seq is None
    assert report.events == 2
    assert (report.error or "").startswith("line 3: not valid JSON")


def test_json_that_is_not_an_event_is_rejected(tmp_path: Path) -> None:
    path = make_transcript(tmp_path)
    lines = lines_of(path)
    obj = json.loads(lines[2])
    obj["extra"] = 1
    lines[2] = canonical_json(obj) + b"\n"
    lines[3] = b"[1, 2, 3]\n"
    write_lines(path, lines)
    report = verify(path)
    assert not report.ok
    assert report.bad_seq == 2
    assert "event 2 (tool_call) at line 3: not a valid event" in (report.error or "")

    lines[2] = b'{"seq": "2"}\n'  # a string seq must not be coerced
    write_lines(path, lines)
    report = verify(path)
    assert (report.error or "").startswith("line 3: not a valid event")
    assert report.bad_seq is None


def test_nan_in_a_line_is_rejected_not_crashed_on(tmp_path: Path) -> None:
    path = make_transcript(tmp_path, 3)
    lines = lines_of(path)
    lines[1] = lines[1].replace(b'"ratio":0.5', b'"ratio":NaN')
    write_lines(path, lines)
    report = verify(path)
    assert not report.ok
    assert (report.error or "").startswith("line 2: not valid JSON")


def test_non_canonical_line_is_detected(tmp_path: Path) -> None:
    path = make_transcript(tmp_path)
    lines = lines_of(path)
    # Same values, same hash, different bytes.
    lines[3] = json.dumps(json.loads(lines[3]), sort_keys=True, ensure_ascii=False).encode() + b"\n"
    write_lines(path, lines)
    report = verify(path)
    assert not report.ok
    assert report.bad_seq == 3
    assert "canonical" in (report.error or "")


# -- blobs ---------------------------------------------------------------------------------------


def _blob_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "blobs").iterdir())


def test_blob_is_stored_once_and_verifies(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    content = b"x" * 100_000 + "ünïcode".encode()
    with TranscriptWriter(path) as writer:
        ref = writer.store_blob(content)
        assert writer.store_blob(content) == ref
        other = writer.store_blob(b"")
        writer.append("tool_result", {"stdout": ref, "stderr": other})
        writer.append("tool_result", {"outputs": [{"blob": ref.blob, "size": ref.size}]})
        writer.append("model_request", {"body": {"blob": ref.blob, "size": ref.size, "gz": False}})
    assert isinstance(ref, BlobRef)
    assert ref.size == len(content)
    assert [p.name for p in _blob_files(tmp_path)] == sorted([ref.blob, other.blob])
    assert read_blob(path, ref) == content
    assert blob_path(path, ref).stat().st_mode & stat.S_IWUSR == 0  # stored read-only
    report = verify(path)
    assert report.ok, report.error
    assert report.events == 3


def _transcript_with_blob(tmp_path: Path) -> tuple[Path, BlobRef]:
    path = tmp_path / "t.jsonl"
    with TranscriptWriter(path) as writer:
        writer.append("session_start")
        ref = writer.store_blob(b"the tool printed this\n" * 50)
        writer.append("tool_result", {"result": {"exit": 0, "stdout": ref}})
        writer.append("session_end")
    return path, ref


def test_tampered_blob_is_detected(tmp_path: Path) -> None:
    path, ref = _transcript_with_blob(tmp_path)
    blob = blob_path(path, ref)
    os.chmod(blob, 0o644)
    raw = bytearray(blob.read_bytes())
    raw[10] ^= 0x20
    blob.write_bytes(bytes(raw))
    report = verify(path)
    assert not report.ok
    assert report.bad_seq == 1
    assert report.events == 1
    assert "event 1 (tool_result) at line 2" in (report.error or "")
    assert f"blob {ref.blob} content does not match its hash" in (report.error or "")


def test_missing_blob_is_detected(tmp_path: Path) -> None:
    path, ref = _transcript_with_blob(tmp_path)
    blob_path(path, ref).unlink()
    report = verify(path)
    assert not report.ok
    assert report.bad_seq == 1
    assert f"blob {ref.blob} is missing" in (report.error or "")
    with pytest.raises(HarnessError, match="missing"):
        read_blob(path, ref)


def test_blob_with_wrong_size_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TranscriptWriter(path) as writer:
        ref = writer.store_blob(b"12345")
        writer.append("tool_result", {"stdout": {"blob": ref.blob, "size": 6}})
    report = verify(path)
    assert not report.ok
    assert "has 5 bytes but the event records 6" in (report.error or "")


def test_blob_key_with_extra_keys_is_still_checked(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TranscriptWriter(path) as writer:
        writer.append("tool_result", {"stdout": {"blob": "ab" * 32, "truncated": True}})
    report = verify(path)
    assert not report.ok
    assert "is missing" in (report.error or "")


def test_exact_blob_ref_with_bad_name_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TranscriptWriter(path) as writer:
        writer.append("tool_result", {"stdout": {"blob": "../../etc/passwd", "size": 1}})
    report = verify(path)
    assert not report.ok
    assert "invalid blob reference" in (report.error or "")


# -- reopening and crash recovery ----------------------------------------------------------------


def test_reopen_continues_the_chain(tmp_path: Path) -> None:
    path = make_transcript(tmp_path, 3)
    last = read_events(path)[-1]
    with TranscriptWriter(path) as writer:
        assert writer.next_seq == 3
        assert writer.last_hash == last.hash
        event = writer.append("session_interrupted", {"signal": "SIGKILL"})
    assert event.seq == 3
    assert event.prev_hash == last.hash
    report = verify(path)
    assert report.ok, report.error
    assert report.events == 4


def test_second_writer_on_an_open_transcript_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TranscriptWriter(path) as writer:
        writer.append("session_start")
        with pytest.raises(HarnessError, match="already being written"):
            TranscriptWriter(path)
        writer.append("session_end")
    assert verify(path).events == 2


def test_reopen_refuses_a_damaged_last_event(tmp_path: Path) -> None:
    path = make_transcript(tmp_path, 3)
    lines = lines_of(path)
    lines[-1] = lines[-1].replace(b"step 2", b"step 9")
    write_lines(path, lines)
    with pytest.raises(HarnessError, match="damaged"):
        TranscriptWriter(path)


def test_partial_tail_is_reported_then_recovered_into_a_blob(tmp_path: Path) -> None:
    path = make_transcript(tmp_path, 4)
    complete_size = path.stat().st_size
    # What a kill in the middle of writing event 4 leaves behind.
    half_line = chain_line(4, "tool_call", {"cmd": "pytest"}, read_events(path)[-1].hash)[:37]
    with path.open("ab") as fh:
        fh.write(half_line)

    report = verify(path)
    assert report.ok, report.error
    assert report.partial_tail
    assert report.events == 4

    with TranscriptWriter(path) as writer:
        assert writer.next_seq == 5
        writer.append("session_interrupted")

    events = read_events(path)
    recovered = events[4]
    assert recovered.kind == "partial_tail_recovered"
    assert recovered.prev_hash == events[3].hash
    assert recovered.data["offset"] == complete_size
    ref = BlobRef.model_validate(recovered.data["tail"])
    assert read_blob(path, ref) == half_line
    assert events[5].kind == "session_interrupted"
    report = verify(path)
    assert report.ok, report.error
    assert not report.partial_tail
    assert report.events == 6


def test_file_with_only_a_partial_line_is_recovered(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"seq":0,"ts":"2024')
    assert verify(path).partial_tail
    with TranscriptWriter(path) as writer:
        assert writer.next_seq == 1
    events = read_events(path)
    assert [e.kind for e in events] == ["partial_tail_recovered"]
    assert events[0].prev_hash == GENESIS_HASH
    assert verify(path).ok


_CHILD_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from harness.records.transcript import TranscriptWriter

    writer = TranscriptWriter(Path(sys.argv[1]))
    writer.append("session_start", {"pid": 0})
    i = 0
    while True:
        i += 1
        ref = writer.store_blob(f"output {i}\\n".encode() * 200)
        writer.append("tool_result", {"i": i, "stdout": ref, "pad": "p" * (i % 5000)})
    """
)


def test_sigkilled_writer_leaves_a_verifiable_transcript(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    script = tmp_path / "child.py"
    script.write_text(_CHILD_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen([sys.executable, str(script), str(path)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not (path.exists() and path.read_bytes().count(b"\n") >= 30):
            assert child.poll() is None, "child writer exited early"
            assert time.monotonic() < deadline, "child writer made no progress"
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    report = verify(path)
    assert report.ok, report.error
    assert report.events >= 30
    written = report.events

    # The cleanup path: reopen (lock was released by the kill) and record the interruption.
    with TranscriptWriter(path) as writer:
        writer.append("session_interrupted", {"reason": "harness killed"})
    final = verify(path)
    assert final.ok, final.error
    assert not final.partial_tail
    expected = written + (2 if report.partial_tail else 1)
    assert final.events == expected
    assert read_events(path)[-1].kind == "session_interrupted"


# -- threads -------------------------------------------------------------------------------------


def test_concurrent_appends_keep_a_valid_chain(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    per_thread = 150
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def worker(name: str, writer: TranscriptWriter) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                ref = writer.store_blob(f"{i % 10}".encode())  # shared content on purpose
                writer.append("tool_result", {"thread": name, "i": i, "out": ref})
        except BaseException as exc:
            errors.append(exc)

    with TranscriptWriter(path) as writer:
        threads = [threading.Thread(target=worker, args=(n, writer)) for n in ("main", "watchdog")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors

    report = verify(path)
    assert report.ok, report.error
    assert report.events == 2 * per_thread
    events = read_events(path)
    for name in ("main", "watchdog"):
        assert [e.data["i"] for e in events if e.data["thread"] == name] == list(range(per_thread))
    assert len(_blob_files(tmp_path)) == 10


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_reopen_scans_back_across_read_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    # Small chunks force the backwards scan for the last complete line to take many steps.
    monkeypatch.setattr(transcript_module, "_READ_CHUNK", chunk)
    path = make_transcript(tmp_path, 5)
    with path.open("ab") as fh:
        fh.write(b'{"seq":5,"ts":"20')
    with TranscriptWriter(path) as writer:
        assert writer.next_seq == 6
    report = verify(path)
    assert report.ok, report.error
    assert report.events == 6


def test_any_string_is_kept_exactly_and_long_ones_become_blobs(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    name = os.fsdecode(b"caf\xe9-\xff.txt")  # a file name that is not UTF-8
    big = "\u00e9" * 50_000 + "\ud800"  # over 64 KiB of UTF-8, with a lone surrogate
    with TranscriptWriter(path) as writer:
        written = writer.append("tool_call", {"name": name, "arg": "echo \ud800", "big": big})
    raw = path.read_bytes()
    raw.decode("utf-8")  # the line is valid UTF-8: the surrogates are escaped
    assert b"\\udcff" in raw and b"\\ud800" in raw and len(raw) < 1000
    assert verify(path).ok
    (event,) = read_events(path)
    assert event == written
    assert event.data["name"] == name and event.data["arg"] == "echo \ud800"
    assert event.data["big"].keys() == {"blob", "size", "text"}
    assert read_text(path, event.data)["big"] == big
    read_blob(path, event.data["big"]["blob"])  # the blob is there and verified
