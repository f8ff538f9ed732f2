"""``harness audit``: evidence chains proposed from a session's transcript, and auditors'
judgements of them.

The harness proposes, it never concludes. A chain is an observation the agent received (a
diagnostic report in the treatment arm; a failed run of its own, public tests or candidate,
in either arm, so the arms are compared like for like), what the agent said and edited before
its next run, and the blind grades of its code at the observation and at that next run: which
contracts went from failing to passing (an improvement the agent could not see) or back.
Whether the observation caused the change is an auditor's call, recorded as a judgement in an
append-only, hash-chained file bound to the transcript's sha256.

Everything here reads the attempt and writes only under ``audit/``: never the transcript, and
never a file the manifest lists (``manifest_files`` leaves ``audit/`` out).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from grading.hashing import file_sha256
from harness.agent.snapshots import SNAPSHOT_TOOLS
from harness.errors import HarnessError
from harness.records import events
from harness.records.attempt import (
    CHAINS_NAME,
    SNAPSHOT_GRADES_NAME,
    TRANSCRIPT_NAME,
    AttemptPaths,
    SessionRecord,
    atomic_write,
    read_record,
)
from harness.records.chains import (
    CATEGORIES,
    CHAINS_SCHEMA_VERSION,
    JUDGEMENT_KIND,
    Chain,
    ChainProposal,
    Edit,
    Judgement,
    Message,
    NextRun,
    Observation,
    OtherCall,
    SnapshotState,
    Violation,
)
from harness.records.clock import utc_timestamp
from harness.records.grades import SnapshotGrade, SnapshotGrades
from harness.records.transcript import (
    Event,
    TranscriptWriter,
    read_events,
    read_text,
    verify,
)
from harness.records.verify import verify_records
from harness.text import inert_block, json_dumps

DIAGNOSTIC_TOOL = "traincheck"
OWN_RUN_TOOLS = frozenset({"run_public_tests", "run_candidate"})
EDIT_TOOLS = frozenset({"write_file", "edit_file"})
# A chain ends at the agent's next run; those are exactly the calls a snapshot is taken at, so
# the code after the agent's response is always graded where the chain ends.
RUN_TOOLS = SNAPSHOT_TOOLS
# Outcomes that judged a contract and found it wanting; not_run judged nothing, so a contract
# that goes from not_run to pass is neither an improvement nor, the other way, a regression.
FAILED_OUTCOMES = frozenset({"fail", "crash", "hang", "flaky", "diff_rejected"})
TOOL_NOT_USED_ID = "tool-not-used"
OUTPUT_HEAD_CHARS = 600
MESSAGE_CHARS = 4000
ARGS_CHARS = 200


# --- the proposal --------------------------------------------------------------------------


def _validate_judgement(kind: str, data: dict[str, Any]) -> None:
    if kind != JUDGEMENT_KIND:
        raise ValueError(f"the audit file holds only {JUDGEMENT_KIND} events, not {kind!r}")
    Judgement.model_validate(data)


# --- building chains -------------------------------------------------------------------------


def inert(text: str) -> str:
    """``text`` as a terminal may show it: every unsafe character written as its escape
    (``harness.text``), so it shows what the transcript holds and obeys none of it."""
    return inert_block(text)


def _short(value: Any, limit: int = ARGS_CHARS) -> str:
    text = json_dumps(value, sort_keys=True, compact=True)
    return text if len(text) <= limit else text[:limit] + "..."


def _line_delta(old: str, new: str) -> tuple[int, int]:
    """Lines added and removed going from ``old`` to ``new``."""
    added = removed = 0
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            removed += i2 - i1
            added += j2 - j1
    return added, removed


def _violations(seq: int, details: dict[str, Any]) -> list[Violation]:
    try:
        return [Violation.model_validate(v) for v in details.get("new_violations") or []]
    except ValidationError as exc:
        raise HarnessError(f"event {seq}: the diagnostic's new_violations do not have the "
                           f"recorded shape ({str(exc).splitlines()[0]})",
                           "see harness/agent/traincheck_tool.py for the format") from None


def _own_run_failed(result: events.ToolResult) -> bool:
    return (not result.ok or result.timed_out
            or (result.exit_code is not None and result.exit_code != 0))


def _observation(transcript: Path, call: events.TypedEvent, result: events.TypedEvent,
                 diagnostic: bool) -> Observation:
    data = result.data
    call_data = call.data
    assert isinstance(data, events.ToolResult) and isinstance(call_data, events.ToolCall)
    output = str(read_text(transcript, data.output))
    details = data.details
    common: dict[str, Any] = {
        "seq": result.seq, "call_seq": call.seq, "call_id": data.id, "tool": data.name,
        "args": _short(read_text(transcript, call_data.args)), "ok": data.ok,
        "exit_code": data.exit_code, "timed_out": data.timed_out,
        "output_head": output[:OUTPUT_HEAD_CHARS]}
    if not diagnostic:
        why = ("timed out" if data.timed_out else f"exit {data.exit_code}"
               if data.exit_code is not None else "not ok")
        return Observation(source="own_run", label=f"failed ({why})", **common)
    outcome = details.get("outcome")
    found = _violations(result.seq, details)
    if outcome == "violations":
        label = f"{len(found)} new violation(s)"
    elif outcome == "no_new_violations":
        label = "clean: no new violations"
    elif isinstance(outcome, str):
        label = f"no verdict: {outcome}"  # a crash, hang or timeout: never "0 violations"
    else:
        outcome, label = None, "refused: " + (output.splitlines() or [""])[0][:160]
    return Observation(source="diagnostic", label=label, outcome=outcome,
                       cause=str(details.get("cause") or ""), violations=found, **common)


def _state(snap: events.TypedEvent, grades: dict[int, SnapshotGrade] | None) -> SnapshotState:
    data = snap.data
    assert isinstance(data, events.Snapshot)
    state = SnapshotState(index=data.index, trigger=data.trigger, seq=snap.seq, diff=data.diff,
                          files_changed=data.files_changed, error=data.error)
    grade = (grades or {}).get(data.index)
    if grade is None or data.diff is None:
        return state
    if grade.diff_sha256 != data.sha256:
        raise HarnessError(f"{SNAPSHOT_GRADES_NAME} grades snapshot {data.index} as a diff "
                           f"with sha256 {grade.diff_sha256[:16]}..., but the transcript "
                           f"recorded {str(data.sha256)[:16]}...",
                           "grade the snapshots again: harness grade ATTEMPT --snapshots")
    state.graded = True
    state.verdict = grade.verdict
    state.failing = [c for c, o in grade.contracts.items() if o in FAILED_OUTCOMES]
    state.not_run = [c for c, o in grade.contracts.items() if o == "not_run"]
    state.grade_reason = grade.reason
    return state


def _changes(before: SnapshotState | None, after: SnapshotState | None,
             grades: dict[int, SnapshotGrade] | None) -> tuple[list[str], list[str]]:
    if before is None or after is None or not before.graded or not after.graded:
        return [], []
    assert grades is not None
    old, new = grades[before.index].contracts, grades[after.index].contracts
    shared = [c for c in old if c in new]
    improved = [c for c in shared if old[c] in FAILED_OUTCOMES and new[c] == "pass"]
    regressed = [c for c in shared if old[c] == "pass" and new[c] in FAILED_OUTCOMES]
    return improved, regressed


def build_chains(transcript: Path, typed: list[events.TypedEvent], arm: str,
                 grades: dict[int, SnapshotGrade] | None) -> list[Chain]:
    """Every candidate chain of one verified transcript, in the order of its observations."""
    start = next((e.data for e in typed if isinstance(e.data, events.SessionStart)), None)
    offered = set(start.tools) if start is not None else set()
    # Which tool_call each result answers, and the snapshot taken at each call (the event
    # right after the call, with its id): both by position, so a reused call id cannot mislead.
    by_seq = {event.seq: event for event in typed}
    call_of = {result: by_seq[call] for call, result in events.call_result_pairs(
        (e.seq, e.kind, e.data.id if isinstance(e.data, events.ToolCall | events.ToolResult)
         else None) for e in typed).items()}
    snap_at: dict[int, events.TypedEvent] = {}
    last_call: events.TypedEvent | None = None
    for event in typed:
        data = event.data
        if isinstance(data, events.ToolCall):
            last_call = event
        elif isinstance(data, events.Snapshot):
            if (last_call is not None and isinstance(last_call.data, events.ToolCall)
                    and data.call_id == last_call.data.id):
                snap_at[last_call.seq] = event

    chains: list[Chain] = []
    diagnostic_called = False
    for position, event in enumerate(typed):
        data = event.data
        if not isinstance(data, events.ToolResult) or event.seq not in call_of:
            continue
        diagnostic = data.name == DIAGNOSTIC_TOOL and DIAGNOSTIC_TOOL in offered
        diagnostic_called |= diagnostic
        if not (diagnostic or (data.name in OWN_RUN_TOOLS and _own_run_failed(data))):
            continue
        call = call_of[event.seq]
        chain = Chain(id=f"c{event.seq}",
                      observation=_observation(transcript, call, event, diagnostic))
        _follow(transcript, typed[position + 1:], chain, call_of)
        before_event = snap_at.get(call.seq)
        after_event = (snap_at.get(chain.next_run.seq) if chain.next_run is not None
                       else _budget_stop(typed[position + 1:]))
        chain.before = _state(before_event, grades) if before_event is not None else None
        chain.after = _state(after_event, grades) if after_event is not None else None
        chain.improved, chain.regressed = _changes(chain.before, chain.after, grades)
        chains.append(chain)
    if arm == "treatment" and not diagnostic_called:
        label = (f"the {DIAGNOSTIC_TOOL} tool was never called" if DIAGNOSTIC_TOOL in offered
                 else f"the {DIAGNOSTIC_TOOL} tool was not offered to this treatment session")
        chains.insert(0, Chain(id=TOOL_NOT_USED_ID,
                               observation=Observation(source="tool_not_used", label=label)))
    return chains


def _budget_stop(later: Iterable[events.TypedEvent]) -> events.TypedEvent | None:
    return next((e for e in later if isinstance(e.data, events.Snapshot)
                 and e.data.trigger == "budget_stop"), None)


def _follow(transcript: Path, later: list[events.TypedEvent], chain: Chain,
            call_of: dict[int, events.TypedEvent]) -> None:
    """Fill ``chain`` with what follows its observation, up to the agent's next run."""
    edits: dict[int, Edit] = {}
    for event in later:
        data = event.data
        if isinstance(data, events.ModelResponse):
            text = str(read_text(transcript, data.text))
            if text.strip():
                chain.messages.append(Message(seq=event.seq, text=text[:MESSAGE_CHARS],
                                              chars=len(text)))
        elif isinstance(data, events.ToolCall):
            if data.name in RUN_TOOLS:
                chain.next_run = NextRun(seq=event.seq, call_id=data.id, tool=data.name,
                                         args=_short(read_text(transcript, data.args)))
                return
            if data.name in EDIT_TOOLS:
                edit = _edit(event.seq, data, read_text(transcript, data.args))
                edits[event.seq] = edit
                chain.edits.append(edit)
            else:
                chain.other_calls.append(OtherCall(seq=event.seq, tool=data.name,
                                                   args=_short(read_text(transcript,
                                                                         data.args))))
        elif isinstance(data, events.ToolResult):
            call = call_of.get(event.seq)
            if call is not None and call.seq in edits:
                edits[call.seq].ok = data.ok


