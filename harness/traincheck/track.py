"""The diagnostic track's reports, assembled: the capability matrix and the calibration.

Each function reads the committed reports it builds on, runs what it must, and writes its own
report pair (``<name>.json`` and ``<name>.md``) into the task's report folder.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from harness.errors import HarnessError
from harness.traincheck import calibrate as cal
from harness.traincheck import capabilities as cap
from harness.traincheck.reference import CPU_CONFIGURATIONS
from harness.traincheck.variants import TaskFiles


def cpu_configs(configs: list[str] | None) -> list[str]:
    """The CPU configurations asked for (all by default); an unknown one is refused."""
    chosen = configs or list(CPU_CONFIGURATIONS)
    for config in chosen:
        if config not in CPU_CONFIGURATIONS:
            raise HarnessError(f"unknown CPU configuration {config!r}",
                               f"use one of {', '.join(CPU_CONFIGURATIONS)}")
    return chosen


def write_report(folder: Path, stem: str, model: BaseModel, markdown: str) -> Path:
    """``<stem>.json`` and ``<stem>.md`` in ``folder``; returns the markdown's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(model.model_dump_json(indent=1) + "\n")
    (folder / f"{stem}.md").write_text(markdown)
    return folder / f"{stem}.md"


def build_capabilities(files: TaskFiles, configs: list[str], *, reuse_probe: bool,
                       log: Callable[[str], None]) -> cap.CapabilityMatrix:
    """The capability matrix from probe traces (or the committed probes) and each contract's
    support, using the committed calibration's detections when there is one."""
    out = files.reports / "capabilities.json"
    if reuse_probe:
        if not out.exists():
            raise HarnessError(f"{out} does not exist", "run without --reuse-probe first")
        previous = cap.CapabilityMatrix.model_validate_json(out.read_text())
        version, probes = previous.traincheck_version, previous.probes
    else:
        version, probes = cap.probe(files, configs, log=log)
    calibration = files.reports / "calibration.json"
    detected: dict[str, list[str]] = {}
    faults: dict[str, tuple[list[str], list[str]]] = {}
    if calibration.exists():
        calibrated = cal.CalibrationReport.model_validate_json(calibration.read_text())
        detected, faults = cal.detections_by_contract(calibrated), cal.fault_coverage(calibrated)
    stable, evidence = cap.stable_names(probes)
    matrix = cap.CapabilityMatrix(
        task=files.task, command=f"harness traincheck capabilities --task {files.task}",
        traincheck_version=version, probes=probes, stable_names=stable,
        stable_names_evidence=evidence, calibration_used=calibration.exists(),
        contracts=cap.contract_coverage(files, probes, detected, faults))
    write_report(files.reports, "capabilities", matrix, cap.render_markdown(matrix))
    return matrix


def rejudge_calibration(files: TaskFiles) -> cal.CalibrationReport:
    """The committed calibration's verdicts derived again from what it recorded; runs nothing."""
    path = files.reports / "calibration.json"
    if not path.exists():
        raise HarnessError(f"{path} does not exist", "run `harness calibrate` first")
    report = cal.CalibrationReport.model_validate_json(path.read_text())
    report.configs = {k: cal.judge(v) for k, v in report.configs.items()}
    report.summary = cal.summarise(report.configs, report.summary.unsupported_contracts)
    write_report(files.reports, "calibration", report, cal.render_markdown(report))
    return report


def add_resume_to_calibration(files: TaskFiles, configs: list[str], *,
                              log: Callable[[str], None]) -> cal.CalibrationReport:
    """The resume probe added to the committed calibration's rows (``cal.add_resume``)."""
    report = cal.add_resume(
        files, configs, log=log,
        command=f"harness calibrate --task {files.task} --resume-only "
                + " ".join(f"--config {c}" for c in configs))
    write_report(files.reports, "calibration", report, cal.render_markdown(report))
    return report


def run_calibration(files: TaskFiles, configs: list[str], *,
                    log: Callable[[str], None]) -> cal.CalibrationReport:
    """Track 1 for a task; contracts the capability matrix found unobservable are listed as
    unsupported."""
    unsupported: list[str] = []
    matrix_path = files.reports / "capabilities.json"
    if matrix_path.exists():
        matrix = cap.CapabilityMatrix.model_validate_json(matrix_path.read_text())
        unsupported = [c.contract for c in matrix.contracts
                       if c.status == "missing_instrumentation"]
    report = cal.calibrate(files, configs, command=f"harness calibrate --task {files.task}",
                           unsupported=unsupported, log=log)
    write_report(files.reports, "calibration", report, cal.render_markdown(report))
    return report


def run_heldout_regressions(files: TaskFiles, configs: list[str], *,
                            log: Callable[[str], None]) -> cal.CalibrationReport:
    """Detection on the oracle regressions as held-out variants, apart from calibration
    (``heldout-regressions.{json,md}``)."""
    report = cal.calibrate(files, configs, regressions=True, log=log,
                           command=f"harness calibrate --task {files.task} --regressions "
                           + " ".join(f"--config {c}" for c in configs))
    write_report(files.reports, "heldout-regressions", report, cal.render_markdown(report))
    return report
