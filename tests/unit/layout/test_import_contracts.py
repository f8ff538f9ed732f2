"""The import contracts hold, and they can fail: a copy of the tree with one wrong-way import
breaks the layers contract and names the arrow."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.paths import REPO_ROOT

LINT = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    # Run from the copy, with it first on the path: grimp reads the packages it imports.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    for name in ("harness", "grading", "diagnostics"):
        shutil.copytree(REPO_ROOT / name, root / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    result = _lint(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_wrong_way_import_breaks_the_layers(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    records = root / "harness" / "records" / "attempt.py"
    records.write_text(records.read_text() + "\nfrom harness.study import session  # noqa\n")
    result = _lint(root)
    assert result.returncode != 0
    assert "harness is layered" in result.stdout and "BROKEN" in result.stdout
    assert "harness.records.attempt -> harness.study.session" in result.stdout


def test_harness_cannot_import_the_grader_program(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    grade = root / "harness" / "oracle" / "grade.py"
    grade.write_text(grade.read_text() + "\nfrom grading import sealed  # noqa\n")
    result = _lint(root)
    assert result.returncode != 0
    assert "host-facing record modules BROKEN" in result.stdout.replace("\n", " ")
