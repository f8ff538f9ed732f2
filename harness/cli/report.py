"""Face of the study report: ``harness report --study S``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.common import StudyOption, clear_errors, console, log, study_path


@clear_errors
def report(
    study: StudyOption = None,
    out: Annotated[Path | None, typer.Option(
        metavar="DIR", help="where the three files go (default: reports/<study>/)",
        show_default=False)] = None,
) -> None:
    """Write the study's report: report.md, a self-contained report.html with its plots, and
    report.json with every number they show, from the lock, the attempts, their grades and
    snapshot grades, the audit's judgements and the calibration reports.

    It verifies the lock and every attempt it uses, lists each attempt it leaves out and why,
    and works on a study still running (labelled partial). It only reads records.
    """
    from harness.report.build import write_report
    from harness.report.summary import summary_table

    written, folder = write_report(study_path(study), out)
    console.print(summary_table(written))
    if written.left_out:
        log(f"{len(written.left_out)} attempt(s) left out (see the report for why)")
    log(f"wrote {folder}/report.md, report.html and report.json "
        f"(lock {written.lock.sha256[:16]}, revision {written.lock.revision})")
