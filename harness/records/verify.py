"""``harness verify``: an attempt's transcript against the end its session recorded.

The hash chain (:func:`harness.records.transcript.verify`) catches an edited, dropped or reordered
event, but not events cut off the end. When a session ends it writes the chain's head (event
count and last hash) into ``session.json``, and the manifest repeats it; both must agree with
the transcript. A partial last line (a kill mid-write) is acceptable only while the record
still says ``running``, i.e. for a session that never finished.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from harness.records.attempt import (
    MANIFEST_NAME,
    RECORD_NAME,
    AttemptPaths,
    read_record,
)
from harness.records.transcript import verify


class AttemptVerdict(BaseModel):
    ok: bool
    events: int
    error: str | None = None
    notes: list[str] = Field(default_factory=list)


def verify_attempt(target: Path) -> AttemptVerdict:
    """Verify ``target``: an attempt folder, or a transcript (checked against the session
    record beside it, if there is one)."""
    path = AttemptPaths(root=target).transcript if target.is_dir() else target
    folder = path.parent
    report = verify(path)
    partial = ["it ends with a partial line from a kill mid-write"] if report.partial_tail else []
    if not report.ok:
        return AttemptVerdict(ok=False, events=report.events, error=report.error)

    def fail(error: str) -> AttemptVerdict:
        return AttemptVerdict(ok=False, events=report.events, error=error)

    if not (AttemptPaths(root=folder).record).is_file():
        if target.is_dir():
            return fail(f"{folder} holds no {RECORD_NAME}, so the transcript's end "
                        "cannot be checked")
        return AttemptVerdict(ok=True, events=report.events, notes=[
            "chain only: no session record beside the transcript to check its end against",
            *partial])
    record = read_record(folder)
    if record.status == "running":
        return AttemptVerdict(ok=True, events=report.events, notes=[
            "the session never finished (status running), so there is no recorded end to "
            "check against", *partial])
    if report.partial_tail:
        return fail(f"the transcript ends with a partial line, but the session ended "
                    f"({record.status}): its last event was cut")
    head = record.transcript
    if head is None:
        return fail(f"{RECORD_NAME} records no transcript head for a session that "
                    f"ended ({record.status})")
    manifest_path = AttemptPaths(root=folder).manifest
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    if manifest.get("transcript") != head.model_dump():
        return fail(f"{MANIFEST_NAME} does not repeat the transcript head that "
                    f"{RECORD_NAME} records")
    if (report.events, report.last_hash) != (head.events, head.head):
        return fail(f"the transcript has {report.events} events ending at "
                    f"{report.last_hash[:16]}..., but the session ended it at {head.events} "
                    f"events, {head.head[:16]}... (events were cut off the end or added)")
    return AttemptVerdict(ok=True, events=report.events)
