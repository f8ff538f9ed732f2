"""pytest plugin of the judge's hidden-check run (``-p grading.judge_plugin``).

Three jobs:
- a check whose candidate process crashed or hung (:class:`grading.probe.CandidateRunFailed`)
  is tagged with the ``grading_outcome`` property, so the contract reads ``crash``/``hang``
  rather than ``fail``;
- a guard on the seal itself: after each test, no module may have been imported from the
  candidate's tree, the probes or a job folder, and none of them may be on ``sys.path``; and a
  check may not end on a ``SealError`` (candidate processes that survived SIGKILL). Either is a
  grader defect: the test is failed and the grader is told through a flag file
  (``GRADING_JUDGE_FLAGS``), which turns the whole grade into a grader error;
- a check that ends on a ``JudgeLimitation`` (the judge's machinery could not evaluate what it
  had accepted) is the same kind of grader defect, never the submission's ``fail``;
- each check's declaration of where its observations are made (``grading.observation``:
  judge, outside, candidate_report) in its evidence, ``undeclared`` when it makes none;
- each check's evidence as soon as it finishes (``GRADING_JUDGE_EVIDENCE``, one JSON line per
  check: outcome, duration, properties, message), so a judge killed later in its run (for
  memory, by a hang's limit) leaves the evidence of the checks it had finished, not only
  their outcomes from its log.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Generator
from typing import Any

import pytest

from grading import observation, sealed
from grading.errors import JudgeLimitation
from grading.probe import CandidateRunFailed
from grading.sealed import SealError

OUTCOME_PROPERTY = "grading_outcome"
FLAGS_VAR = sealed.JUDGE_FLAGS_VAR
EVIDENCE_VAR = "GRADING_JUDGE_EVIDENCE"
_GUARDED_VARS = ("GRADING_WORKDIR", "GRADING_PROBES", "GRADING_CANDIDATE_AREA")


class JudgeContaminated(RuntimeError):
    """The judge process imported or put on its path code the candidate controls."""


def _guarded_roots() -> list[str]:
    roots = []
    for var in _GUARDED_VARS:
        if value := os.environ.get(var):
            roots.append(os.path.realpath(value).rstrip("/") + "/")
    return roots


def _under(path: str, roots: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real.startswith(r) or real + "/" == r for r in roots)


def contamination() -> list[str]:
    roots = _guarded_roots()
    if not roots:
        return []
    found = [f"sys.path entry {p}" for p in sys.path if p and _under(p, roots)]
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and _under(file, roots):
            found.append(f"module {name} from {file}")
    return found


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{observation.MARKER}(*kinds, reports=None, corroborated_by=None): where the "
        "check's observations are made (grading.observation)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before anything of the check runs, so even a check that errors in its fixtures says
    # where it would have looked.
    item.user_properties.extend(observation.evidence_properties(item))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    outcome = yield
    found = contamination()
    if found:
        message = f"grader defect: the judge imported candidate code: {'; '.join(found[:5])}"
        sealed.flag_grader_defect(f"{item.nodeid}: {message}")
        outcome.force_exception(JudgeContaminated(message))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, Any, None]:
    error = call.excinfo.value if call.excinfo is not None else None
    if isinstance(error, CandidateRunFailed):
        item.user_properties.append((OUTCOME_PROPERTY, error.outcome))
    elif isinstance(error, SealError):
        # The boundary itself failed (a candidate process that would not die): no verdict.
        sealed.flag_grader_defect(f"{item.nodeid}: grader defect: {error}")
    elif isinstance(error, JudgeLimitation):
        # The judge could not evaluate what it accepted: its own gap, so no verdict either.
        sealed.flag_grader_defect(f"{item.nodeid}: grader defect: the judge's limitation: "
                                  f"{error}")
    yield


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get(EVIDENCE_VAR)
    if not path or not (report.when == "call" or report.failed):
        return
    line = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
            "duration_s": report.duration,
            "properties": {str(k): str(v) for k, v in report.user_properties},
            "message": (report.longreprtext or "")[-1000:]}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
