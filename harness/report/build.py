"""``harness report --study S``: collect and check the records, compute every section, write
``report.json``, ``report.md`` and ``report.html`` under ``reports/<study>/`` (or ``--out``).

The report only reads records: nothing under the runs folder is written, and each output file
is replaced atomically, so a report stopped halfway leaves the previous one whole.
"""

from __future__ import annotations

from pathlib import Path

from harness.paths import REPO_ROOT
from harness.records.attempt import atomic_write
from harness.report.calibration import calibration_section
from harness.report.collect import StudyRecords, collect
from harness.report.costs import costs_section
from harness.report.decision import decision_section
from harness.report.diagnostics import diagnostics_section
from harness.report.model import Report
from harness.report.outcomes import (
    contracts_section,
    primary_section,
    quality_section,
    session_summaries,
)
from harness.report.paired import paired_section
from harness.report.trajectory import trajectory_section
from harness.text import json_dumps

JSON_NAME = "report.json"
MARKDOWN_NAME = "report.md"
HTML_NAME = "report.html"


def compute(records: StudyRecords) -> Report:
    total = len(records.rows)
    graded = sum(row.state == "finished" for row in records.rows)
    partial = graded < total
    status = (f"partial: {graded} of {total} sessions graded" if partial
              else f"complete: all {total} sessions graded")
    costs = costs_section(records)
    diagnostics = diagnostics_section(records)
    calibration = calibration_section(records)
    study_file = records.study_path
    shown = (study_file.resolve().relative_to(REPO_ROOT).as_posix()
             if study_file.resolve().is_relative_to(REPO_ROOT) else str(study_file))
    return Report(
        study=records.study.name, study_file=shown, lock=records.citation,
        sessions_total=total, sessions_graded=graded, partial=partial, status_line=status,
        sessions=session_summaries(records), left_out=records.left_out,
        primary=primary_section(records), contracts=contracts_section(records),
        trajectory=trajectory_section(records), quality=quality_section(records), costs=costs,
        diagnostics=diagnostics, calibration=calibration,
        paired=paired_section(records, costs),
        decision=decision_section(records, diagnostics, calibration))


def default_out(study_name: str) -> Path:
    return REPO_ROOT / "reports" / study_name


def write_report(study_path: Path, out: Path | None = None) -> tuple[Report, Path]:
    """Compute the report and write its three files; (the report, the folder)."""
    from harness.report.html import render_html
    from harness.report.markdown import render_markdown

    records = collect(study_path)
    report = compute(records)
    folder = out or default_out(report.study)
    folder.mkdir(parents=True, exist_ok=True)
    data = report.model_dump(mode="json")
    atomic_write(folder / JSON_NAME, (json_dumps(data, indent=1) + "\n").encode())
    atomic_write(folder / MARKDOWN_NAME, render_markdown(report).encode())
    atomic_write(folder / HTML_NAME, render_html(report).encode())
    return report, folder
