"""What a report reads, checked before a number is computed: the study, its lock (every item
the lock digests that can be checked without the engine), the matrix's rows, and for each
session the row counts, its attempt verified (transcript chain, manifest, diff and snapshot
digests), its grades, snapshot grades, transcript events, evidence chains and judgements.

Attempts the report does not use are listed with why, each once: outside the frozen study,
under another lock revision, set aside by the row logic (``study/matrix/rows.py``: retried
infrastructure failures, interruptions, attempts that do not verify, not graded yet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from grading.models import GradeReport
from harness.audit.evidence import RecordedJudgement, build_chains, read_judgements
from harness.errors import HarnessError
from harness.records import events
from harness.records.attempt import (
    AttemptPaths,
    GradeSummary,
    SessionRecord,
    read_grades,
    read_model_file,
    study_records,
)
from harness.records.chains import Chain
from harness.records.grades import SnapshotGrade, SnapshotGrades
from harness.records.study import Study, load_study
from harness.records.transcript import read_events
from harness.records.verify import require_verified
from harness.report.model import LeftOut, LockCitation
from harness.study import freeze
from harness.study.freeze import Frozen, LockedSession
from harness.study.matrix.rows import SessionRow, Verifier, session_rows

GRADE_REPORT = "out/grade.json"


@dataclass
class UsedSession:
    """One session's counted attempt, verified, with everything the sections read."""

    row: SessionRow
    locked: LockedSession
    folder: Path
    record: SessionRecord
    grade: GradeSummary | None  # None: finished with no diff (nothing to grade)
    grade_report: GradeReport | None
    snapshot_grades: dict[int, SnapshotGrade] | None
    typed: list[events.TypedEvent]
    chains: list[Chain]
    judgements: list[RecordedJudgement]
    grading_seconds: float = 0.0


@dataclass
class StudyRecords:
    study: Study
    study_path: Path
    frozen: Frozen
    citation: LockCitation
    rows: list[SessionRow]
    used: dict[str, UsedSession]
    left_out: list[LeftOut]
    # CPU- and GPU-hours of every attempt under the lock (what the caps hold against).
    all_cpu_hours: float = 0.0
    all_gpu_hours: float = 0.0
    sessions: dict[str, LockedSession] = field(default_factory=dict)


def verified_lock(study: Study, study_path: Path) -> tuple[Frozen, LockCitation]:
    """The study's latest lock, once every item it digests (but the images') matches now and
    every session that names a lock names one that is in the locks folder; else one error."""
    frozen = freeze.latest_lock(study)
    if frozen is None:
        raise HarnessError(f"study {study.name} is not frozen, so there is no study to report",
                           f"run `harness freeze --study {study_path}` and its sessions first")
    drifted = freeze.drift(frozen, study, study_path, None)
    if drifted:
        raise HarnessError(
            f"study {study.name}'s lock does not verify: {drifted[0].line(frozen.lock.revision)}",
            "restore it (`harness freeze --verify` lists every item); nothing was written")
    known = {frozen.sha256}
    for path in sorted((study.runs_root() / freeze.LOCKS_DIR).glob("rev-*.json")):
        known.add(freeze.read_lock(path).sha256)
    for folder, record in study_records(study.runs_root()):
        if record.lock_sha256 is not None and record.lock_sha256 not in known:
            raise HarnessError(
                f"{folder} ran under a lock with sha256 {record.lock_sha256[:16]}..., which no "
                f"lock in {study.runs_root() / freeze.LOCKS_DIR} has (a lock changed after "
                "sessions ran under it)", "restore the study's locks folder from a copy")
    images = [item.name for item in frozen.lock.items if freeze.is_image_item(item.name)]
    citation = LockCitation(
        path=_shown(frozen.path, study.runs_root()), sha256=frozen.sha256,
        revision=frozen.lock.revision, frozen_at=frozen.lock.frozen_at,
        items_checked=len(frozen.lock.items) - len(images), items_not_checked=images)
    return frozen, citation


def _shown(path: Path, root: Path) -> str:
    return path.relative_to(root.parent).as_posix() if path.is_relative_to(root.parent) \
        else str(path)


