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
    # The grading, under the study folder, that ``folder`` is a byte copy of: another verified
    # attempt graded exactly these inputs (harness.oracle.reuse; ``folder``/reused.json).
    reused_from: str | None = None


class SnapshotGrades(BaseModel):
    """``grades/snapshots.json``: every snapshot of an attempt, graded post hoc and blind."""

    # 2: snapshots with the same diff share one grading (``SnapshotGrade.same_diff_as``).
    # 3: a grading may be a copy of another attempt's of the same inputs (``reused_from``).
    schema_version: int = 3
    graded_at: str
    snapshots: list[SnapshotGrade]


