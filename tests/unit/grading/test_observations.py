"""Every hidden check declares where its observations are made (``grading.observation``).

Read the way the grader reads the checks (``ast``, never imported), so this runs without the
tasks' dependencies; the judge's pytest plugin then copies the declaration into each check's
evidence (the last tests here run it). docs/grading.md lists every check with its kinds.
"""

from __future__ import annotations

import ast
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from grading import observation
from grading.hidden import discover_hidden_tests
from tests.helpers import run_judge_checks

# observed_in() makes its marker in this test's own pytest, where only the judge's plugin would
# register it.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")

ROOT = Path(__file__).resolve().parents[3]
HIDDEN = ROOT / "hidden"
DOC = ROOT / "docs" / "grading.md"
TASKS = sorted(p.parent.name for p in HIDDEN.glob("*/checks"))
NAMES = {"JUDGE": observation.JUDGE, "OUTSIDE": observation.OUTSIDE,
         "CANDIDATE_REPORT": observation.CANDIDATE_REPORT}


def _literal(node: ast.expr) -> object:
    if isinstance(node, ast.Name) and node.id in NAMES:
        return NAMES[node.id]
    if isinstance(node, ast.Attribute) and node.attr in NAMES:
        return NAMES[node.attr]
    return ast.literal_eval(node)


def declarations(task: str) -> dict[str, tuple[str, ...] | str]:
    """Each test function of a task's checks: its declared kinds, or why it has none."""
    return {k: v[0] if isinstance(v, tuple) else v for k, v in _declared(task).items()}


def uncorroborated(task: str) -> list[str]:
    """The checks of a task whose candidate reports nothing in the same check corroborates."""
    return [k for k, v in _declared(task).items() if isinstance(v, tuple) and v[1]]


def _declared(task: str) -> dict[str, tuple[tuple[str, ...], bool] | str]:
    found: dict[str, tuple[tuple[str, ...], bool] | str] = {}
    checks = HIDDEN / task / "checks"
    for path in sorted(checks.rglob("test_*.py")):
        module = ast.parse(path.read_bytes())
        for node in module.body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test")):
                continue
            nodeid = f"{path.relative_to(checks).as_posix()}::{node.name}"
            calls = [d for d in node.decorator_list if isinstance(d, ast.Call) and (
                getattr(d.func, "id", None) == observation.MARKER
                or getattr(d.func, "attr", None) == observation.MARKER)]
            if len(calls) != 1:
                found[nodeid] = f"{len(calls)} observed_in declarations"
                continue
            call = calls[0]
            try:
                kinds = tuple(_literal(a) for a in call.args)
                kwargs = {k.arg: _literal(k.value) for k in call.keywords}
                observation.validate(kinds, kwargs.get("reports"), kwargs.get("corroborated_by"),
                                     kwargs.get("uncorroborated"))
            except (ValueError, observation.DeclarationError) as exc:
                found[nodeid] = f"malformed: {exc}"
                continue
            ordered = tuple(str(k) for k in observation.KINDS if k in kinds)
            found[nodeid] = (ordered, kwargs.get("uncorroborated") is not None)
    return found


def test_the_study_tasks_have_checks_to_classify() -> None:
    assert {"tiny-regression", "moe-router", "hybrid-arch"} <= set(TASKS)


@pytest.mark.parametrize("task", TASKS)
def test_every_hidden_check_declares_where_it_observes(task: str) -> None:
    found = declarations(task)
    # Every check the grader discovers is a function found here (no class-based checks).
    discovered = {t.nodeid for t in discover_hidden_tests(HIDDEN / task / "checks")}
    assert discovered == set(found), discovered ^ set(found)
    undeclared = {k: v for k, v in found.items() if isinstance(v, str)}
    assert not undeclared, undeclared