def _edit(seq: int, call: events.ToolCall, args: dict[str, Any]) -> Edit:
    def text(key: str) -> str:
        value = args.get(key)
        return value if isinstance(value, str) else ""

    path = args.get("path")
    shown = path if isinstance(path, str) else _short(path)
    if call.name == "write_file":
        return Edit(seq=seq, call_id=call.id, tool=call.name, path=shown,
                    added=len(text("content").splitlines()), removed=None, ok=None)
    added, removed = _line_delta(text("old"), text("new"))
    return Edit(seq=seq, call_id=call.id, tool=call.name, path=shown, added=added,
                removed=removed, ok=None)


# --- the attempt -----------------------------------------------------------------------------


def _verified(attempt: Path) -> SessionRecord:
    """The attempt's record, once it verifies: transcript, manifest and the digests the
    transcript recorded (else one clear error)."""
    verdict = verify_records(attempt)
    if not verdict.ok:
        raise HarnessError(f"{attempt} does not verify: {verdict.error}",
                           f"see `harness verify {attempt}`; evidence chains rest on an intact "
                           "attempt")
    record = read_record(attempt)
    if record.status == "running":
        raise HarnessError(f"{attempt} is still running (or was never closed), so its "
                           "transcript may still grow",
                           "audit it once it ended; `harness cleanup` closes a dead session")
    return record


