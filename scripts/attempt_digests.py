"""Digests of what an attempt produced, to compare two runs of the same session (e.g. the demo
before and after a refactoring that must not change behaviour).

- ``diff``: sha256 of the attempt's ``submission.diff``, byte for byte.
- ``grade``: sha256 of the graded facts of each grade (``grades/grade-N/out/grade.json``) in a
  canonical form: the verdict, the trees graded (baseline, hidden, graded), the configurations
  not run, the counts, and each contract's id, kind, outcome and reason. Times, run ids, logs
  and the grader image's id are left out: they differ on every run, or when only the grader's
  packaging changed, without any verdict changing.

It reads records as files, so it reads any checkout's records:

    .venv/bin/python scripts/attempt_digests.py runs/demo/moe-router-pair1-control/attempt-1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from grading.hashing import file_sha256
from harness.records.transcript import canonical_json


def graded_facts(grade: dict[str, Any]) -> dict[str, Any]:
    return {
        "verdict": grade["verdict"],
        "task_id": grade["task_id"],
        "trees": {k: grade[k] for k in ("baseline_tree_sha256", "hidden_tree_sha256",
                                        "graded_tree_sha256")},
        "configurations_not_run": grade["configurations_not_run"],
        "counts": grade["counts"],
        "contracts": [{k: c.get(k) for k in ("id", "kind", "outcome", "reason")}
                      for c in grade["contracts"]],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("attempt", type=Path, help="an attempt folder (runs/<study>/<session>/"
                        "attempt-N)")
    attempt = parser.parse_args().attempt
    diff = attempt / "submission.diff"
    if not diff.is_file():
        print(f"error: {diff} does not exist (fix: name an attempt folder that was submitted)",
              file=sys.stderr)
        return 2
    print(f"diff   {file_sha256(diff)}  {diff}")
    grades = sorted((attempt / "grades").glob("grade-*/out/grade.json"),
                    key=lambda p: int(p.parent.parent.name.removeprefix("grade-")))
    for path in grades:
        grade = json.loads(path.read_text())
        facts = hashlib.sha256(canonical_json(graded_facts(grade))).hexdigest()
        print(f"grade  {facts}  {path} ({grade['verdict']})")
    if not grades:
        print(f"error: {attempt} has no grade (fix: harness grade {attempt})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
