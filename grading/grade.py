"""Grade one submission: apply the diff to the baseline, undo what may not change, run contracts.

The flow, and why each step is there:

0. The judge (this process, root) checks the hidden tree against the digest the host sent.
   Candidate code never runs as the judge: see ``grading.sealed``.
1. The diff is applied to a copy of the pristine baseline with ``git apply --binary`` (atomic:
   all or nothing). A diff that does not apply is a result (``diff_rejected``), not an error.
2. Every path the agent may not change (``protected_paths``, and everything outside
   ``editable_paths``) is put back from the baseline; files added there are removed. The agent
   cannot make a contract pass by editing the tests, adding a ``conftest.py`` or a
   ``sitecustomize.py``. This restore is the last write to the graded tree: it is then made
   root-owned and read-only to the candidate uid, its digest is taken, and the digest is checked
   again before and after the hidden run.
3. The public test command runs as the candidate on its own copy of the graded tree; then the
   hidden checks run in the judge's pytest, which never imports candidate code: training runs
   and probes (``grading.probe``) run as the candidate, their outputs are read as data.
4. Before the verdict is written every candidate process is killed, and the hidden tree's
   digest is checked again.

Hidden checks run in one pytest process when all goes well. When that process hangs or dies,
the test it was in gets ``hang``/``crash``, and the tests it never reached run again in a new
process, so one bad test does not take every other contract down with it.
"""

from __future__ import annotations

import ast
import hashlib
import os
import platform
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from importlib import metadata
from pathlib import Path
from typing import Any

from grading import sealed
from grading.judge_plugin import FLAGS_VAR
from grading.models import (
    ContractResult,
    DiffInfo,
    GradeReport,
    Outcome,
    RestoreInfo,
    SealInfo,
    configuration_results,
    count_outcomes,
    verdict_for,
)
from grading.packet import CUDA_CONFIGURATIONS, PacketSpec
from grading.probe import PROBES_VAR
from grading.run import RunResult, Watchdog, run_command, signal_name

PUBLIC_CONTRACT_ID = "public-tests"
# Hidden checks set this junit property ("crash" or "hang") when the run they judge did not
# finish, so the contract reads crash/hang (with the rank named in the message), not fail.
GRADING_OUTCOME_PROPERTY = "grading_outcome"
HIDDEN_PREFIX = "hidden:"
LOG_DIR = "logs"
EXCERPT_CHARS = 3000
# Environment variables passed from the grader's own environment to graded commands; everything
# else is dropped so nothing from the grading host (PYTEST_ADDOPTS, PYTHONPATH, ...) leaks in.
PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# Same role as the harness's attributes: in-tree .gitattributes cannot make git apply convert,
# filter or re-encode anything.
NEUTRAL_ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding !diff\n"
# Exit statuses a shell reports for a child killed by one of these signals (128 + N) mean the
# program crashed, not that it ran and reported failure.
_CRASH_SIGNALS = (
    signal.SIGSEGV,
    signal.SIGABRT,
    signal.SIGBUS,
    signal.SIGFPE,
    signal.SIGILL,
    signal.SIGKILL,
)
_SKIP_HASH_DIRS = frozenset({"__pycache__", ".pytest_cache", ".git"})


class GraderError(Exception):
    """Bad input the grader cannot produce a grade for; the CLI prints it as one line."""


@dataclass
class GradeOptions:
    baseline: Path
    packet: PacketSpec
    diff: Path
    hidden: Path
    out: Path
    submission_id: str
    work: Path
    # Total wall time for all hidden-check pytest processes together.
    hidden_timeout_s: float = 1800.0
    # No hidden test may run longer than this (measured as "no test finished for this long").
    hidden_test_timeout_s: float = 300.0
    # The hidden tree's digest as the host computed it; grading refuses any other tree.
    expect_hidden_sha256: str | None = None


@dataclass(frozen=True)
class Layout:
    """Folders under ``--work``, by who may touch them.

    ``judge/`` (0700): the judge's home, temp, git directory and flags; nothing of it is
    reachable by the candidate uid. ``trees/`` (root-owned, read-only to the candidate): the
    graded tree, the pristine baseline, the task's probes. ``area/`` (0711): job folders the
    candidate writes in, one per run (``grading.sealed.job_dir``).
    """

    work: Path

    @property
    def judge(self) -> Path:
        return self.work / "judge"

    @property
    def trees(self) -> Path:
        return self.work / "trees"

    @property
    def graded(self) -> Path:
        return self.trees / "graded"

    @property
    def baseline(self) -> Path:
        return self.trees / "baseline"

    @property
    def probes(self) -> Path:
        return self.trees / "probes"

    @property
    def area(self) -> Path:
        return self.work / "area"

    @property
    def flags(self) -> Path:
        return self.judge / "flags"

    def make(self) -> None:
        os.chmod(self.work, 0o711)
        for sub in ("home", "tmp", "cwd"):
            (self.judge / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.judge, 0o700)
        self.trees.mkdir(exist_ok=True)
        os.chmod(self.trees, 0o755)
        sealed.make_area(self.area)