def transcript_sha256(attempt: Path) -> str:
    path = AttemptPaths(root=attempt).transcript
    if not path.is_file():
        raise HarnessError(f"{attempt} holds no {TRANSCRIPT_NAME}",
                           "pass an attempt folder that a session wrote")
    return file_sha256(path)


def _grades(attempt: Path) -> tuple[dict[int, SnapshotGrade] | None, str | None]:
    path = AttemptPaths(root=attempt).snapshot_grades
    if not path.is_file():
        return None, None
    raw = path.read_bytes()
    try:
        graded = SnapshotGrades.model_validate_json(raw)
    except ValidationError as exc:
        raise HarnessError(f"{path} is not a snapshot grades file "
                           f"({str(exc).splitlines()[0]})",
                           "grade the snapshots again: harness grade ATTEMPT --snapshots"
                           ) from None
    return {g.index: g for g in graded.snapshots}, hashlib.sha256(raw).hexdigest()


def propose(attempt: Path) -> ChainProposal:
    """Verify the attempt, propose its chains and write them to ``audit/chains.json``."""
    record = _verified(attempt)
    transcript = AttemptPaths(root=attempt).transcript
    # Hash first, then read: if the file changed in between, the verify at judge time says so.
    digest = transcript_sha256(attempt)
    written = read_events(transcript)
    typed = [events.parse(e) for e in written]
    grades, grades_digest = _grades(attempt)
    proposal = ChainProposal(
        study=record.study, session_id=record.session_id, attempt=record.attempt,
        arm=record.arm, task=record.task, transcript_sha256=digest,
        transcript_events=len(written), snapshot_grades_sha256=grades_digest,
        chains=build_chains(transcript, typed, record.arm, grades))
    path = AttemptPaths(root=attempt).chains
    path.parent.mkdir(exist_ok=True)
    atomic_write(path, _proposal_bytes(proposal))
    return proposal


