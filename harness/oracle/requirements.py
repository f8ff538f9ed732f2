"""The requirements trace: every requirement of a task's TASK.md names the checks that judge it.

``hidden/<task>/requirements.yaml`` quotes each requirement (each "must", each documented
option and default, each named part and specified behaviour) and lists the hidden checks that
judge it. Gold validation fails while the trace has a problem: a requirement no check judges
(a gap, stated as one), a check that does not exist, a quote that is not in TASK.md, a "must"
sentence or a `--option` of TASK.md that no requirement quotes. The trace is read statically:
the checks are the ``test_`` functions of the hidden checks' files, found without importing them.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

from harness.records.tasks import RequirementsTrace, load_yaml

TRACE_NAME = "requirements.yaml"
# Judges outside the hidden checks: the packet's public tests, and the grader itself, which
# restores every path outside the packet's editable_paths before any check runs.
OTHER_JUDGES = frozenset({"public-tests", "grader:editable-paths"})


def _collapsed(text: str) -> str:
    return " ".join(text.split())


def defined_checks(checks_dir: Path) -> list[str]:
    """``hidden:<file>::<function>`` for every test function of the hidden checks' files."""
    found: list[str] = []
    for path in sorted(checks_dir.glob("test_*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        found += [f"hidden:{path.name}::{node.name}" for node in tree.body
                  if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.name.startswith("test_")]
    return found


def _sentences(markdown: str) -> list[str]:
    """TASK.md's sentences (list items and paragraphs split at sentence ends), collapsed."""
    blocks = re.split(r"\n\s*\n|\n(?=\s*[-*] )", markdown)
    out: list[str] = []
    for block in blocks:
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`])", _collapsed(block)):
            if sentence:
                out.append(sentence.lstrip("-* "))
    return out


def trace_problems(task_md: Path, hidden_dir: Path) -> list[str]:
    """Everything the task's requirements trace lacks; empty when it is whole."""
    path = hidden_dir / TRACE_NAME
    if not path.is_file():
        return [f"no requirements trace ({path}): quote each requirement of TASK.md and name "
                "the checks that judge it"]
    trace = load_yaml(path, RequirementsTrace)
    assert isinstance(trace, RequirementsTrace)
    markdown = task_md.read_text()
    spec = _collapsed(markdown)
    checks = defined_checks(hidden_dir / "checks")
    problems: list[str] = []
    quoted = [_collapsed(r.text) for r in trace.requirements]
    for req, text in zip(trace.requirements, quoted, strict=True):
        if text not in spec:
            problems.append(f"requirement {req.id}: its text is not quoted from TASK.md")
        if not req.checks:
            problems.append(f"requirement {req.id}: no check judges it"
                            + (f" ({req.gap})" if req.gap else ""))
        for pattern in req.checks:
            if pattern not in OTHER_JUDGES and not fnmatch.filter(checks, pattern):
                problems.append(f"requirement {req.id}: no hidden check matches {pattern!r}")
    for sentence in _sentences(markdown):
        if re.search(r"\bmust\b", sentence, re.IGNORECASE) and not any(
                text in sentence or sentence in text for text in quoted):
            problems.append(f"TASK.md: no requirement quotes {sentence[:100]!r}")
    for option in sorted(set(re.findall(r"--[a-z][a-z0-9-]*", spec))):
        if not any(option in text for text in quoted):
            problems.append(f"TASK.md: no requirement quotes the option {option}")
    return problems
