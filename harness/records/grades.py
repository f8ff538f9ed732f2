"""``grades/snapshots.json``: the post-hoc, blind grades of an attempt's trajectory snapshots."""

from __future__ import annotations

from pydantic import BaseModel, Field

from harness.records.attempt import RecordedVerdict


class SnapshotGrade(BaseModel):
    """One trajectory snapshot's grade; ``contracts`` maps each contract to its outcome."""

    index: int
    trigger: str
    call_id: str | None
    diff_sha256: str
    folder: str
    verdict: RecordedVerdict
    contracts: dict[str, str] = Field(default_factory=dict)
    reason: str | None = None


class SnapshotGrades(BaseModel):
    """``grades/snapshots.json``: every snapshot of an attempt, graded post hoc and blind."""

    schema_version: int = 1
    graded_at: str
    snapshots: list[SnapshotGrade]