def _proposal_bytes(proposal: ChainProposal) -> bytes:
    # jsontext, not model_dump_json: transcript text may hold lone surrogates, kept exactly.
    return (json_dumps(proposal.model_dump(mode="json"), indent=1) + "\n").encode()


def read_proposal(attempt: Path) -> tuple[ChainProposal, str]:
    """The proposal and the sha256 of its file's bytes."""
    path = AttemptPaths(root=attempt).chains
    if not path.is_file():
        raise HarnessError(f"{attempt} has no {CHAINS_NAME}",
                           f"propose the chains first: harness audit {attempt} --propose")
    raw = path.read_bytes()
    try:
        proposal = ChainProposal.model_validate(json.loads(raw))
    except (ValueError, TypeError) as exc:
        raise HarnessError(f"{path} is not a chain proposal ({str(exc).splitlines()[0]})",
                           f"propose again: harness audit {attempt} --propose") from None
    if proposal.schema_version != CHAINS_SCHEMA_VERSION:
        raise HarnessError(f"{path} has schema version {proposal.schema_version}, expected "
                           f"{CHAINS_SCHEMA_VERSION}",
                           f"propose again: harness audit {attempt} --propose")
    return proposal, hashlib.sha256(raw).hexdigest()


class RecordedJudgement(BaseModel):
    """A judgement as read back from the verified audit file."""

    seq: int
    ts: str
    judgement: Judgement


def read_judgements(attempt: Path) -> list[RecordedJudgement]:
    """Every judgement, once the attempt and the audit file's chain verify (else a
    HarnessError)."""
    _verified(attempt)
    path = AttemptPaths(root=attempt).judgements
    if not path.is_file():
        return []
    report = verify(path)
    if not report.ok or report.partial_tail:
        problem = report.error or "it ends with a partial line"
        raise HarnessError(f"{path} does not verify: {problem}",
                           "it is append-only: restore it from a copy; nothing was written")
    return [_recorded(e) for e in read_events(path)]


def _recorded(event: Event) -> RecordedJudgement:
    if event.kind != JUDGEMENT_KIND:
        raise HarnessError(f"event {event.seq} of the audit file is a {event.kind!r}, not a "
                           "judgement", "restore the audit file from a copy")
    try:
        return RecordedJudgement(seq=event.seq, ts=event.ts,
                                 judgement=Judgement.model_validate(event.data))
    except ValidationError as exc:
        raise HarnessError(f"judgement {event.seq} does not have the recorded shape "
                           f"({str(exc).splitlines()[0]})", "restore the audit file from a copy"
                           ) from None