def test_a_candidate_report_never_stands_alone_silently() -> None:
    report = observation.CANDIDATE_REPORT
    with pytest.raises(observation.DeclarationError, match="never stands alone"):
        observation.observed_in(report, reports="r", corroborated_by="c")
    with pytest.raises(observation.DeclarationError, match="never stands alone"):
        observation.observed_in(report, reports="r")
    with pytest.raises(observation.DeclarationError, match="reports="):
        observation.observed_in(observation.JUDGE, report)
    with pytest.raises(observation.DeclarationError, match="corroborated_by="):
        observation.observed_in(observation.JUDGE, report, reports="r", uncorroborated="u")
    with pytest.raises(observation.DeclarationError, match="unknown"):
        observation.observed_in("probe")
    with pytest.raises(observation.DeclarationError, match="belong to"):
        observation.observed_in(observation.JUDGE, reports="r")
    # The two accepted forms: corroborated in the same check, or a gap said out loud.
    observation.observed_in(observation.OUTSIDE, report, reports="r", corroborated_by="c")
    observation.observed_in(report, reports="r", uncorroborated="why not yet")


def test_the_grading_doc_names_every_uncorroborated_check_as_left_open() -> None:
    left_open = DOC.read_text().split("## What is left open", 1)[1]
    missing = [f"{task} {nodeid}" for task in TASKS for nodeid in uncorroborated(task)
               if f"`{nodeid.split('::')[-1]}`" not in left_open]
    assert not missing, missing


def test_the_grading_doc_lists_every_check_with_its_kinds() -> None:
    """docs/grading.md's table: one row per hidden check, its kinds as declared."""
    doc = DOC.read_text()
    missing = []
    for task in TASKS:
        for nodeid, kinds in declarations(task).items():
            if isinstance(kinds, str):
                missing.append(f"{task} {nodeid}: {kinds}")
                continue
            row = f"| `{task}` | `{nodeid.split('::')[-1]}` | {', '.join(kinds)} |"
            if row not in doc:
                missing.append(row)
    assert not missing, "\n".join(missing)


CHECKS = '''
import pytest
from grading.observation import CANDIDATE_REPORT, JUDGE, observed_in

@observed_in(JUDGE, CANDIDATE_REPORT, reports="what it raised", corroborated_by="the weights")
@pytest.mark.parametrize("n", [1, 2])
def test_declared(n, record_property):
    record_property("measured", n)

def test_undeclared():
    pass

@pytest.mark.observed_in("candidate_report")
def test_marked_by_hand():
    pass

@observed_in(CANDIDATE_REPORT, reports="its dtypes", uncorroborated="not yet")
def test_open():
    pass

@pytest.fixture
def broken():
    raise RuntimeError("setup fails")

@observed_in(JUDGE)
def test_setup_error(broken):
    pass
'''


def test_the_judge_plugin_puts_the_declaration_into_each_checks_evidence(tmp_path: Path) -> None:
    checks = tmp_path / "checks"
    checks.mkdir()
    (checks / "test_kinds.py").write_text(CHECKS)
    junit = tmp_path / "junit.xml"
    proc = run_judge_checks(checks, "--junitxml", str(junit))
    assert junit.is_file(), proc.stdout + proc.stderr
    props = {case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
             for case in ET.parse(junit).getroot().iter("testcase")}
    for name in ("test_declared[1]", "test_declared[2]"):
        assert props[name]["observed_in"] == "judge,candidate_report", props[name]
        assert props[name]["candidate_reports"] == "what it raised"
        assert props[name]["corroborated_by"] == "the weights"
        assert props[name]["measured"] in ("1", "2")
    assert props["test_undeclared"] == {"observed_in": "undeclared"}
    assert props["test_marked_by_hand"]["observed_in"].startswith("undeclared: a candidate_report")
    assert props["test_setup_error"]["observed_in"] == "judge"
    assert props["test_open"] == {"observed_in": "candidate_report",
                                  "candidate_reports": "its dtypes", "uncorroborated": "not yet"}
