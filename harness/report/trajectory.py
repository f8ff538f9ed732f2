"""Section 3: each session's trajectory from its snapshots' blind grades: time, tokens and
compute to the first snapshot that passes every contract, regressions (a contract passing at
one snapshot and failing at a later one) and whether they were repaired before submit, and
the defects left at submit."""

from __future__ import annotations

from datetime import datetime

from harness.records import events
from harness.records.tasks import FAILING
from harness.report.collect import StudyRecords, UsedSession
from harness.report.model import Regression, SnapshotPoint, Trajectory, TrajectorySection
from harness.report.outcomes import PASSING_VERDICTS

DIAGNOSTIC_TRIGGER = "traincheck"


def _seconds(start: str, at: str) -> float:
    return round((datetime.fromisoformat(at) - datetime.fromisoformat(start)).total_seconds(), 3)


def _counters(typed: list[events.TypedEvent], before_seq: int) -> tuple[int, int]:
    """(tokens, candidate runs) the ledger had counted before event ``before_seq``."""
    tokens = runs = 0
    for event in typed:
        if event.seq >= before_seq:
            break
        if isinstance(event.data, events.BudgetCounts):
            if event.data.tokens_total is not None:
                tokens = event.data.tokens_total
            if event.data.candidate_runs is not None:
                runs = event.data.candidate_runs
    return tokens, runs


def trajectory(used: UsedSession) -> Trajectory:
    found = Trajectory(session_id=used.record.session_id, arm=used.record.arm,
                       graded=used.snapshot_grades is not None)
    final = used.grade_report.contracts if used.grade_report is not None else []
    found.residual_defects = sorted(c.id for c in final if c.outcome in FAILING)
    if used.snapshot_grades is None or not used.typed:
        return found
    start = used.typed[0].ts
    taken = [e for e in used.typed if isinstance(e.data, events.Snapshot)]
    graded: list[tuple[events.TypedEvent, dict[str, str]]] = []
    for event in taken:
        data = event.data
        assert isinstance(data, events.Snapshot)
        grade = used.snapshot_grades.get(data.index)
        if grade is None or grade.verdict == "grader_error":
            continue
        seconds = _seconds(start, event.ts)
        point = SnapshotPoint(
            index=data.index, trigger=data.trigger, seconds=seconds,
            passing=sum(o == "pass" for o in grade.contracts.values()),
            judged=sum(o != "not_run" for o in grade.contracts.values()),
            verdict=grade.verdict, diagnostic=data.trigger == DIAGNOSTIC_TRIGGER)
        found.snapshots.append(point)
        graded.append((event, grade.contracts))
        if found.first_passing_snapshot is None and grade.verdict in PASSING_VERDICTS:
            tokens, runs = _counters(used.typed, event.seq)
            found.first_passing_snapshot = data.index
            found.seconds_to_first_pass = seconds
            found.tokens_to_first_pass = tokens
            found.candidate_runs_to_first_pass = runs
            found.cpu_hours_to_first_pass = round(used.locked.cpus * seconds / 3600, 6)
    # Each contract's last judged outcome (not_run judged nothing) and where: a pass followed
    # by a failing judgement is a regression; repaired if the submitted code passes it.
    submitted = {c.id: c.outcome for c in final}
    last: dict[str, tuple[str, int]] = {}
    for position, (event, contracts) in enumerate(graded):
        index = _index(event)
        for contract, outcome in sorted(contracts.items()):
            if outcome == "not_run":
                continue
            previous = last.get(contract)
            if previous is not None and previous[0] == "pass" and outcome in FAILING:
                later = [c[contract] for _e, c in graded[position + 1:]
                         if c.get(contract, "not_run") != "not_run"]
                at_submit = submitted.get(contract) or (later[-1] if later else outcome)
                found.regressions.append(Regression(
                    contract=contract, passed_at=previous[1], failed_at=index,
                    repaired_before_submit=at_submit == "pass"))
            last[contract] = (outcome, index)
    return found


def _index(event: events.TypedEvent) -> int:
    assert isinstance(event.data, events.Snapshot)
    return event.data.index


def trajectory_section(records: StudyRecords) -> TrajectorySection:
    return TrajectorySection(sessions=[trajectory(used)
                                       for _sid, used in sorted(records.used.items())])
