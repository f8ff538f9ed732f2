"""A check that ends on the judge's own limitation makes the grade a grader defect, not a fail.

The judge's pytest plugin (``grading.judge_plugin``) runs real pytest on small checks here, as
the grader runs the hidden checks, with the flag file the grader reads afterwards.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import run_judge_checks

CHECKS = '''
from grading.errors import JudgeLimitation

def test_judge_cannot_evaluate():
    raise JudgeLimitation("the judge runs aten::example but cannot differentiate it")

def test_submission_fails():
    assert 1 == 2, "the submission's result differs"

def test_submission_crashes_the_comparison():
    raise RuntimeError("shapes do not match")
'''


def test_a_judge_limitation_is_flagged_and_a_plain_failure_is_not(tmp_path: Path) -> None:
    checks = tmp_path / "checks"
    checks.mkdir()
    (checks / "test_limits.py").write_text(CHECKS)
    flags = tmp_path / "flags"
    proc = run_judge_checks(checks, env={"GRADING_JUDGE_FLAGS": str(flags)})
    assert "3 failed" in proc.stdout, proc.stdout + proc.stderr
    lines = flags.read_text().splitlines()
    assert lines == ["test_limits.py::test_judge_cannot_evaluate: grader defect: the judge's "
                     "limitation: the judge runs aten::example but cannot differentiate it"]
