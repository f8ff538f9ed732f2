"""``grades/snapshots.json``: the post-hoc, blind grades of an attempt's trajectory snapshots."""

from __future__ import annotations

from pydantic import BaseModel, Field

from harness.records.attempt import RecordedVerdict


class SnapshotGrade(BaseModel):
    """One trajectory snapshot's grade; ``contracts`` maps each contract to its outcome.

    Snapshots whose diffs are the same bytes are graded once: the later ones name, in
    ``same_diff_as``, the snapshot whose grading (``folder``) they share.
    """

    index: int
    trigger: str
    call_id: str | None
    diff_sha256: str
    folder: str
    verdict: RecordedVerdict
    contracts: dict[str, str] = Field(default_factory=dict)
    reason: str | None = None
    same_diff_as: int | None = None


class SnapshotGrades(BaseModel):
    """``grades/snapshots.json``: every snapshot of an attempt, graded post hoc and blind."""

    # 2: snapshots with the same diff share one grading (``SnapshotGrade.same_diff_as``).
    schema_version: int = 2
    graded_at: str
    snapshots: list[SnapshotGrade]