# ---------------------------------------------------------------------------------------------
# Trees: copy, hash, compare


@dataclass(frozen=True)
class _Entry:
    kind: str  # "file", "link" or "other" (fifo, socket, device: never copied)
    path: Path


def _entries(root: Path) -> dict[str, _Entry]:
    """Every non-directory under ``root`` by repo-relative posix path; links are not followed."""
    found: dict[str, _Entry] = {}

    def walk(d: Path, rel: str) -> None:
        with os.scandir(d) as it:
            for e in sorted(it, key=lambda e: e.name):
                r = f"{rel}{e.name}"
                p = Path(e.path)
                if e.is_symlink():
                    found[r] = _Entry("link", p)
                elif e.is_dir(follow_symlinks=False):
                    walk(p, r + "/")
                elif e.is_file(follow_symlinks=False):
                    found[r] = _Entry("file", p)
                else:
                    found[r] = _Entry("other", p)

    walk(root, "")
    return found


def copy_tree(src: Path, dst: Path, *, skip_top: frozenset[str] = frozenset()) -> None:
    """Copy files and symlinks (as links); special files are skipped, never opened."""
    dst.mkdir(parents=True, exist_ok=True)
    for rel, entry in _entries(src).items():
        if rel.split("/", 1)[0] in skip_top:
            continue
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.kind == "link":
            os.symlink(os.readlink(entry.path), target)
        elif entry.kind == "file":
            shutil.copy2(entry.path, target, follow_symlinks=False)


def tree_sha256(root: Path) -> str:
    """Content hash of a tree: paths, kinds, exec bits, contents and link targets.

    Caches (``__pycache__``, ``.pytest_cache``) and ``.git`` are left out so that running the
    checks by hand does not change the hash of the hidden folder.
    """
    h = hashlib.sha256()
    for rel, entry in _entries(root).items():
        if set(rel.split("/")[:-1]) & _SKIP_HASH_DIRS:
            continue
        if entry.kind == "link":
            line = f"link {rel} {os.readlink(entry.path)}"
        elif entry.kind == "file":
            mode = "x" if os.stat(entry.path).st_mode & stat.S_IXUSR else "f"
            line = f"{mode} {rel} {_file_sha256(entry.path)}"
        else:
            line = f"other {rel}"
        h.update(line.encode("utf-8", "surrogateescape") + b"\n")
    return h.hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def grader_source_sha256() -> str:
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\n" + path.read_bytes() + b"\n")
    return h.hexdigest()


