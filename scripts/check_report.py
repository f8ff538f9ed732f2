"""The study report's acceptance checks on any study's records, e.g. a real pilot.

    .venv/bin/python scripts/check_report.py --study studies/pilot-offline.yaml \
        --report-dir reports/pilot-offline [--screenshot page.png]

1. every number of ``report.json`` computed again from the records by code that shares none
   with ``harness/report/`` (tests/report_recompute.py), and compared;
2. ``report.html`` in headless Chromium: every plot loaded, on screen and inked, and nothing
   fetched from anywhere (tests/report_page.py).

Exit 0 when both hold; otherwise each problem on a line of its own and exit 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.report_page import page_problems  # noqa: E402
from tests.report_recompute import compare, recompute  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, required=True)
    parser.add_argument("--report-dir", type=Path, required=True)
    parser.add_argument("--screenshot", type=Path)
    parser.add_argument("--repo-root", type=Path, default=ROOT,
                        help="the checkout whose runs/ holds the study (default: this one)")
    a = parser.parse_args()
    problems: list[str] = []
    report = json.loads((a.report_dir / "report.json").read_text())
    try:
        compare(report, recompute(a.study, a.repo_root))
        print("numbers: every section's numbers recomputed from the records agree")
    except AssertionError as exc:
        problems.append(f"numbers: {exc}")
    page = page_problems(a.report_dir / "report.html", a.screenshot)
    if not page:
        print("page: every plot is loaded, on screen and inked; nothing fetched")
    problems += [f"page: {p}" for p in page]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
