"""Append-only, hash-chained JSONL transcript of one agent session, plus its verifier.

Each line is the canonical JSON of one :class:`Event`. Every event carries the hash of the one
before it, so editing, dropping or reordering any line breaks the chain at that line. Large
data goes to ``<dir>/blobs/<sha256>`` and events refer to it with a :class:`BlobRef`: a partial
line salvaged on reopening, and every string of an event over ``INLINE_TEXT_BYTES`` (a long
output, a model's 10 MB tool argument), which becomes ``{"blob", "size", "text": "utf-8"}``.
The verifier re-hashes every referenced blob. Strings are kept exactly, lone surrogates
included (:mod:`harness.text`).

A hash chain cannot tell that events were cut off the *end*; callers that need that record
:attr:`TranscriptWriter.last_hash` somewhere else and pass it to :func:`verify` as
``expect_last_hash``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator
from datetime import date, datetime
from pathlib import Path, PurePath
from types import TracebackType
from typing import Any, BinaryIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import HarnessError
from harness.records.attempt import BLOB_DIR
from harness.records.clock import utc_timestamp
from harness.text import json_dumps

GENESIS_HASH = "0" * 64
# A string longer than this (UTF-8 bytes) is stored as a blob; the same text stored twice (a
# tool argument in the response, the call and the next request) is one file.
INLINE_TEXT_BYTES = 64 * 1024
TEXT_BLOB_ENCODING = "utf-8"

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX64_PATTERN = r"^[0-9a-f]{64}$"
_READ_CHUNK = 1 << 16


def canonical_json(obj: Any) -> bytes:
    """The one byte encoding that is hashed and written; any other encoding is a tamper."""
    return json_dumps(obj, sort_keys=True, compact=True).encode("utf-8")


def event_hash(seq: int, ts: str, kind: str, data: dict[str, Any], prev_hash: str) -> str:
    """sha256 hex of the canonical JSON of an event's content (everything but its own hash)."""
    content = {"seq": seq, "ts": ts, "kind": kind, "data": data, "prev_hash": prev_hash}
    return hashlib.sha256(canonical_json(content)).hexdigest()


class Event(BaseModel):
    """One transcript line."""

    # Strict + forbid: a tampered line must not be quietly coerced into a valid-looking event.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    seq: int = Field(ge=0)
    ts: str
    kind: str = Field(min_length=1)
    data: dict[str, Any]
    prev_hash: str = Field(pattern=_HEX64_PATTERN)
    hash: str = Field(pattern=_HEX64_PATTERN)

    def computed_hash(self) -> str:
        """The hash this event's content should have."""
        return event_hash(self.seq, self.ts, self.kind, self.data, self.prev_hash)

    def line(self) -> bytes:
        """The exact bytes of this event's JSONL line, newline included."""
        return canonical_json(self.model_dump(mode="json")) + b"\n"