def _same(a: _Entry, b: _Entry) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind == "link":
        return os.readlink(a.path) == os.readlink(b.path)
    if a.kind != "file":
        return False
    sa, sb = os.stat(a.path), os.stat(b.path)
    if sa.st_size != sb.st_size or (sa.st_mode ^ sb.st_mode) & stat.S_IXUSR:
        return False
    return _file_sha256(a.path) == _file_sha256(b.path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _real_parents(root: Path, rel: str) -> None:
    """Make every parent of ``root/rel`` a real directory, so a restore never writes through a
    symlink (or into a file) the diff put where the baseline has a directory."""
    current = root
    for part in rel.split("/")[:-1]:
        current = current / part
        if current.is_symlink() or (os.path.lexists(current) and not current.is_dir()):
            current.unlink()
        if not os.path.lexists(current):
            current.mkdir()


def _matches(rel: str, globs: list[str]) -> bool:
    return any(fnmatchcase(rel, g) for g in globs)


def restore_locked_paths(repo: Path, baseline: Path, spec: PacketSpec) -> RestoreInfo:
    """Put back every path the agent may not change; remove files it may not add.

    A path is locked when it matches ``protected_paths`` or matches no ``editable_paths`` glob
    (``packet.py``: the grader ignores changes outside the editable paths).
    """
    info = RestoreInfo()
    base, work = _entries(baseline), _entries(repo)

    def locked(rel: str) -> bool:
        return _matches(rel, spec.protected_paths) or not _matches(rel, spec.editable_paths)

    for rel in sorted(work.keys() - base.keys()):
        if locked(rel):
            _remove(repo / rel)
            info.removed.append(rel)
    for rel in sorted(base):
        if not locked(rel):
            continue
        current = work.get(rel)
        if current is not None and _same(base[rel], current):
            continue
        if base[rel].kind not in ("file", "link"):
            continue
        _real_parents(repo, rel)
        target = repo / rel
        _remove(target)
        if base[rel].kind == "link":
            os.symlink(os.readlink(base[rel].path), target)
        else:
            shutil.copy2(base[rel].path, target, follow_symlinks=False)
        info.restored.append(rel)
    return info


# ---------------------------------------------------------------------------------------------
# The diff


def _git_env(work: Path, git_dir: Path, tree: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", DEFAULT_PATH),
        "HOME": str(work / "home"),
        "GIT_DIR": str(git_dir),
        "GIT_WORK_TREE": str(tree),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
    }


# Headers that make git read a file other than the one it patches: git checks every path it
# writes, but not the source of a copy or rename, which may lie outside the tree.
_FOREIGN_SOURCE = re.compile(rb"^(copy|rename) from ", re.MULTILINE)


def apply_diff(tree: Path, patch: bytes) -> str | None:
    """Apply ``patch`` to ``tree``; None on success, else why it was refused.

    git runs as the candidate uid, on a tree the candidate owns for the while, with its git
    directory in a job folder: whatever the diff names, git can read nothing the candidate
    could not (the inputs are closed to it). Copy and rename headers are refused outright
    (the harness never writes them: it diffs with ``--no-renames``). The tree is the judge's
    again afterwards.
    """
    if _FOREIGN_SOURCE.search(patch):
        return "the diff copies or renames a file; only plain changes are graded"
    git_dir = sealed.job_dir("git-apply") / "apply.git"
    sealed.hand_over(tree)
    env = _git_env(git_dir.parent, git_dir, tree)
    identity = sealed.popen_identity()
    try:
        subprocess.run(["git", "init", "--quiet"], env=env, cwd=tree, check=True,
                       capture_output=True, timeout=60, **identity)
        (git_dir / "info").mkdir(exist_ok=True)
        (git_dir / "info" / "attributes").write_text(NEUTRAL_ATTRIBUTES)
        proc = subprocess.run(["git", "apply", "--binary", "--whitespace=nowarn", "-"],
                              input=patch, env=env, cwd=tree, capture_output=True,
                              timeout=120, **identity)
    finally:
        sealed.end_job()
        sealed.make_readable_tree(tree)
    if proc.returncode == 0:
        return None
    message = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip()
    return message[:EXCERPT_CHARS] or f"git apply exited with code {proc.returncode}"


# ---------------------------------------------------------------------------------------------
# Running contracts


def child_env(layout: Layout, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every graded command: small, explicit, the same on every grade.

    HOME and TMPDIR are the judge's; a candidate command gets its own (``run_command``).
    """
    env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
    # `python` in a packet's commands must be the interpreter the grader runs on (torch etc.).
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', DEFAULT_PATH)}"
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = str(layout.judge / "home")
    # The judge's temp files (pytest's tmp_path included) stay in its own closed folder.
    env["TMPDIR"] = str(layout.judge / "tmp")
    env[sealed.CANDIDATE_UID_VAR] = str(sealed.candidate().uid)
    env[sealed.CANDIDATE_AREA_VAR] = str(layout.area)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env.update(extra or {})
    return env


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def _run_evidence(res: RunResult) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "exit_code": res.exit_code,
        "signal": signal_name(res.signal) if res.signal else None,
        "timed_out": res.timed_out,
        "duration_s": res.duration_s,
        "run_id": res.run_id,
    }
    if res.kill_reason:
        ev["kill_reason"] = res.kill_reason
    if res.log_truncated:
        ev["log_truncated"] = True
    if res.stragglers_killed:
        ev["stragglers_killed"] = res.stragglers_killed
    if res.survivors:
        ev["survivors"] = res.survivors
    return ev


def _shell_signal(exit_code: int | None) -> str | None:
    """The crash signal a shell encoded as 128 + N, if any."""
    if exit_code is None or exit_code <= 128:
        return None
    for sig in _CRASH_SIGNALS:
        if exit_code == 128 + sig:
            return sig.name
    return None


def _public_statement(spec: PacketSpec) -> str:
    return (
        f"The public test command `{spec.public_test_command}` exits 0 within "
        f"{spec.public_test_timeout_s:g} s on the graded tree."
    )


def run_public_tests(opts: GradeOptions, layout: Layout) -> ContractResult:
    spec = opts.packet
    # The candidate's own copy: the public command may write where it runs.
    repo = sealed.give(layout.graded, "public-tests")
    log_rel = f"{LOG_DIR}/public-tests.log"
    res = run_command(
        spec.public_test_command,
        cwd=repo,
        env=child_env(layout),
        timeout_s=spec.public_test_timeout_s,
        log_path=opts.out / log_rel,
    )
    log_text = _read_text(opts.out / log_rel)
    evidence = _run_evidence(res)
    summary = [ln for ln in log_text.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    if summary:
        evidence["failed"] = summary[:50]
    evidence["excerpt"] = _excerpt(log_text)
    reason = None
    outcome: Outcome
    if res.timed_out:
        outcome, reason = "hang", f"killed after the {spec.public_test_timeout_s:g} s timeout"
    elif res.signal is not None:
        outcome, reason = "crash", f"killed by {signal_name(res.signal)}"
    elif (shell_sig := _shell_signal(res.exit_code)) is not None:
        outcome, reason = "crash", f"the shell reports a child killed by {shell_sig}"
    elif res.exit_code == 0:
        outcome = "pass"
    else:
        outcome = "fail"
    return ContractResult(
        id=PUBLIC_CONTRACT_ID,
        kind="public_tests",
        statement=_public_statement(spec),
        outcome=outcome,
        reason=reason,
        evidence=evidence,
        log=log_rel,
    )


# ---------------------------------------------------------------------------------------------
# Hidden checks


@dataclass(frozen=True)
class HiddenTest:
    """A test function found by reading the hidden checks (no import, so no candidate code)."""

    nodeid: str  # e.g. "test_warmup.py::test_resume" (parametrised instances add "[...]")
    statement: str


def _test_function(node: ast.AST, prefix: str) -> HiddenTest | None:
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    if not node.name.startswith("test"):
        return None
    nodeid = f"{prefix}::{node.name}"
    doc = " ".join((ast.get_docstring(node) or "").split())
    return HiddenTest(nodeid, doc or f"Hidden check {nodeid} passes.")


def discover_hidden_tests(checks: Path) -> list[HiddenTest]:
    """Test functions and ``Test*`` class methods in ``test_*.py``/``*_test.py`` files.

    Read with ``ast``, never imported: the list is the same whatever the candidate did, which
    keeps contract ids stable even when a run dies before pytest reports anything.
    """
    found: list[HiddenTest] = []
    names = sorted(checks.rglob("*.py"))
    for path in (p for p in names if p.name.startswith("test_") or p.name.endswith("_test.py")):
        rel = path.relative_to(checks).as_posix()
        try:
            module = ast.parse(path.read_bytes(), filename=str(path))
        except SyntaxError:
            found.append(HiddenTest(rel, f"Hidden check module {rel} imports and runs."))
            continue
        for node in module.body:
            if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                found += filter(None, (_test_function(n, f"{rel}::{node.name}") for n in node.body))
            elif (test := _test_function(node, rel)) is not None:
                found.append(test)
    return found


def _base_id(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


_VERBOSE_LINE = re.compile(
    r"^(?P<path>\S+?\.py)::(?P<name>\S+) (?P<word>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b"
)
# A test prints its id and a space when it starts; its outcome (or, when the process dies in
# it, a fault handler's dump) follows on the same line.
_STARTED_LINE = re.compile(r"^(?P<path>\S+?\.py)::(?P<name>\S+)(?: |$)")
# pytest's end-of-run sections ("= FAILURES =", "= short test summary info =", ...).
_SUMMARY_SECTION = re.compile(r"^=+ (?!test session starts)\S.* =+$")
_LOG_OUTCOME: dict[str, Outcome] = {
    "PASSED": "pass",
    "XPASS": "pass",
    "FAILED": "fail",
    # An expected failure is still a contract not met.
    "XFAIL": "fail",
    "ERROR": "crash",
    "SKIPPED": "not_run",
}


class _ProgressWatchdog:
    """Kills a pytest run when no test has finished for ``limit_s`` (a per-test hard timeout).

    It reads the ``-v`` log as it grows; only complete result lines count.
    """

    def __init__(self, log_path: Path, limit_s: float) -> None:
        self.log_path = log_path
        self.limit_s = limit_s
        self.offset = 0
        self.carry = b""
        self.last_progress = time.monotonic()
        self.next_check = 0.0

    def __call__(self) -> str | None:
        now = time.monotonic()
        if now < self.next_check:
            return None
        self.next_check = now + 0.25
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            data = b""
        if data:
            self.offset += len(data)
            lines = (self.carry + data).split(b"\n")
            self.carry = lines.pop()
            for line in lines:
                if _VERBOSE_LINE.match(line.decode("utf-8", "replace")):
                    self.last_progress = now
        if now - self.last_progress > self.limit_s:
            return f"no hidden test finished within {self.limit_s:g} s"
        return None


@dataclass
class _LogProgress:
    completed: dict[str, Outcome] = field(default_factory=dict)
    in_progress: str | None = None


class _HiddenRunner:
    def __init__(self, opts: GradeOptions, layout: Layout) -> None:
        self.opts = opts
        self.layout = layout
        self.checks = (opts.hidden / "checks").resolve()
        # The judge's pytest starts in an empty folder of its own: with ``python -m`` the
        # working folder is on sys.path, and it must not be the candidate's tree.
        self.cwd = layout.judge / "cwd"
        # Our own (empty) ini file: no pytest.ini, tox.ini, setup.cfg or pyproject.toml from
        # the graded tree or its parents can add options or plugins.
        self.ini = layout.judge / "pytest.ini"
        self.ini.write_text("[pytest]\n")
        self.env = child_env(
            layout,
            {
                "GRADING_WORKDIR": str(layout.graded),
                "GRADING_BASELINE": str(layout.baseline),
                PROBES_VAR: str(layout.probes),
                FLAGS_VAR: str(layout.flags),
                # Plugins installed in the image must not change how checks run.
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            },
        )
        self.expected = discover_hidden_tests(self.checks)
        self.statements = {t.nodeid: t.statement for t in self.expected}
        self.results: dict[str, ContractResult] = {}
        self.collected: list[str] | None = None
        self.deadline = time.monotonic() + opts.hidden_timeout_s

    # -- pytest invocation

    def _argv(self, junit: Path, targets: list[str], *, collect_only: bool = False) -> list[str]:
        argv = [
            sys.executable, "-m", "pytest",
            "-q" if collect_only else "-v",
            "-c", str(self.ini),
            "--rootdir", str(self.checks),
            # No conftest.py outside the checks folder is loaded (the graded tree's included).
            "--confcutdir", str(self.checks),
            "-p", "no:cacheprovider",
            "--color=no",
            "-o", "addopts=",
            "-o", "console_output_style=classic",
            "--continue-on-collection-errors",
            "-p", "grading.judge_plugin",
        ]  # fmt: skip
        if collect_only:
            argv.append("--collect-only")
        else:
            argv += ["--junitxml", str(junit)]
        return argv + targets

    def _nodeid(self, printed_path: str, rest: str) -> str:
        """Node id relative to the checks folder from a path pytest printed relative to cwd."""
        for base in (self.cwd, self.checks):
            candidate = Path(os.path.normpath(base / printed_path))
            if candidate.is_file():
                try:
                    return f"{candidate.relative_to(self.checks).as_posix()}::{rest}"
                except ValueError:
                    continue
        return f"{printed_path}::{rest}"

    def _statement(self, nodeid: str) -> str:
        return self.statements.get(_base_id(nodeid), f"Hidden check {nodeid} passes.")

    def _contract(
        self,
        nodeid: str,
        outcome: Outcome,
        *,
        reason: str | None = None,
        evidence: dict[str, Any] | None = None,
        log: str | None = None,
    ) -> ContractResult:
        return ContractResult(
            id=HIDDEN_PREFIX + nodeid,
            kind="hidden_check",
            statement=self._statement(nodeid),
            outcome=outcome,
            reason=reason,
            evidence=evidence or {},
            log=log,
        )

    # -- result sources

    def _junit_nodeid(self, classname: str, name: str) -> str:
        parts = [p for p in classname.split(".") if p]
        if not parts:  # a collection error names the module in `name`
            parts, name = name.split("."), ""
        for k in range(len(parts), 0, -1):
            rel = "/".join(parts[:k]) + ".py"
            if (self.checks / rel).is_file():
                return "::".join([rel, *parts[k:], *([name] if name else [])])
        return "::".join([*parts, *([name] if name else [])])

    def _from_junit(self, junit: Path, log_rel: str) -> list[ContractResult] | None:
        try:
            root = ET.parse(junit).getroot()
        except (OSError, ET.ParseError):
            return None
        results = []
        for case in root.iter("testcase"):
            nodeid = self._junit_nodeid(case.get("classname", ""), case.get("name", ""))
            evidence: dict[str, Any] = {"duration_s": float(case.get("time") or 0.0)}
            props = {p.get("name", ""): p.get("value") for p in case.iter("property")}
            if props:
                evidence["properties"] = props
            outcome: Outcome = "pass"
            reason = None
            for child in case:
                if child.tag not in ("failure", "error", "skipped"):
                    continue
                message = child.get("message") or ""
                evidence["message"] = _excerpt(message, 1000)
                if child.text:
                    evidence["details"] = _excerpt(child.text)
                if child.tag == "failure":
                    outcome = "fail"
                    # A check whose training run crashed or hung says so through a property
                    # (GRADING_OUTCOME_PROPERTY): that is an outcome of its own, never "fail".
                    run_outcome = props.get(GRADING_OUTCOME_PROPERTY)
                    if run_outcome in ("crash", "hang"):
                        outcome = "crash" if run_outcome == "crash" else "hang"
                        reason = f"the check's training run ended in {run_outcome}"
                elif child.tag == "error":
                    outcome = "crash"
                    reason = (
                        "collection error"
                        if message == "collection failure"
                        else f"pytest error outside the test body: {message[:200]}"
                    )
                elif child.get("type") == "pytest.xfail":
                    outcome, reason = "fail", "marked as an expected failure"
                else:
                    outcome, reason = "not_run", f"skipped: {message[:500]}"
                break
            if reason == "collection error" and "::" not in nodeid:
                # Report the module's tests under their usual ids, so the set of contracts
                # does not depend on whether the candidate broke collection.
                inside = [t.nodeid for t in self.expected if t.nodeid.startswith(nodeid + "::")]
                if inside:
                    for test_id in inside:
                        results.append(
                            self._contract(
                                test_id,
                                outcome,
                                reason=reason,
                                evidence=dict(evidence),
                                log=log_rel,
                            )
                        )
                    continue
            results.append(
                self._contract(nodeid, outcome, reason=reason, evidence=evidence, log=log_rel)
            )
        return results

    def _from_log(self, log_path: Path) -> _LogProgress:
        progress = _LogProgress()
        last_started = None
        for line in _read_text(log_path).splitlines():
            if _SUMMARY_SECTION.match(line):
                # Failure details quote candidate text verbatim: nothing past here is progress.
                break
            if m := _VERBOSE_LINE.match(line):
                progress.completed[self._nodeid(m["path"], m["name"])] = _LOG_OUTCOME[m["word"]]
            if m := _STARTED_LINE.match(line):
                last_started = self._nodeid(m["path"], m["name"])
        # The last test that started and never reported an outcome is the one that was running.
        if last_started is not None and last_started not in progress.completed:
            progress.in_progress = last_started
        return progress

    def _collect(self) -> list[str] | None:
        """Exact node ids of every hidden test, from ``pytest --collect-only``."""
        if self.collected is not None:
            return self.collected
        log_rel = f"{LOG_DIR}/hidden-checks.collect.log"
        res = run_command(
            self._argv(Path(), [str(self.checks)], collect_only=True),
            cwd=self.cwd,
            env=self.env,
            timeout_s=min(120.0, max(1.0, self.remaining())),
            log_path=self.opts.out / log_rel,
            as_candidate=False,
        )
        sealed.end_job()
        if res.timed_out or res.signal is not None or res.exit_code not in (0, 1):
            return None
        ids = []
        for line in _read_text(self.opts.out / log_rel).splitlines():
            if "::" in line and not line.startswith("[grading]"):
                path, _, rest = line.strip().partition("::")
                ids.append(self._nodeid(path, rest))
        self.collected = ids
        return ids

    # -- the loop

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def run(self) -> list[ContractResult]:
        if not self.expected:
            raise GraderError(f"no hidden tests found under {self.checks}")
        targets = [str(self.checks)]
        round_no = 1
        while True:
            if self.remaining() <= 1.0:
                self._leftovers(
                    "not_run",
                    f"the hidden checks' time budget ({self.opts.hidden_timeout_s:g} s) ran out "
                    "before this test ran",
                )
                break
            finished = self._round(round_no, targets)
            if finished:
                break
            collected = self._collect()
            if collected is None:
                self._leftovers("crash", "pytest could not collect the hidden checks again")
                break
            # Exact node ids as positional arguments: --deselect matches by prefix, and
            # "test_x[1]" would also deselect "test_x[10]".
            targets = [f"{self.checks}/{n}" for n in collected if n not in self.results]
            if not targets:
                break
            round_no += 1
            # Each round settles at least one test, unless the ids pytest printed while running
            # and while collecting disagree; never loop on that.
            if round_no > len(collected) + 1:
                self._leftovers("crash", "the grader lost track of this test across reruns")
                break
        self._leftovers("crash", "pytest never reported this test")
        order = {t.nodeid: i for i, t in enumerate(self.expected)}
        return sorted(
            self.results.values(),
            key=lambda c: (order.get(_base_id(c.id[len(HIDDEN_PREFIX) :]), len(order)), c.id),
        )

    def _round(self, round_no: int, targets: list[str]) -> bool:
        """One pytest process; True when nothing is left to run."""
        stem = f"{LOG_DIR}/hidden-checks.round-{round_no}"
        log_rel, junit = f"{stem}.log", self.opts.out / f"{stem}.junit.xml"
        log_path = self.opts.out / log_rel
        watchdog: Watchdog = _ProgressWatchdog(log_path, self.opts.hidden_test_timeout_s)
        res = run_command(
            self._argv(junit, targets),
            cwd=self.cwd,
            env=self.env,
            timeout_s=self.remaining(),
            log_path=log_path,
            watchdog=watchdog,
            as_candidate=False,
        )
        # A judge killed mid-check leaves the candidate job it was waiting for: kill it now.
        run_ev = _run_evidence(res)
        run_ev["candidate_processes_killed"] = sealed.end_job()
        run_ev["round"] = round_no
        if not res.timed_out and res.signal is None:
            cases = self._from_junit(junit, log_rel)
            if cases is not None:
                for c in cases:
                    c.evidence["round"] = round_no
                    self.results.setdefault(c.id[len(HIDDEN_PREFIX) :], c)
                if res.exit_code not in (0, 1):
                    self._leftovers(
                        "crash", f"pytest exited with code {res.exit_code} before running this"
                    )
                return True

        # No report: pytest was killed or died. Keep what the log says finished, blame the test
        # that was running, and let the caller rerun the rest.
        progress = self._from_log(log_path)
        for nodeid, outcome in progress.completed.items():
            if nodeid not in self.results:
                reason = "from the pytest log (the run did not finish)"
                self.results[nodeid] = self._contract(
                    nodeid, outcome, reason=reason, evidence={"round": round_no}, log=log_rel
                )
        if progress.in_progress is None:
            outcome = "hang" if res.timed_out else "crash"
            why = (
                res.kill_reason
                if res.timed_out
                else (f"pytest died outside any test ({_describe(res)})")
            )
            self._leftovers(outcome, why or "pytest did not report", evidence=run_ev, log=log_rel)
            return True
        if res.timed_out:
            outcome, reason = "hang", f"killed: {res.kill_reason}"
        else:
            outcome, reason = "crash", f"the pytest process died in this test ({_describe(res)})"
        self.results[progress.in_progress] = self._contract(
            progress.in_progress, outcome, reason=reason, evidence=run_ev, log=log_rel
        )
        return False

    def _leftovers(
        self,
        outcome: Outcome,
        reason: str,
        *,
        evidence: dict[str, Any] | None = None,
        log: str | None = None,
    ) -> None:
        """Give every test not reported yet the outcome ``outcome``."""
        seen = {_base_id(n) for n in self.results}
        pending = [n for n in (self.collected or []) if n not in self.results]
        pending += [t.nodeid for t in self.expected if t.nodeid not in seen]
        for nodeid in dict.fromkeys(pending):
            if nodeid in self.results:
                continue
            self.results[nodeid] = self._contract(
                nodeid, outcome, reason=reason, evidence=dict(evidence or {}), log=log
            )


def _describe(res: RunResult) -> str:
    if res.signal is not None:
        return f"killed by {signal_name(res.signal)}"
    return f"exit code {res.exit_code}"


def run_hidden_checks(opts: GradeOptions, layout: Layout) -> list[ContractResult]:
    return _HiddenRunner(opts, layout).run()


# ---------------------------------------------------------------------------------------------
# Putting it together


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _torch_version() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def unavailable_configurations(packet: PacketSpec) -> dict[str, str]:
    """Declared configurations this machine cannot run, and why (CUDA ones need 2 GPUs)."""
    cuda = [c for c in packet.configurations if c in CUDA_CONFIGURATIONS]
    if not cuda:
        return {}
    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        gpus = 0
    if gpus >= 2:
        return {}
    return {c: f"needs 2 GPUs with NCCL; this grader has {gpus}" for c in cuda}


def _expect_same(what: str, path: Path, expected: str | None) -> str:
    """The tree's digest, refusing to go on when it is not the one expected."""
    got = tree_sha256(path)
    if expected is not None and got != expected:
        raise GraderError(f"{what} changed: digest {got[:16]}, expected {expected[:16]}; "
                          "the grade would not be of the inputs sent")
    return got


def grade(opts: GradeOptions) -> GradeReport:
    """Grade one submission and return the report (the caller writes it)."""
    started, t0 = _now(), time.monotonic()
    who = sealed.candidate()
    hidden_sha = _expect_same("the hidden tree", opts.hidden, opts.expect_hidden_sha256)
    checks = opts.hidden / "checks"
    patch = opts.diff.read_bytes()
    canary_file = opts.hidden / "CANARY"
    canary = canary_file.read_text().strip().encode() if canary_file.is_file() else b""
    layout = Layout(opts.work)
    layout.make()
    os.environ[sealed.CANDIDATE_AREA_VAR] = str(layout.area)
    (opts.out / LOG_DIR).mkdir(parents=True, exist_ok=True)

    tree = layout.graded
    copy_tree(opts.baseline, tree, skip_top=frozenset({".git"}))
    empty = not patch.strip()
    apply_error = None if empty else apply_diff(tree, patch)
    restore = RestoreInfo()
    graded_sha: str | None = None
    contracts: list[ContractResult]
    if apply_error is not None:
        reason = "the diff does not apply to the baseline"
        contracts = [
            ContractResult(
                id=PUBLIC_CONTRACT_ID,
                kind="public_tests",
                statement=_public_statement(opts.packet),
                outcome="diff_rejected",
                reason=reason,
                evidence={"apply_error": apply_error},
            )
        ]
        contracts += [
            ContractResult(
                id=HIDDEN_PREFIX + t.nodeid,
                kind="hidden_check",
                statement=t.statement,
                outcome="diff_rejected",
                reason=reason,
            )
            for t in (discover_hidden_tests(checks) if checks.is_dir() else [])
        ]
    else:
        restore = restore_locked_paths(tree, opts.baseline, opts.packet)
        # The restore was the last write: from here the tree is the judge's, read-only to the
        # candidate, and any change to it is a broken seal.
        copy_tree(opts.baseline, layout.baseline, skip_top=frozenset({".git"}))
        if (opts.hidden / "probes").is_dir():
            copy_tree(opts.hidden / "probes", layout.probes)
        for readable in (tree, layout.baseline, layout.probes):
            readable.mkdir(exist_ok=True)
            sealed.make_readable_tree(readable)
        sealed.check_reachable(tree)
        graded_sha = tree_sha256(tree)
        contracts = [run_public_tests(opts, layout)]
        if checks.is_dir():
            _expect_same("the graded tree", tree, graded_sha)
            contracts += run_hidden_checks(opts, layout)
        else:
            # A task whose oracle is not written yet is graded as such, never as complete.
            contracts.append(ContractResult(
                id="hidden-checks", kind="hidden_check",
                statement="the task's hidden contract checks",
                outcome="not_run", reason="this task has no hidden checks yet (no checks/)",
            ))
        _expect_same("the graded tree", tree, graded_sha)
    # Nothing the candidate started may outlive the verdict, and the judge must be untouched.
    killed = sealed.end_job()
    _expect_same("the hidden tree", opts.hidden, hidden_sha)
    if layout.flags.exists():
        raise GraderError(f"grader defect: {_read_text(layout.flags).splitlines()[0]}")

    not_run = unavailable_configurations(opts.packet)
    configurations = configuration_results(contracts, list(opts.packet.configurations), not_run)
    return GradeReport(
        submission_id=opts.submission_id,
        task_id=opts.packet.id,
        verdict=verdict_for(contracts, diff_applied=apply_error is None,
                            configurations=configurations, cuda=CUDA_CONFIGURATIONS),
        contracts=contracts,
        counts=count_outcomes(contracts),
        diff=DiffInfo(
            sha256=hashlib.sha256(patch).hexdigest(),
            size_bytes=len(patch),
            empty=empty,
            applied=apply_error is None,
            apply_error=apply_error,
            canary_found=bool(canary) and canary in patch,
        ),
        restore=restore,
        started_at=started,
        finished_at=_now(),
        duration_s=round(time.monotonic() - t0, 3),
        grader_source_sha256=grader_source_sha256(),
        baseline_tree_sha256=tree_sha256(opts.baseline),
        hidden_tree_sha256=hidden_sha,
        graded_tree_sha256=graded_sha,
        seal=SealInfo(judge_uid=os.geteuid(), candidate_uid=who.uid,
                      candidate_processes_killed_at_end=killed),
        python_version=platform.python_version(),
        torch_version=_torch_version(),
        configurations_not_run=not_run,
        configurations=configurations if apply_error is None else {},
    )


def write_report(report: GradeReport, out: Path) -> Path:
    """Write ``out/grade.json`` atomically: a reader sees the old state or the whole report."""
    final = out / "grade.json"
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".grade.", suffix=".json.tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(report.model_dump_json(indent=2) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return final
