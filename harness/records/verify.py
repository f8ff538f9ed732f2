"""``harness verify``: an attempt's transcript against the end its session recorded, and
every file the attempt holds against the manifest and the digests the transcript recorded.

The hash chain (:func:`harness.records.transcript.verify`) catches an edited, dropped or reordered
event, but not events cut off the end. When a session ends it writes the chain's head (event
count and last hash) into ``session.json``, and the manifest repeats it; both must agree with
the transcript. A partial last line (a kill mid-write) is acceptable only while the record
still says ``running``, i.e. for a session that never finished.

Then the files (:func:`verify_records`): every file the manifest lists must be there, unchanged,
and nothing unlisted beside them (a grading's own folder aside); the final diff, the final tree
and every snapshot must have the digests their transcript events recorded. Every command that
reads an attempt calls :func:`require_verified` first, so a changed file is refused by name
before anything is graded, proposed or written.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from grading.hashing import file_sha256, tree_sha256
from harness.errors import HarnessError
from harness.records import events
from harness.records.attempt import (
    MANIFEST_NAME,
    RECORD_NAME,
    AttemptPaths,
    Manifest,
    SessionRecord,
    manifest_problem,
    read_model_file,
    read_record,
)
from harness.records.transcript import read_events, verify


class AttemptVerdict(BaseModel):
    ok: bool
    events: int
    error: str | None = None
    notes: list[str] = Field(default_factory=list)
    # The files too (verify_records): the manifest's entries and the recorded digests.
    files_checked: bool = False


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

    record_path = AttemptPaths(root=folder).record
    if not record_path.exists() and not record_path.is_symlink():
        if target.is_dir():
            return fail(f"{folder} holds no {RECORD_NAME}, so the transcript's end "
                        "cannot be checked")
        return AttemptVerdict(ok=True, events=report.events, notes=[
            "chain only: no session record beside the transcript to check its end against",
            *partial])
    try:
        record = read_record(folder)
    except HarnessError as exc:
        return fail(exc.problem)
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
    try:
        manifest = read_model_file(AttemptPaths(root=folder).manifest, Manifest, "a manifest")
    except HarnessError as exc:
        return fail(exc.problem)
    if manifest.transcript != head:
        return fail(f"{MANIFEST_NAME} does not repeat the transcript head that "
                    f"{RECORD_NAME} records")
    if (report.events, report.last_hash) != (head.events, head.head):
        return fail(f"the transcript has {report.events} events ending at "
                    f"{report.last_hash[:16]}..., but the session ended it at {head.events} "
                    f"events, {head.head[:16]}... (events were cut off the end or added)")
    return AttemptVerdict(ok=True, events=report.events)


def verify_records(target: Path) -> AttemptVerdict:
    """:func:`verify_attempt`, then every file of the attempt: against the manifest, and the
    diff, the final tree and the snapshots against the digests their events recorded."""
    verdict = verify_attempt(target)
    if not verdict.ok or not target.is_dir():
        return verdict
    record = read_record(target)
    if record.status == "running":
        return verdict  # no manifest and no recorded end yet: the chain is all there is
    problem = manifest_problem(target) or _recorded_digest_problem(target, record)
    if problem is not None:
        return AttemptVerdict(ok=False, events=verdict.events, error=problem)
    verdict.files_checked = True
    return verdict


def _recorded_digest_problem(folder: Path, record: SessionRecord) -> str | None:
    paths = AttemptPaths(root=folder)
    for event in read_events(paths.transcript):
        if event.kind == "diff":
            data = events.parse(event).data
            assert isinstance(data, events.Diff)
            if not paths.diff.is_file() or file_sha256(paths.diff) != data.sha256:
                return (f"{paths.diff.name} is not the diff the transcript recorded "
                        f"(event {event.seq})")
            if record.diff is not None and record.diff.sha256 != data.sha256:
                return f"{RECORD_NAME} records another diff than the transcript does"
            if data.final_tree_sha256 is not None and (
                    not paths.final.is_dir() or tree_sha256(paths.final) != data.final_tree_sha256):
                return (f"{paths.final.name}/ is not the tree the transcript recorded "
                        f"(event {event.seq})")
        elif event.kind == "snapshot":
            data = events.parse(event).data
            assert isinstance(data, events.Snapshot)
            if data.diff is None or data.sha256 is None:
                continue
            snap = folder / data.diff
            if not snap.is_file() or snap.is_symlink() or file_sha256(snap) != data.sha256:
                return f"{data.diff} is not the snapshot the transcript recorded"
    return None


def require_verified(folder: Path) -> SessionRecord:
    """The attempt's record, once every check of :func:`verify_records` passed; else one
    error naming what failed, before anything is read further or written."""
    verdict = verify_records(folder)
    if not verdict.ok:
        raise HarnessError(f"{folder} does not verify: {verdict.error}",
                           "restore the named file from a copy you trust; nothing was written "
                           "(`harness verify` lists what it checks)")
    return read_record(folder)