class BlobRef(BaseModel):
    """How an event refers to a large output stored beside the transcript."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    blob: str = Field(pattern=_HEX64_PATTERN)
    size: int = Field(ge=0)


class VerifyReport(BaseModel):
    """Outcome of :func:`verify`."""

    ok: bool
    events: int
    error: str | None = None
    bad_seq: int | None = None
    partial_tail: bool = False
    # Head of the verified prefix, so a caller can anchor it elsewhere (see module docstring).
    last_hash: str = GENESIS_HASH


def blob_dir(transcript_path: Path) -> Path:
    """Where the blobs of the transcript at ``transcript_path`` live."""
    return transcript_path.parent / BLOB_DIR


def blob_path(transcript_path: Path, ref: BlobRef | str) -> Path:
    """The file holding a blob referenced from the transcript at ``transcript_path``."""
    name = ref.blob if isinstance(ref, BlobRef) else ref
    if not _HEX64.match(name):
        raise ValueError(f"not a blob name (sha256 hex): {name!r}")
    return blob_dir(transcript_path) / name


def read_blob(transcript_path: Path, ref: BlobRef | str) -> bytes:
    """The content of a blob; a HarnessError if it is missing."""
    path = blob_path(transcript_path, ref)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise HarnessError(
            f"blob {path.name} referenced by transcript {transcript_path} is missing",
            "restore the blobs/ folder that was next to the transcript",
        ) from None


def read_text(transcript_path: Path, value: Any) -> Any:
    """``value`` with every text blob reference in it replaced by the string it stands for."""
    if isinstance(value, dict):
        if value.keys() == {"blob", "size", "text"}:
            return read_blob(transcript_path, value["blob"]).decode(TEXT_BLOB_ENCODING,
                                                                   "surrogatepass")
        return {key: read_text(transcript_path, item) for key, item in value.items()}
    if isinstance(value, list):
        return [read_text(transcript_path, item) for item in value]
    return value


def _to_jsonable(value: Any) -> Any:
    """Convert models and paths so that callers can pass them straight into ``data``."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            # json.dumps would stringify int keys, and sort_keys fails on mixed keys: refuse early.
            if not isinstance(key, str):
                raise TypeError(f"transcript data keys must be str, got {key!r}")
            out[key] = _to_jsonable(item)
        return out
    if isinstance(value, list | tuple):
        return [_to_jsonable(item) for item in value]
    return value


