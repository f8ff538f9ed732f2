"""Sections 1, 2 and 4: each session's primary outcome, its contracts' outcomes, and the task
quality figures its checks measured (only for submissions that pass their contracts)."""

from __future__ import annotations

from harness.records.attempt import GradeSummary
from harness.report.collect import StudyRecords, UsedSession
from harness.report.model import (
    CONTRACT_CLASSES,
    ArmCount,
    ContractCounts,
    ContractsSection,
    PrimaryOutcome,
    PrimarySection,
    QualityFigure,
    QualitySection,
    SessionSummary,
)
from harness.study.matrix.rows import SessionRow

PASSING_VERDICTS = frozenset({"complete", "complete_on_cpu"})
# A contract that fails while every run it made exits 0 is a silent regression: the grader
# records a run that crashed or hung as crash or hang (grading/judge_plugin.py), so "fail"
# is exactly an assertion on results that exited cleanly. A crash or hang that passed on its
# rerun is flaky (grading/confirm.py): neither a pass nor a silent regression.
CONTRACT_CLASS = {"pass": "pass", "fail": "silent_regression", "crash": "crash",
                  "hang": "hang", "flaky": "flaky", "not_run": "not_run",
                  "diff_rejected": "diff_rejected"}


def session_summaries(records: StudyRecords) -> list[SessionSummary]:
    found = []
    for row in records.rows:
        locked = records.sessions[row.session_id]
        used = records.used.get(row.session_id)
        summary = SessionSummary(
            order=row.order, session_id=row.session_id, task=row.task, pair=locked.pair,
            arm=row.arm, comparison=row.comparison, state=row.state, used=used is not None)
        if used is None:
            summary.why_not_used = not_used_reason(row)
            summary.attempt = row.attempt
            summary.outcome = row.outcome
            found.append(summary)
            continue
        head = used.record.transcript
        summary.attempt = used.record.attempt
        summary.folder = used.folder.relative_to(records.study.runs_root()).as_posix()
        summary.transcript_events = head.events if head else None
        summary.transcript_head = head.head if head else None
        summary.outcome = used.record.outcome
        summary.verdict = used.grade.verdict if used.grade else None
        summary.verdict_shown = used.grade.shown() if used.grade else "no diff"
        found.append(summary)
    return found


def not_used_reason(row: SessionRow) -> str:
    """Why a session of the frozen study has no numbers in the report, in words."""
    if row.state == "pending" and not row.attempts:
        return "not yet run"
    if row.state == "pending":
        return "not yet run to an end (" + (row.note or "its attempts were set aside") + ")"
    if row.state == "grading":
        return "finished, not graded yet"
    if row.state == "damaged":
        return f"damaged: {row.note}"
    if row.state == "failed":
        return f"failed: {row.note}"
    return row.state + (f": {row.note}" if row.note else "")


def primary_label(grade: GradeSummary | None) -> str:
    if grade is None:
        return "no diff"
    if grade.verdict == "complete":
        return "feature complete"
    if grade.verdict == "complete_on_cpu":
        return "feature complete on CPU, not determined for CUDA"
    return "not feature complete"


def primary_section(records: StudyRecords) -> PrimarySection:
    rows: list[PrimaryOutcome] = []
    for row in sorted(records.rows, key=lambda r: (records.sessions[r.session_id].pair, r.arm)):
        locked = records.sessions[row.session_id]
        used = records.used.get(row.session_id)
        entry = PrimaryOutcome(pair=locked.pair, task=row.task, comparison=row.comparison,
                               arm=row.arm, session_id=row.session_id,
                               label=not_used_reason(row))
        if used is not None:
            entry.label = primary_label(used.grade)
            entry.verdict = used.grade.verdict if used.grade else None
            entry.not_determined_for = dict(used.grade.configurations_not_run) \
                if used.grade else {}
            entry.complete = used.grade is not None and used.grade.verdict in PASSING_VERDICTS
        rows.append(entry)
    counts: dict[tuple[str, str], ArmCount] = {}
    for entry in rows:
        if entry.complete is None:
            continue
        key = (entry.arm, entry.comparison)
        count = counts.setdefault(key, ArmCount(arm=entry.arm, comparison=entry.comparison,
                                                sessions=0, complete=0,
                                                not_determined_for_cuda=0))
        count.sessions += 1
        count.complete += int(entry.complete)
        count.not_determined_for_cuda += int(entry.verdict == "complete_on_cpu")
    return PrimarySection(rows=rows, by_arm=[counts[k] for k in sorted(counts)])


def contract_classes(used: UsedSession) -> dict[str, str]:
    """Each contract of the counted grade -> its class (pass, silent_regression, ...)."""
    if used.grade_report is None:
        return {}
    return {c.id: CONTRACT_CLASS[c.outcome] for c in used.grade_report.contracts}


def contracts_section(records: StudyRecords) -> ContractsSection:
    grid = {sid: contract_classes(used) for sid, used in sorted(records.used.items())}
    contracts = sorted({c for cells in grid.values() for c in cells})
    by_arm: list[ContractCounts] = []
    totals: dict[str, dict[str, int]] = {}
    arms = sorted({used.record.arm for used in records.used.values()})
    for arm in arms:
        totals[arm] = {c: 0 for c in CONTRACT_CLASSES}
        for contract in contracts:
            counts: dict[str, int] = dict.fromkeys(CONTRACT_CLASSES, 0)
            for sid, cells in grid.items():
                if records.used[sid].record.arm == arm and contract in cells:
                    counts[cells[contract]] += 1
                    totals[arm][cells[contract]] += 1
            by_arm.append(ContractCounts(contract=contract, arm=arm, counts=counts))
    return ContractsSection(contracts=contracts, grid=grid, by_arm=by_arm, totals=totals)


def figure_kind(name: str) -> str | None:
    """Which task figure a recorded property is, by its name; None: not a figure."""
    low = name.lower()
    subject = low.removeprefix("run:")  # a check's run: ``run:<job>:wall_s``
    if subject.startswith(("reference", "reported", "expected", "baseline")):
        # The reference's, the pristine baseline's (a check's comparison run), or the
        # candidate's own claim: not the judge's measure of the submission.
        return None
    if low == "heldout_loss" or low.endswith("_heldout_loss"):
        return "held-out loss"
    if "memory" in low or ("peak" in low and low.endswith(("_bytes", "_mb", "_mib", "_gib"))):
        return "memory"
    if "throughput" in low or low.endswith(("_per_s", "per_second")):
        return "throughput"
    if low == "train_s" or low.endswith((":wall_s", "_wall_s")):
        return "time"
    return None


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def quality_section(records: StudyRecords) -> QualitySection:
    eligible: list[str] = []
    figures: list[QualityFigure] = []
    for sid, used in sorted(records.used.items()):
        if used.grade is None or used.grade.verdict not in PASSING_VERDICTS:
            continue
        if used.grade_report is None:
            continue
        eligible.append(sid)
        for contract in used.grade_report.contracts:
            props = contract.evidence.get("properties") or {}
            if not isinstance(props, dict):
                continue
            for name, raw in sorted(props.items()):
                kind, value = figure_kind(str(name)), _number(raw)
                if kind is None or value is None:
                    continue
                figures.append(QualityFigure(session_id=sid, arm=used.record.arm,
                                             contract=contract.id, figure=str(name),
                                             kind=kind,  # type: ignore[arg-type]
                                             value=value))
    return QualitySection(eligible_sessions=eligible, figures=figures)
