"""grading.trace: the lines of the graded code that ran, written even by processes that leave
through ``os._exit``; inert when the environment does not ask for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from grading import trace
from harness.paths import REPO_ROOT

MODULE = '''\
def used(x):
    if x > 0:
        return x + 1
    return -x


def unused():
    return 42
'''
RUN = ("import grading.trace as t; t.install(); import sys; sys.path.insert(0, {root!r}); "
       "import mod; mod.used(3); import os; os._exit(0)")


def _run(root: Path, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-c", RUN.format(root=str(root))], check=True,
                   env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env})


def test_lines_that_ran_are_recorded_even_through_os_exit(tmp_path: Path) -> None:
    root, out = tmp_path / "tree" / "pkg", tmp_path / "trace"
    root.mkdir(parents=True)
    out.mkdir()
    (root / "mod.py").write_text(MODULE)
    _run(root, {trace.TRACE_DIR_VAR: str(out), trace.TRACE_ROOT_VAR: str(tmp_path / "tree")})
    ran = trace.read_lines_by_check(str(out))[trace.PUBLIC_KEY]
    lines = trace.lines_of(ran, "pkg/mod.py")
    # The module body (both defs), then used(3): its test and the first return.
    assert {1, 2, 3, 7} <= lines
    assert 4 not in lines and 8 not in lines  # the other return, and unused()'s body
    # Nothing outside the root is recorded (the standard library, torch, the tracer itself).
    assert all(p.endswith("/pkg/mod.py") for p in ran)


def test_inert_without_the_environment(tmp_path: Path) -> None:
    root, out = tmp_path / "tree", tmp_path / "trace"
    root.mkdir()
    out.mkdir()
    (root / "mod.py").write_text(MODULE)
    _run(root, {trace.TRACE_ROOT_VAR: str(root)})  # no trace folder: nothing happens
    assert list(out.iterdir()) == []
    assert trace.read_lines_by_check(str(tmp_path / "absent")) == {}


def test_each_process_files_its_lines_under_its_check(tmp_path: Path) -> None:
    root, out = tmp_path / "tree" / "pkg", tmp_path / "trace"
    root.mkdir(parents=True)
    out.mkdir()
    (root / "mod.py").write_text(MODULE)
    env = {trace.TRACE_DIR_VAR: str(out), trace.TRACE_ROOT_VAR: str(tmp_path / "tree")}
    _run(root, {**env, trace.TRACE_TEST_VAR: "test_a.py::test_one[x]"})
    _run(root, env)  # no check named: the public tests' processes
    # A check id cannot forge a record line of its own.
    _run(root, {**env, trace.TRACE_TEST_VAR: "evil\n/etc/passwd\t1"})
    by_check = trace.read_lines_by_check(str(out))
    assert set(by_check) == {"test_a.py::test_one[x]", trace.PUBLIC_KEY, "evil /etc/passwd 1"}
    for lines in by_check.values():
        assert {1, 2, 3, 7} <= trace.lines_of(lines, "pkg/mod.py")
        assert all(p.endswith("/pkg/mod.py") for p in lines)
