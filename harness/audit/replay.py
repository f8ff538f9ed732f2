"""``harness replay``: read an attempt back as a timeline, after verifying it.

Verification comes first (:func:`harness.records.verify.verify_attempt`: the hash chain, every blob,
and the end that ``session.json`` and the manifest recorded). A broken transcript is still
read, line by line, but every event from the break on is marked *unverified*, and the break
itself is a row of its own: nothing is dropped or smoothed over.

Every byte of the attempt folder is treated as hostile, whether verified or not (a verified
transcript still holds whatever the agent and its programs printed): lines, blobs, artifacts
and grade files are read with size caps, and text meant for a terminal goes through
``harness.text``, which turn control characters, terminal escape
sequences, bidi overrides and lone surrogates into visible escapes. Rich is only ever given
``Text`` objects, so ``[bold]`` in an output stays literal.

A ``snapshot`` event (harness/agent/snapshots.py) is shown with its index, trigger and changed
files, its diff read (capped) from ``snapshots/NNNN.diff``, and its blind grade from
``grades/snapshots.json`` when ``harness grade --snapshots`` has run. Nothing is shown where
nothing was recorded.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeGuard

from pydantic import BaseModel, Field

from grading.hashing import file_sha256 as file_sha256_of
from harness.errors import HarnessError
from harness.records.attempt import (
    BLOB_DIR,
    GRADE_SUMMARY_NAME,
    RECORD_NAME,
    SNAPSHOT_DIR,
    AttemptPaths,
    GradeSummary,
    read_record,
)
from harness.records.verify import verify_records
from harness.text import one_line

# A line longer than this is not parsed (a real event's strings are capped at 64 KiB each and
# larger ones go to blobs, so only a damaged or forged line gets near it).
MAX_LINE_BYTES = 32 * 1024**2

# What one replay parses of a transcript in all (a real one spills its large strings to
# blobs and stays far below); later lines are listed as not read, never dropped silently.
MAX_READ_BYTES = 1024**3

# What one search (--grep, the viewer's index) reads of one text.
SEARCH_TEXT_BYTES = 1024**2

GRADE_JSON_MAX_BYTES = 16 * 1024**2

SNAPSHOT_DIFF = re.compile(rf"^{SNAPSHOT_DIR}/[0-9]{{4}}\.diff$")  # nothing else is read as a diff

SNAPSHOT_DIFF_MAX_BYTES = 4 * 1024**2

SNAPSHOT_KIND = "snapshot"

# Artifacts are named by the harness (``NNNN-label.log``); a recorded path is never followed,
# only its last part is looked up under the attempt's own artifacts/.
_ARTIFACT_NAME = re.compile(r"^[0-9]{4}-[A-Za-z0-9_.-]{1,120}\.log$")

_HEX64 = re.compile(r"^[0-9a-f]{64}$")

Status = Literal["verified", "unverified", "damaged"]


@dataclass(frozen=True)
class Capped:
    """A text read with a cap: ``text`` is all of it, or its head and tail with a marker."""

    text: str
    total_bytes: int
    omitted_bytes: int = 0
    problem: str | None = None  # e.g. a missing blob: ``text`` is empty then

    @property
    def whole(self) -> bool:
        return self.omitted_bytes == 0 and self.problem is None


def _decode(raw: bytes) -> str:
    # Text blobs were written with surrogatepass (harness.text); a forged one may not be
    # UTF-8 at all, and a cut may split a character.
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")


def _marker(omitted: int, total: int, where: str) -> str:
    return (f"\n[... replay: {omitted} of {total} bytes not shown here"
            f"{'; the whole is in ' + where if where else ''} ...]\n")


def cap_text(text: str, cap: int, where: str = "") -> Capped:
    """``text`` cut to about ``cap`` UTF-8 bytes (head and tail), saying what was cut."""
    if len(text) * 4 <= cap:
        return Capped(text, len(text.encode("utf-8", "surrogatepass")))
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= cap:
        return Capped(text, len(raw))
    half = cap // 2
    omitted = len(raw) - 2 * half
    return Capped(_decode(raw[:half]) + _marker(omitted, len(raw), where)
                  + _decode(raw[-half:]), len(raw), omitted)


def read_capped(path: Path, cap: int, where: str = "") -> Capped:
    """A file's text, head and tail past ``cap`` bytes; never follows a symlink."""
    try:
        # NONBLOCK: opening a FIFO planted in the folder must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return Capped("", 0, problem=f"{path.name} is missing")
    except OSError as exc:
        return Capped("", 0, problem=f"{path.name} cannot be read: {exc.strerror}")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # a FIFO or device would never end; a folder fails
        os.close(fd)
        return Capped("", 0, problem=f"{path.name} is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        size = info.st_size
        if size <= cap:
            return Capped(_decode(fh.read(cap)), size)
        half = cap // 2
        head = fh.read(half)
        fh.seek(size - half)
        tail = fh.read(half)
    omitted = size - 2 * half
    return Capped(_decode(head) + _marker(omitted, size, where or str(path)) + _decode(tail),
                  size, omitted)


def file_sha256(path: Path) -> str | None:
    """SHA-256 of a regular file (not a link), or None."""
    if path.is_symlink() or not path.is_file():
        return None
    return file_sha256_of(path)


def is_blob_ref(value: Any) -> TypeGuard[dict[str, Any]]:
    return (isinstance(value, dict) and isinstance(value.get("blob"), str)
            and bool(_HEX64.match(value["blob"])) and set(value) <= {"blob", "size", "text"})


class Progress(BaseModel):
    """Budget counters as the ``budget`` events reported them up to an event."""

    tokens_input: int = 0
    tokens_output: int = 0
    tokens_total: int = 0
    tool_calls: int = 0
    candidate_runs: int = 0


class Violation(BaseModel):
    """One TrainCheck violation a ``traincheck`` call reported (as recorded, any field may be
    missing in a damaged event)."""

    relation: str = ""
    rule: str = ""
    plain_rule: str = ""
    first_step: str = ""
    ranks: str = ""


class ReplayEvent(BaseModel):
    """One line of the transcript, read back."""

    line: int
    status: Status
    seq: int | None = None
    ts: str | None = None
    offset_s: float | None = None
    kind: str = ""
    data: dict[str, Any] = Field(default_factory=dict)
    problem: str | None = None  # why a line is damaged
    # Derived for the timeline (raw; every consumer makes them inert).
    tool: str | None = None
    summary: str = ""
    exit_code: int | None = None
    progress: Progress = Field(default_factory=Progress)
    diagnostic: bool = False  # a call or result of a diagnostic tool (TrainCheck)
    violations: list[Violation] = Field(default_factory=list)
    diagnostic_outcome: str | None = None


class Verification(BaseModel):
    ok: bool
    events: int  # verified from the start
    error: str | None = None
    notes: list[str] = Field(default_factory=list)
    # 1-based line where the chain breaks; None when intact or when only the recorded end
    # disagrees (then ``at_end``).
    break_line: int | None = None
    at_end: bool = False

    def line(self) -> str:
        if self.ok:
            notes = f" ({'; '.join(self.notes)})" if self.notes else ""
            return f"transcript verified: {self.events} events, chain and end intact{notes}"
        where = (f"at line {self.break_line}" if self.break_line is not None
                 else "at its end" if self.at_end else "")
        return (f"TRANSCRIPT BROKEN {where} after {self.events} good events: {self.error}; "
                "everything from there on is shown UNVERIFIED")


class SnapshotGrade(BaseModel):
    verdict: str = ""
    contracts: dict[str, str] = Field(default_factory=dict)


class Snapshot(BaseModel):
    """A ``snapshot`` event (the code at one point of the trajectory) with its grade, when one
    was recorded."""

    seq: int | None
    line: int
    offset_s: float | None
    id: str
    trigger: str
    files_changed: list[str] = Field(default_factory=list)
    sha256: str | None = None
    diff: str | None = None  # the patch, capped
    grade: SnapshotGrade | None = None


class ContractOutcome(BaseModel):
    id: str
    outcome: str
    kind: str = ""
    reason: str = ""


class FinalGrade(BaseModel):
    verdict: str
    shown: str  # GradeSummary.shown(): what was not determined, in so many words
    folder: str
    contracts: list[ContractOutcome] = Field(default_factory=list)
    problem: str | None = None


class Replay(BaseModel):
    """An attempt read back: what verification said, every line, and what surrounds them."""

    attempt_dir: Path
    transcript: Path
    verification: Verification
    record: dict[str, Any] | None = None  # session.json as read (not part of the chain)
    record_problem: str | None = None
    events: list[ReplayEvent]
    caps: dict[str, float | int | None] = Field(default_factory=dict)
    deadline_s: float | None = None
    snapshots: list[Snapshot] = Field(default_factory=list)
    grade: FinalGrade | None = None

    def text(self, value: Any, cap: int, where: str = "") -> Capped:
        """A recorded string or blob reference as capped text."""
        if isinstance(value, str):
            return cap_text(value, cap, where)
        if is_blob_ref(value):
            name = value["blob"]
            return read_capped(self.transcript.parent / BLOB_DIR / name, cap,
                               where or f"{BLOB_DIR}/{name}")
        if value is None:
            return Capped("", 0)
        return cap_text(json.dumps(value, ensure_ascii=False, indent=1, default=str), cap, where)

    def artifact(self, recorded: Any) -> Path | None:
        """The attempt's own copy of a recorded artifact path (its last part only)."""
        if not isinstance(recorded, str):
            return None
        name = recorded.rsplit("/", 1)[-1]
        if not _ARTIFACT_NAME.match(name):
            return None
        return AttemptPaths(root=self.attempt_dir).artifacts / name


def _lines(path: Path) -> Iterator[tuple[int, bytes | None, bool, int]]:
    """(1-based line number, bytes without newline or None if oversized, complete?, size)."""
    with path.open("rb") as fh:
        lineno = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            lineno += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                size = len(raw)
                while raw and not raw.endswith(b"\n"):
                    raw = fh.readline(1 << 20)
                    size += len(raw)
                yield lineno, None, raw.endswith(b"\n"), size
                continue
            complete = raw.endswith(b"\n")
            yield lineno, raw[:-1] if complete else raw, complete, len(raw)


def _complete_lines(path: Path) -> int:
    """How many newline-terminated lines ``path`` holds, counted without keeping any."""
    count = 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            count += chunk.count(b"\n")
    return count


def _parse_ts(ts: Any) -> datetime | None:
    if not isinstance(ts, str) or len(ts) > 40:
        return None
    try:
        return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return None


def _short_value(value: Any, limit: int = 60) -> str:
    if isinstance(value, str):
        return one_line(value, limit)
    if is_blob_ref(value):
        return f"<{value.get('size', '?')} bytes>"
    return one_line(json.dumps(value, ensure_ascii=False, default=str), limit)


def short_args(tool: str, args: Any) -> str:
    """A tool call's arguments in short (raw; made inert by one_line)."""
    if not isinstance(args, dict):
        return _short_value(args)

    def size(key: str) -> str:
        value = args.get(key)
        if isinstance(value, str):
            return f"{len(value)} chars"
        if is_blob_ref(value):
            return f"{value.get('size', '?')} bytes"
        return "?"

    if tool == "bash" and "command" in args:
        return _short_value(args["command"], 120)
    if tool == "read_file" and "path" in args:
        lines = ""
        if "start_line" in args or "end_line" in args:
            lines = f":{args.get('start_line', 1)}-{args.get('end_line', '')}"
        return _short_value(args["path"]) + lines
    if tool == "write_file" and "path" in args:
        return f"{_short_value(args['path'])} ({size('content')})"
    if tool == "edit_file" and "path" in args:
        return f"{_short_value(args['path'])} ({size('old')} -> {size('new')})"
    if tool == "submit" and "summary" in args:
        return _short_value(args["summary"], 120)
    parts = [f"{key}={_short_value(value, 40)}" for key, value in list(args.items())[:6]]
    return ", ".join(parts)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-JSON constant {name}")


def _number(value: Any) -> int | float | None:
    """A count or cap that arithmetic and the chart can take (a forged line may hold 1e999
    digits or a bool)."""
    if type(value) is int and abs(value) < 2**62:
        return value
    if type(value) is float and abs(value) < 1e15:  # NaN fails the comparison
        return value
    return None


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _violations(details: Any) -> list[Violation]:
    found = details.get("new_violations") if isinstance(details, dict) else None
    if not isinstance(found, list):
        return []
    out = []
    for item in found[:200]:
        if not isinstance(item, dict):
            continue
        ranks = item.get("ranks")
        out.append(Violation(
            relation=str(item.get("relation") or ""), rule=str(item.get("rule") or ""),
            plain_rule=str(item.get("plain_rule") or ""),
            first_step="" if item.get("first_step") is None else str(item.get("first_step")),
            ranks=", ".join(map(str, ranks)) if isinstance(ranks, list) else ""))
    return out


def diagnostic_tools() -> frozenset[str]:
    """The tools that only the treatment arm gets: the diagnostics (TrainCheck)."""
    from harness.agent.toolsets import EXTRA_TOOLS

    return frozenset(EXTRA_TOOLS)


def _derive(event: ReplayEvent, diagnostics: frozenset[str], blobs: Path) -> None:
    """Fill the timeline fields of one event from its data (raw, never trusted)."""
    d = event.data
    kind = event.kind
    if kind == "tool_call":
        event.tool = str(d.get("name", "?"))
        event.summary = short_args(event.tool, d.get("args"))
    elif kind == "tool_result":
        event.tool = str(d.get("name", "?"))
        event.exit_code = _int(d.get("exit_code"))
        output = d.get("output")
        head = (output if isinstance(output, str) else
                read_capped(blobs / output["blob"], 1024).text if is_blob_ref(output) else
                _short_value(output))
        flags = [flag for flag, on in (("timed out", d.get("timed_out") is True),
                                       ("cut", d.get("output_truncated") is True)) if on]
        details = d.get("details")
        if isinstance(details, dict) and isinstance(details.get("outcome"), str):
            event.diagnostic_outcome = details["outcome"]
            event.violations = _violations(details)
            flags.insert(0, f"{details['outcome']}, {len(event.violations)} new violation(s)")
        event.summary = (f"[{'; '.join(flags)}] " if flags else "") + one_line(head, 200)
    elif kind == "model_response":
        calls = d.get("tool_calls")
        names = [str(c.get("name")) for c in calls if isinstance(c, dict)] \
            if isinstance(calls, list) else []
        raw_usage = d.get("usage")
        usage = raw_usage if isinstance(raw_usage, dict) else {}
        text = d.get("text")
        parts = [f"-> {', '.join(names)}" if names else "no tool call",
                 f"{usage.get('input_tokens', 0)}+{usage.get('output_tokens', 0)} tokens"]
        if reasoning_blocks(d):
            parts.append("reasoning")
        said = f": {_short_value(text, 120)}" if isinstance(text, str) and text.strip() else ""
        event.summary = "; ".join(parts) + said
    elif kind == "model_request":
        event.summary = (f"turn {d.get('turn')}, {d.get('message_count')} messages, input "
                         f"<= {d.get('input_tokens_bound')}, max out {d.get('max_output_tokens')}")
    elif kind == "model_attempt":
        event.summary = ("ok" if d.get("ok") is True else f"FAILED: {_short_value(d.get('error'))}"
                         ) + f" in {d.get('duration_s')} s"
    elif kind in ("budget", "budget_overrun", "budget_start", "budget_exhausted"):
        event.summary = _short_value({k: v for k, v in d.items() if k != "budget"}, 200)
    elif kind == SNAPSHOT_KIND:
        files = d.get("files_changed")
        event.summary = (f"snapshot {_short_value(d.get('index', '?'))} after "
                         f"{_short_value(d.get('trigger', d.get('reason', '?')))}, "
                         f"{len(files) if isinstance(files, list) else '?'} file(s) changed")
    elif kind == "sandbox_start":
        event.summary = (f"container {d.get('container')}, image "
                         f"{str(d.get('image_id', ''))[:19]}, GPUs {d.get('gpu_ids')}")
    elif kind == "session_start":
        event.summary = (f"{d.get('study')}/{d.get('session')} attempt {d.get('attempt')}: task "
                         f"{d.get('task')}, arm {d.get('arm')}, tools {d.get('tools')}")
    elif kind in ("agent_end", "session_end"):
        event.summary = ", ".join(f"{k} {_short_value(d.get(k))}"
                                  for k in ("status", "outcome", "turns", "tool_calls", "summary")
                                  if k in d)
    elif kind == "diff":
        files = d.get("files_changed")
        event.summary = (f"{d.get('bytes')} bytes, {len(files) if isinstance(files, list) else '?'}"
                         f" file(s) changed, sha256 {str(d.get('sha256', ''))[:16]}")
    else:
        event.summary = _short_value(d, 200)
    event.diagnostic = event.tool in diagnostics


def reasoning_blocks(data: dict[str, Any]) -> list[Any]:
    """The reasoning a provider returned with a turn (Anthropic thinking blocks), raw."""
    blocks = data.get("provider_content")
    if not isinstance(blocks, list):
        return []
    found: list[Any] = []
    for block in blocks[:1000]:
        if not isinstance(block, dict):
            continue
        kind = str(block.get("type", ""))
        if kind == "redacted_thinking":
            found.append("[the provider returned this reasoning block redacted]")
        elif "thinking" in kind or "reasoning" in kind:
            found.append(block.get("thinking", block.get("text", block.get("summary", ""))))
    return found


def _read_record(folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    path = AttemptPaths(root=folder).record
    if not path.is_file():
        return None, f"no {RECORD_NAME} beside the transcript"
    try:
        record = read_record(folder)
    except (ValueError, OSError) as exc:  # ValidationError and JSON errors are ValueErrors
        return None, f"{RECORD_NAME} cannot be read: {one_line(str(exc), 200)}"
    return record.model_dump(mode="json"), None


def _grade_summaries(folder: Path, record: dict[str, Any] | None) -> list[Any]:
    """The raw grade summaries, oldest first: those an older record lists, then each
    ``grades/grade-N/summary.json`` (capped reads; one that cannot be read is skipped)."""
    listed = list((record or {}).get("grades") or [])
    seen = {g.get("folder") for g in listed if isinstance(g, dict)}
    grades = AttemptPaths(root=folder).grades
    numbered = []
    if grades.is_dir() and not grades.is_symlink():
        for entry in grades.iterdir():
            tail = entry.name.removeprefix("grade-")
            if entry.name.startswith("grade-") and tail.isdigit():
                numbered.append((int(tail), entry))
    for _n, entry in sorted(numbered):
        rel = entry.relative_to(folder).as_posix()
        capped = read_capped(entry / GRADE_SUMMARY_NAME, GRADE_JSON_MAX_BYTES)
        if rel in seen or capped.problem or not capped.whole:
            continue
        try:
            listed.append(json.loads(capped.text))
        except ValueError:
            continue
    return listed


def _final_grade(folder: Path, record: dict[str, Any] | None) -> FinalGrade | None:
    grades = _grade_summaries(folder, record)
    if not grades:
        return None
    summary = GradeSummary.model_validate(grades[-1])
    grade = FinalGrade(verdict=summary.verdict, shown=summary.shown(), folder=summary.folder)
    rel = Path(summary.folder)
    if rel.is_absolute() or ".." in rel.parts:
        grade.problem = f"grade folder {summary.folder!r} is outside the attempt"
        return grade
    path = folder / rel / "out" / "grade.json"
    capped = read_capped(path, GRADE_JSON_MAX_BYTES)
    if capped.problem or not capped.whole:
        grade.problem = capped.problem or f"{path.name} is over {GRADE_JSON_MAX_BYTES} bytes"
        return grade
    try:
        raw = json.loads(capped.text)
        for item in raw.get("contracts") or []:
            grade.contracts.append(ContractOutcome(
                id=str(item.get("id", "?")), outcome=str(item.get("outcome", "?")),
                kind=str(item.get("kind") or ""), reason=str(item.get("reason") or "")))
    except (ValueError, AttributeError, TypeError) as exc:
        grade.problem = f"{path.name} is not a grade report: {type(exc).__name__}"
    return grade


def _snapshot_grades(folder: Path) -> dict[str, SnapshotGrade]:
    path = AttemptPaths(root=folder).snapshot_grades
    if not path.is_file():
        return {}
    capped = read_capped(path, GRADE_JSON_MAX_BYTES)
    try:
        raw = json.loads(capped.text) if capped.whole else {}
        return {str(s["index"]): SnapshotGrade.model_validate(s) for s in raw["snapshots"]}
    except (ValueError, AttributeError, TypeError, KeyError):
        return {}


def _verification(target: Path, complete_lines: int) -> Verification:
    verdict = verify_records(target)
    result = Verification(ok=verdict.ok, events=verdict.events, error=verdict.error,
                          notes=verdict.notes)
    if not verdict.ok:
        if verdict.events < complete_lines:
            result.break_line = verdict.events + 1
        else:
            result.at_end = True
    return result


def load(target: Path) -> Replay:
    """Verify ``target`` (an attempt folder or its transcript), then read every line."""
    transcript = AttemptPaths(root=target).transcript if target.is_dir() else target
    folder = transcript.parent
    if not transcript.is_file():
        raise HarnessError(f"no transcript at {transcript}",
                           "pass an attempt folder (runs/<study>/<session>/attempt-N)")
    verification = _verification(target, _complete_lines(transcript))
    record, record_problem = _read_record(folder)
    diagnostics = diagnostic_tools()

    events: list[ReplayEvent] = []
    start: datetime | None = None
    progress = Progress()
    caps: dict[str, float | int | None] = {}
    deadline: float | None = None
    read = 0
    for lineno, raw, done, size in _lines(transcript):
        broken = not verification.ok and (
            verification.break_line is not None and lineno >= verification.break_line)
        status: Status = "unverified" if broken else "verified"
        read += size
        if read > MAX_READ_BYTES:
            events.append(ReplayEvent(line=lineno, status="damaged", problem=(
                f"not read: replay parses the first {MAX_READ_BYTES} bytes of a transcript")))
            continue
        if raw is None:
            events.append(ReplayEvent(line=lineno, status="damaged",
                                      problem=f"line of {size} bytes, over the "
                                              f"{MAX_LINE_BYTES}-byte cap: not read"))
            continue
        if not done:
            events.append(ReplayEvent(line=lineno, status="damaged", problem=(
                f"partial last line ({size} bytes, no newline): a kill mid-write, or a cut")))
            continue
        try:
            obj = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            events.append(ReplayEvent(line=lineno, status="damaged",
                                      problem="not valid JSON: " + one_line(
                                          raw[:200].decode("utf-8", "replace"), 120)))
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("data"), dict):
            events.append(ReplayEvent(line=lineno, status="damaged",
                                      problem="not an event object"))
            continue
        event = ReplayEvent(line=lineno, status=status, seq=_int(obj.get("seq")),
                            ts=obj.get("ts") if isinstance(obj.get("ts"), str) else None,
                            kind=str(obj.get("kind", "?")), data=obj["data"])
        when = _parse_ts(event.ts)
        if when is not None:
            start = start or when
            event.offset_s = round((when - start).total_seconds(), 3)
        if event.kind == "budget":
            updates = {k: v for k, v in event.data.items()
                       if k in Progress.model_fields and type(v) is int
                       and _number(v) is not None}
            progress = progress.model_copy(update=updates)
        elif event.kind == "budget_start":
            budget = event.data.get("budget")
            if isinstance(budget, dict):
                caps = {k: _number(v) for k, v in budget.items()}
            limit = _number(event.data.get("deadline_s"))
            deadline = None if limit is None else float(limit)
        event.progress = progress
        _derive(event, diagnostics, folder / BLOB_DIR)
        events.append(event)

    grades = _snapshot_grades(folder)
    snapshots = []
    for event in events:
        if event.kind != SNAPSHOT_KIND or event.status == "damaged":
            continue
        sid = str(event.data.get("index", f"seq-{event.seq}"))
        files = event.data.get("files_changed")
        rel = event.data.get("diff")
        patch = None
        if isinstance(rel, str) and SNAPSHOT_DIFF.match(rel):
            capped = read_capped(folder / rel, SNAPSHOT_DIFF_MAX_BYTES, rel)
            patch = capped.problem or capped.text
        snapshots.append(Snapshot(
            seq=event.seq, line=event.line, offset_s=event.offset_s, id=sid,
            trigger=str(event.data.get("trigger", event.data.get("reason", ""))),
            files_changed=[str(f) for f in files] if isinstance(files, list) else [],
            sha256=str(event.data["sha256"]) if "sha256" in event.data else None,
            diff=patch, grade=grades.get(sid)))
    final = None
    try:
        final = _final_grade(folder, record)
    except ValueError:  # a grade summary that is not one: the record problem says enough
        final = None
    return Replay(attempt_dir=folder, transcript=transcript, verification=verification,
                  record=record, record_problem=record_problem, events=events, caps=caps,
                  deadline_s=deadline, snapshots=snapshots, grade=final)


def manifest_digests(folder: Path) -> dict[str, str]:
    """The manifest's file digests (empty when there is none or it is not one)."""
    capped = read_capped(AttemptPaths(root=folder).manifest, GRADE_JSON_MAX_BYTES)
    try:
        files = json.loads(capped.text).get("files") if capped.whole else None
    except (ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def digest_note(path: Path, rel: str, manifest: dict[str, str]) -> str:
    """Whether a file outside the chain still matches the manifest."""
    actual = file_sha256(path)
    if actual is None:
        return "missing"
    listed = manifest.get(rel)
    if listed is None:
        return "not in the manifest"
    return "matches the manifest" if listed == actual else "DIFFERS from the manifest"


def diff_note(replay: Replay, path: Path) -> str:
    """Whether submission.diff matches the digest the chain's ``diff`` event recorded."""
    recorded = [e.data.get("sha256") for e in replay.events
                if e.kind == "diff" and e.status != "damaged"]
    actual = file_sha256(path)
    if actual is None:
        return "missing"
    if not recorded:
        return "no diff event in the transcript to check it against"
    if actual == recorded[-1]:
        return "matches the digest in the transcript" + (
            "" if replay.verification.ok else " (an unverified transcript)")
    return "DIFFERS from the digest in the transcript"