def _check_earlier(attempt: Path, digest: str) -> None:
    for earlier in read_judgements(attempt):
        if earlier.judgement.transcript_sha256 != digest:
            raise HarnessError(
                f"judgement {earlier.seq} was made on a transcript with sha256 "
                f"{earlier.judgement.transcript_sha256[:16]}..., not this one ({digest[:16]}...)",
                "an audit file judges one transcript; find out why the transcript changed")


def judge(attempt: Path, chain: str, category: str, auditor: str, note: str = "") -> Judgement:
    """Append one judgement, refused (nothing written) unless the chain is in the proposal and
    the transcript is, byte for byte, the one the proposal and every earlier judgement saw."""
    if category not in CATEGORIES:
        raise HarnessError(f"unknown category {category!r}", f"use one of {', '.join(CATEGORIES)}")
    if not auditor.strip():
        raise HarnessError("the auditor has no name", "say who judges: --auditor NAME")
    proposal, chains_digest = read_proposal(attempt)
    ids = [c.id for c in proposal.chains]
    if chain not in ids:
        raise HarnessError(f"chain {chain!r} is not in the proposal for {attempt}",
                           f"use one of {', '.join(ids) or '(none: no chain was proposed)'}")
    _verified(attempt)
    digest = transcript_sha256(attempt)
    if digest != proposal.transcript_sha256:
        raise HarnessError(f"the transcript's sha256 is {digest[:16]}..., but the proposal was "
                           f"made from {proposal.transcript_sha256[:16]}...: the transcript "
                           "changed since", "find out why before judging; an audit judges one "
                           "transcript")
    path = AttemptPaths(root=attempt).judgements
    # Before the writer opens the file (it would salvage a partial line by writing), and again
    # under its lock, so that two auditors cannot interleave unchecked.
    _check_earlier(attempt, digest)
    existed = path.is_file()
    with TranscriptWriter(path, _validate_judgement) as writer:
        try:
            _check_earlier(attempt, digest)
        except HarnessError:
            if not existed:
                writer.close()
                path.unlink(missing_ok=True)
            raise
        judgement = Judgement(chain=chain, category=category,  # type: ignore[arg-type]
                              auditor=auditor, note=note, transcript_sha256=digest,
                              chains_sha256=chains_digest, at=utc_timestamp())
        writer.append(JUDGEMENT_KIND, judgement.model_dump())
    return judgement


# --- what a reader sees ----------------------------------------------------------------------


def _state_cell(state: SnapshotState | None) -> str:
    if state is None:
        return "no snapshot"
    head = f"#{state.index} {state.trigger}"
    if state.diff is None:
        return f"{head}: not taken ({state.error or 'no reason recorded'})"
    if not state.graded:
        return f"{head}: not graded"
    failing = ", ".join(state.failing) or "none"
    reason = f" ({state.grade_reason})" if state.grade_reason else ""
    return f"{head}: {state.verdict}{reason}; failing: {failing}"


def describe(chain: Chain) -> dict[str, str]:
    """One chain as plain text per column (the caller must not interpret it as markup)."""
    obs = chain.observation
    seen = obs.label
    if obs.tool is not None:
        seen = f"{obs.tool} {obs.args}: {seen}"
    for v in obs.violations:
        ranks = ", ".join(map(str, v.ranks))
        seen += f"\n- [{v.relation}] {v.rule}" + (f" (ranks {ranks})" if ranks else "")
    if obs.source == "own_run" and obs.output_head:
        seen += "\n" + "\n".join(obs.output_head.strip().splitlines()[-3:])
    response = [f"\"{m.text[:200]}\"" for m in chain.messages]
    for e in chain.edits:
        lines = f"+{e.added}" + ("" if e.removed is None else f" -{e.removed}")
        failed = "" if e.ok in (True, None) else " (failed)"
        response.append(f"{e.tool} {e.path} {lines}{failed}")
    response += [f"{c.tool} {c.args[:60]}" for c in chain.other_calls]
    nxt = "session ended" if chain.next_run is None else (
        f"{chain.next_run.tool} {chain.next_run.args[:60]} (event {chain.next_run.seq})")
    return {
        "chain": chain.id,
        "observation": seen,
        "response": "\n".join(response) or "-",
        "next run": nxt,
        "before": _state_cell(chain.before),
        "after": _state_cell(chain.after),
        "improved": ", ".join(chain.improved) or "-",
        "regressed": ", ".join(chain.regressed) or "-",
    }
