"""Section 7, track 1 (calibration), apart from the agent comparison: per task, the table of
known faults x the oracle x TrainCheck, the capability matrix, the coverage denominator and
the unsupported contracts, from the committed reports the lock digests; and the gate's rule
for the task (a coverage-audit task is kept out of the benefit comparison)."""

from __future__ import annotations

from collections import Counter

from harness.records.attempt import read_model_file
from harness.report.collect import StudyRecords
from harness.report.model import CalibrationRowSummary, CalibrationSection, TaskCalibration
from harness.traincheck.calibrate import CalibrationReport
from harness.traincheck.capabilities import CapabilityMatrix

SUPPORTED = "supported_by_learned_rule"


def task_calibration(records: StudyRecords, task_id: str) -> TaskCalibration:
    task = next(t for t in records.study.tasks if t.id == task_id)
    gate = next((g for g in records.frozen.lock.gate if g.task == task_id), None)
    found = TaskCalibration(task=task_id, comparison=task.comparison,
                            gate_rule=gate.rule if gate else None,
                            gate_detail=gate.detail if gate else None, calibration_found=False)
    folder = task.traincheck_dir()
    calibration = folder / "calibration.json"
    if calibration.is_file():
        report = read_model_file(calibration, CalibrationReport, "a calibration report")
        found.calibration_found = True
        confirmed: set[str] = set()
        detected: set[str] = set()
        for config in report.configs.values():
            for row in config.rows:
                if row.kind != "fault":
                    found.controls += 1
                    found.false_alarms += int(row.verdict == "false_alarm")
                    continue
                ok = row.oracle is not None and row.oracle.confirmed
                found.rows.append(CalibrationRowSummary(
                    fault=row.variant.removeprefix("fault:"), config=row.config,
                    oracle=row.oracle.verdict if row.oracle else "no oracle verdict",
                    oracle_confirmed=ok, traincheck=row.verdict))
                if ok:
                    confirmed.add(row.variant)
                    if row.verdict == "detected":
                        detected.add(row.variant)
        found.faults_confirmed, found.faults_detected = len(confirmed), len(detected)
    capabilities = folder / "capabilities.json"
    if capabilities.is_file():
        matrix = read_model_file(capabilities, CapabilityMatrix, "a capability matrix")
        found.capabilities_found = True
        found.capability = {config: {kind: cell.status for kind, cell in probe.kinds.items()}
                            for config, probe in sorted(matrix.probes.items())}
        found.coverage = dict(sorted(Counter(c.status for c in matrix.contracts).items()))
        found.coverage_denominator = len(matrix.contracts)
        found.unsupported_contracts = sorted(c.contract for c in matrix.contracts
                                             if c.status != SUPPORTED)
    return found


def calibration_section(records: StudyRecords) -> CalibrationSection:
    return CalibrationSection(tasks=[task_calibration(records, t.id)
                                     for t in records.study.tasks])
