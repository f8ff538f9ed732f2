"""Helpers shared by test modules: running the CLI as a user would and reading its errors."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from harness.paths import REPO_ROOT

HARNESS = [sys.executable, "-m", "harness.cli"]
SOLVE = REPO_ROOT / "tests/fixtures/agents/tiny-regression-solve.yaml"


def run_judge_checks(checks: Path, *args: str, env: dict[str, str] | None = None
                     ) -> subprocess.CompletedProcess[str]:
    """Real pytest on the check files in ``checks`` with the judge's plugin
    (``grading.judge_plugin``), as the grader runs hidden checks, apart from this suite's own
    plugins and configuration."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null",
         "--rootdir", str(checks), "-p", "grading.judge_plugin", *args, str(checks)],
        cwd=checks.parent, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT),
             "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **(env or {})})


def solve_edits() -> list[dict[str, Any]]:
    """The fixture task's scripted solve without its reads and its runs (a plain training
    run, the public tests, a candidate run): its edits and its submit. For tests about what
    happens around a session (a matrix, a report), where the runs only cost time."""
    steps = yaml.safe_load(SOLVE.read_text())["steps"]
    return [s for s in steps if s["tool"] in ("write_file", "edit_file", "submit")]


def harness(*args: str, env: dict[str, str] | None = None,
            timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process; the timeout only guards the suite against a hang."""
    return subprocess.run([*HARNESS, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI's entry point run in this process, returning what a child process would have:
    its exit status, stdout and stderr. For the unit layer's many bad-input cases, where each
    child process paid an interpreter start and the command's imports (matplotlib for the
    report: a few seconds each). The integration layer runs the CLI as a child process, as a
    user does; ``test_the_cli_in_a_child_process_agrees`` holds the two to the same output."""
    from harness.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_env = sys.argv, dict(os.environ)
    sys.argv = ["harness", *args]
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code: int = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if isinstance(exc.code, str):
                    err.write(exc.code + "\n")
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["harness", *args], code, out.getvalue(), err.getvalue())


def one_error_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """The CLI's contract for bad input: exit 2, one ``error: ... fix: ...`` line, no traceback."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "fix:" in lines[0], lines
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def canaries() -> list[bytes]:
    found = [p.read_text().strip().encode() for p in sorted(REPO_ROOT.glob("hidden/*/CANARY"))]
    assert found, "every hidden/<task>/ must hold a CANARY"
    for token in found:
        assert token.startswith(b"HARNESS-CANARY-") and len(token) == len("HARNESS-CANARY-") + 36
    return found


def contains_any(chunks: Iterable[bytes], needles: list[bytes]) -> bytes | None:
    """Stream search that also finds a needle split across two chunks."""
    overlap = max(len(n) for n in needles) - 1
    tail = b""
    for chunk in chunks:
        window = tail + chunk
        for needle in needles:
            if needle in window:
                return needle
        tail = window[-overlap:]
    return None


def load_script(relative: str) -> ModuleType:
    """A script of this checkout (not a package module) imported by its path, e.g.
    ``scripts/qualify/teardown_loop.py``, registered under its stem."""
    path = REPO_ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # pydantic resolves the models' postponed annotations through sys.modules.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