def collect(study_path: Path) -> StudyRecords:
    study = load_study(study_path)
    frozen, citation = verified_lock(study, study_path)
    root = study.runs_root()
    rows = session_rows(study, frozen, verifier=Verifier())
    records = study_records(root)
    locked = {s.session_id: s for s in frozen.lock.sessions}
    left_out: list[LeftOut] = []
    by_session: dict[str, dict[int, tuple[Path, SessionRecord]]] = {}
    for folder, record in records:
        if not record.in_frozen_study:
            left_out.append(_left(root, folder, record, "outside the frozen study (run before "
                                  "the freeze, with another model or GPUs, or by hand outside it)"))
        elif record.lock_sha256 != frozen.sha256:
            left_out.append(_left(root, folder, record, f"ran under lock revision "
                                  f"{record.study_revision}, not revision {frozen.lock.revision}"))
        else:
            by_session.setdefault(record.session_id, {})[record.attempt] = (folder, record)
    used: dict[str, UsedSession] = {}
    cpu = gpu = 0.0
    for row in rows:
        cpu += row.cpu_hours
        gpu += row.gpu_hours
        attempts = by_session.get(row.session_id, {})
        for number, why in sorted(row.set_aside.items()):
            folder = root / row.session_id / f"attempt-{number}"
            if why.startswith("infrastructure failure") and row.counted is not None:
                why += f"; retried as attempt {row.attempt}"
            elif why.startswith("infrastructure failure"):
                why += "; not retried yet" if row.state != "failed" else "; attempts used up"
            left_out.append(LeftOut(session_id=row.session_id, attempt=number,
                                    folder=_rel(root, folder), why=why))
        if row.counted is None:
            continue
        folder = Path(row.counted)
        record = attempts[int(folder.name.removeprefix("attempt-"))][1]
        used[row.session_id] = _used(row, locked[row.session_id], folder, record)
    for session_id, attempts in sorted(by_session.items()):
        if session_id not in locked:  # a record naming a session the lock does not have
            left_out += [_left(root, folder, record, "names a session the lock does not have")
                         for folder, record in attempts.values()]
    left_out.sort(key=lambda item: (item.session_id, item.attempt))
    return StudyRecords(study=study, study_path=study_path, frozen=frozen, citation=citation,
                        rows=rows, used=used, left_out=left_out, all_cpu_hours=cpu,
                        all_gpu_hours=gpu, sessions=locked)


def _rel(root: Path, folder: Path) -> str:
    return folder.relative_to(root).as_posix() if folder.is_relative_to(root) else str(folder)


def _left(root: Path, folder: Path, record: SessionRecord, why: str) -> LeftOut:
    return LeftOut(session_id=record.session_id, attempt=record.attempt,
                   folder=_rel(root, folder), why=why)


def _used(row: SessionRow, locked: LockedSession, folder: Path,
          record: SessionRecord) -> UsedSession:
    # Verified again as a whole here (the row's verifier may hold an earlier answer): the
    # numbers below are read from exactly the files that were checked.
    record = require_verified(folder)
    paths = AttemptPaths(root=folder)
    grades = [g for g in read_grades(folder, record) if g.verdict != "grader_error"]
    grade = grades[-1] if grades else None
    grade_report = None
    if grade is not None:
        report_path = folder / grade.folder / GRADE_REPORT
        if report_path.is_file():
            grade_report = read_model_file(report_path, GradeReport, "a grade report")
    snapshot_grades = None
    if paths.snapshot_grades.is_file():
        graded = read_model_file(paths.snapshot_grades, SnapshotGrades, "snapshot grades")
        snapshot_grades = {g.index: g for g in graded.snapshots}
    typed = [events.parse(e) for e in read_events(paths.transcript)]
    chains = build_chains(paths.transcript, typed, record.arm, snapshot_grades)
    judgements = read_judgements(folder)
    # Snapshots of the same diff share one grading folder: its time counts once. Summed in a
    # fixed order with fsum: a set's order follows the process's string hash seed, and a float
    # sum in another order can round differently, so two reports of the same records differed.
    snapshot_folders = sorted({snap.folder for snap in (snapshot_grades or {}).values()})
    seconds = math.fsum([*(_grade_seconds(folder / g.folder) for g in read_grades(folder, record)),
                         *(_grade_seconds(folder / f) for f in snapshot_folders)])
    return UsedSession(row=row, locked=locked, folder=folder, record=record, grade=grade,
                       grade_report=grade_report, snapshot_grades=snapshot_grades, typed=typed,
                       chains=chains, judgements=judgements, grading_seconds=seconds)


def _grade_seconds(grade_dir: Path) -> float:
    """How long one grading's container ran, as the host recorded it (``grader.json``)."""
    path = grade_dir / "grader.json"
    if not path.is_file():
        return 0.0
    data = read_model_file(path, _GraderRun, "a grader record")
    return data.duration_s or 0.0


class _GraderRun(BaseModel):
    """The part of ``grader.json`` a report reads (the host writes it for every grading)."""

    duration_s: float | None = None