def _fsync_dir(path: Path) -> None:
    """Make a created or renamed directory entry durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _last_complete_line(fd: int, size: int) -> tuple[int, bytes | None]:
    """Return (length of the complete-lines prefix, last complete line without its newline).

    Scans backwards in growing chunks so reopening a large transcript does not read all of it.
    """
    pos = size
    buf = b""
    chunk = _READ_CHUNK
    while True:
        step = min(chunk, pos)
        pos -= step
        buf = os.pread(fd, step, pos) + buf
        chunk *= 2
        end = buf.rfind(b"\n")
        if end == -1:
            if pos == 0:
                return 0, None
            continue
        start = buf.rfind(b"\n", 0, end)
        if start == -1 and pos > 0:
            continue
        return pos + end + 1, buf[start + 1 : end]


class TranscriptWriter:
    """Appends events to one transcript; safe to share between threads of one process.

    Holds an exclusive ``flock`` on the file while open, so a cleanup command cannot fork the
    chain while the harness that owns the transcript is still alive (a SIGKILL releases it).
    """

    def __init__(self, path: Path,
                 validate: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        # ``validate`` checks each event's kind and data before it is written (the session
        # passes harness.records.events.validate; the chain itself does not depend on any schema).
        self.path = Path(path)
        self._validate = validate
        # Readers of the live session (a progress line): told of each event once it is durable.
        self._watchers: list[Callable[[Event], None]] = []
        self.blob_dir = blob_dir(self.path)
        self._lock = threading.Lock()
        self._next_seq = 0
        self._last_hash = GENESIS_HASH
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(
                self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
            )
        except OSError as exc:
            raise HarnessError(
                f"cannot open transcript {self.path}: {exc.strerror}",
                "check that the run directory exists and is writable",
            ) from exc
        try:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise HarnessError(
                    f"transcript {self.path} is already being written by another writer",
                    "wait for that harness process to finish, or stop it first",
                ) from None
            _fsync_dir(self.path.parent)
            self._size = os.fstat(self._fd).st_size
            self._resume()
        except BaseException:
            self._release()
            raise

    # -- state -----------------------------------------------------------------------------

    @property
    def last_hash(self) -> str:
        """Hash of the last event written (GENESIS_HASH before the first)."""
        with self._lock:
            return self._last_hash

    @property
    def next_seq(self) -> int:
        """The seq the next appended event will get."""
        with self._lock:
            return self._next_seq

    def _resume(self) -> None:
        """Continue the chain of an existing file, salvaging a partial trailing line."""
        assert self._fd is not None
        if self._size == 0:
            return
        complete_len, last_line = _last_complete_line(self._fd, self._size)
        if last_line is not None:
            last = self._parse_resume_line(last_line)
            self._next_seq = last.seq + 1
            self._last_hash = last.hash
        if complete_len < self._size:
            tail = os.pread(self._fd, self._size - complete_len, complete_len)
            # Blob first, truncate second: a crash in between leaves a copy, never a loss.
            ref = self.store_blob(tail)
            os.ftruncate(self._fd, complete_len)
            os.fsync(self._fd)
            self._size = complete_len
            self.append(
                "partial_tail_recovered",
                {"tail": ref, "offset": complete_len, "reason": "incomplete last line"},
            )

    def _parse_resume_line(self, raw: bytes) -> Event:
        event: Event | None
        try:
            event = Event.model_validate(_loads(raw))
        except (ValueError, RecursionError):  # ValidationError is a ValueError
            event = None
        if event is None or event.computed_hash() != event.hash:
            raise HarnessError(
                f"the last complete event of transcript {self.path} is damaged; "
                "refusing to extend it",
                "run verify on it to see what is wrong; start a new transcript instead",
            )
        return event

    # -- writing -----------------------------------------------------------------------------

    def append(self, kind: str, data: dict[str, Any] | None = None) -> Event:
        """Write one event durably (write + fsync) and return it."""
        # Round-trip through canonical JSON so the returned event equals what read_events yields.
        plain = _to_jsonable(data or {})
        if not isinstance(plain, dict):
            raise TypeError("transcript data must be a dict")
        if self._validate is not None:
            self._validate(kind, plain)
        payload = json.loads(canonical_json(self._spill(plain)))
        with self._lock:
            fd = self._require_open()
            seq, prev = self._next_seq, self._last_hash
            ts = utc_timestamp()
            event = Event(
                seq=seq,
                ts=ts,
                kind=kind,
                data=payload,
                prev_hash=prev,
                hash=event_hash(seq, ts, kind, payload, prev),
            )
            line = event.line()
            try:
                _write_all(fd, line)
                os.fsync(fd)
            except BaseException:
                # Never leave half a line for the next append to glue onto.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._size)
                raise
            self._size += len(line)
            self._next_seq = seq + 1
            self._last_hash = event.hash
        for watcher in list(self._watchers):
            # A display must never stop the record: what it cannot show, it does not show.
            with contextlib.suppress(Exception):
                watcher(event)
        return event

    def watch(self, watcher: Callable[[Event], None]) -> None:
        """Call ``watcher`` with every event appended from now on, after it is written."""
        self._watchers.append(watcher)

    def _spill(self, value: Any) -> Any:
        """``value`` with every string over INLINE_TEXT_BYTES stored as a text blob."""
        if isinstance(value, str):
            # A character is at most 4 bytes: shorter strings need no encoding to decide.
            if len(value) * 4 <= INLINE_TEXT_BYTES:
                return value
            # surrogatepass: a lone surrogate keeps 3 bytes of its own, so nothing is lost.
            content = value.encode(TEXT_BLOB_ENCODING, "surrogatepass")
            if len(content) <= INLINE_TEXT_BYTES:
                return value
            ref = self.store_blob(content)
            return {"blob": ref.blob, "size": ref.size, "text": TEXT_BLOB_ENCODING}
        if isinstance(value, dict):
            return {key: self._spill(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._spill(item) for item in value]
        return value

    def store_blob(self, content: bytes) -> BlobRef:
        """Store ``content`` under its sha256 (once) and return a reference to it."""
        digest = hashlib.sha256(content).hexdigest()
        ref = BlobRef(blob=digest, size=len(content))
        dest = self.blob_dir / digest
        if dest.exists():
            return ref
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{digest[:16]}.", dir=self.blob_dir)
        try:
            _write_all(fd, content)
            # Read-only discourages edits; verify would catch them anyway.
            os.fchmod(fd, 0o444)
            os.fsync(fd)
            os.close(fd)
            fd = -1
            # Concurrent writers of the same content rename identical bytes: harmless.
            os.replace(tmp_name, dest)
        except BaseException:
            if fd != -1:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
            raise
        _fsync_dir(self.blob_dir)
        return ref

    def _require_open(self) -> int:
        if self._fd is None:
            raise ValueError(f"transcript writer for {self.path} is closed")
        return self._fd

    # -- lifetime ----------------------------------------------------------------------------

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def close(self) -> None:
        """Release the file; safe to call more than once."""
        with self._lock:
            self._release()

    def __enter__(self) -> TranscriptWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# -- reading and verifying ---------------------------------------------------------------------


def _open_transcript(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise HarnessError(
            f"transcript {path} does not exist",
            "check the path; each run writes its transcript inside its run directory",
        ) from None
    except OSError as exc:
        raise HarnessError(
            f"cannot read transcript {path}: {exc.strerror}", "check the path and permissions"
        ) from exc


def _iter_lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """Yield (1-based line number, bytes without newline, complete?) for each line."""
    with _open_transcript(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            if raw.endswith(b"\n"):
                yield lineno, raw[:-1], True
            else:
                yield lineno, raw, False


def read_events(path: Path) -> list[Event]:
    """All events on complete lines; a HarnessError if one of them is not an event."""
    events: list[Event] = []
    for lineno, raw, complete in _iter_lines(path):
        if not complete:
            break
        try:
            events.append(Event.model_validate(_loads(raw)))
        except (ValueError, RecursionError):
            raise HarnessError(
                f"line {lineno} of transcript {path} is not a valid event",
                "run verify on the transcript to see what is damaged",
            ) from None
    return events


def _shown(kind: Any) -> str:
    """A kind that is safe to put on one line of an error message."""
    text = kind if isinstance(kind, str) else repr(kind)
    if len(text) > 60 or not text.isprintable():
        return repr(text[:60])
    return text


def _first_validation_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(part) for part in err["loc"]) or "line"
    return f"{loc}: {err['msg']}"


def _blob_refs(value: Any) -> Iterator[tuple[Any, Any, bool]]:
    """Yield (name, size or None, exact {"blob","size"} dict?) for each reference in ``value``."""
    if isinstance(value, dict):
        exact = set(value) == {"blob", "size"}
        name = value.get("blob")
        if exact or (isinstance(name, str) and _HEX64.match(name)):
            yield name, value.get("size"), exact
        for item in value.values():
            yield from _blob_refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _blob_refs(item)


def _hash_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _check_blobs(path: Path, data: dict[str, Any], cache: dict[str, str | int]) -> str | None:
    """The first problem with a blob referenced from ``data``, or None.

    ``cache`` maps a blob name to its size once it hashed correctly, or to the problem found.
    """
    for name, size, exact in _blob_refs(data):
        if not (isinstance(name, str) and _HEX64.match(name)):
            return f"invalid blob reference {name!r} (not a sha256 name)"
        if name not in cache:
            file = blob_dir(path) / name
            try:
                actual_hash, actual_size = _hash_file(file)
            except FileNotFoundError:
                cache[name] = f"blob {name} is missing"
            except OSError as exc:
                cache[name] = f"blob {name} cannot be read: {exc.strerror}"
            else:
                cache[name] = (
                    actual_size
                    if actual_hash == name
                    else f"blob {name} content does not match its hash (blob edited)"
                )
        known = cache[name]
        if isinstance(known, str):
            return known
        if exact or size is not None:
            if type(size) is not int:
                return f"blob {name} has an invalid size {size!r}"
            if size != known:
                return f"blob {name} has {known} bytes but the event records {size}"
    return None


def _reject_constant(name: str) -> Any:
    # NaN/Infinity are not JSON and canonical_json refuses them; treat them as a damaged line.
    raise ValueError(f"non-JSON constant {name}")


def _loads(raw: bytes) -> Any:
    return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)


def verify(path: Path, *, expect_last_hash: str | None = None) -> VerifyReport:
    """Check the whole chain and every referenced blob; stop at the first bad event.

    ``expect_last_hash``, if given, is the head hash recorded elsewhere when the transcript was
    closed; it catches events cut off the end, which the chain alone cannot see.
    """
    path = Path(path)
    verified = 0
    prev_hash = GENESIS_HASH
    last_kind = ""
    partial = False
    blob_cache: dict[str, str | int] = {}

    def fail(error: str, bad_seq: int | None) -> VerifyReport:
        return VerifyReport(
            ok=False,
            events=verified,
            error=error,
            bad_seq=bad_seq,
            partial_tail=partial,
            last_hash=prev_hash,
        )

    for lineno, raw, complete in _iter_lines(path):
        if not complete:
            # Only the last line can be incomplete: a kill mid-write, not a tamper by itself.
            partial = True
            break
        try:
            obj = _loads(raw)
        except (ValueError, RecursionError):
            return fail(
                f"line {lineno}: not valid JSON (where event {verified} was expected)", None
            )
        try:
            event = Event.model_validate(obj)
        except ValidationError as exc:
            seq = obj.get("seq") if isinstance(obj, dict) else None
            if type(seq) is int and isinstance(obj, dict):
                what = f"event {seq} ({_shown(obj.get('kind'))}) at line {lineno}"
            else:
                seq, what = None, f"line {lineno}"
            return fail(f"{what}: not a valid event ({_first_validation_error(exc)})", seq)

        where = f"event {event.seq} ({_shown(event.kind)}) at line {lineno}"
        if event.seq != verified:
            return fail(
                f"{where}: expected seq {verified} (an event was dropped or events were reordered)",
                event.seq,
            )
        if event.prev_hash != prev_hash:
            problem = (
                "prev_hash is not the genesis hash (wrong start of chain)"
                if verified == 0
                else f"prev_hash does not match event {verified - 1}'s hash "
                "(an event was dropped, replaced or edited)"
            )
            return fail(f"{where}: {problem}", event.seq)
        computed = event.computed_hash()
        if computed != event.hash:
            cause = _mismatch_cause(path, lineno, event.hash, computed)
            return fail(f"{where}: hash mismatch ({cause})", event.seq)
        if canonical_json(obj) != raw:
            return fail(f"{where}: line is not in canonical form (bytes edited)", event.seq)
        blob_problem = _check_blobs(path, event.data, blob_cache)
        if blob_problem is not None:
            return fail(f"{where}: {blob_problem}", event.seq)
        verified += 1
        prev_hash = event.hash
        last_kind = event.kind

    if expect_last_hash is not None and expect_last_hash != prev_hash:
        head = f"event {verified - 1} ({_shown(last_kind)})" if verified else "the genesis hash"
        return fail(
            f"transcript ends at {head}, not at the expected head {expect_last_hash[:16]}... "
            "(events were cut off the end or the transcript was replaced)",
            None,
        )
    return VerifyReport(ok=True, events=verified, partial_tail=partial, last_hash=prev_hash)


def _mismatch_cause(path: Path, lineno: int, stored: str, computed: str) -> str:
    """Say whether the content or the stored hash was edited, using the next line's prev_hash."""
    # Only runs on failure, so re-reading the file to peek one line ahead is cheap enough.
    for other_lineno, raw, complete in _iter_lines(path):
        if other_lineno <= lineno:
            continue
        if complete:
            with contextlib.suppress(ValueError, RecursionError):
                obj = _loads(raw)
                next_prev = obj.get("prev_hash") if isinstance(obj, dict) else None
                if next_prev == computed:
                    return "stored hash edited"
                if next_prev == stored:
                    return "content edited"
        break
    return "content or stored hash edited"
