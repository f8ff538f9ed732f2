"""Hidden checks: the judge's pytest run, its watchdog, and reading back its results."""

from __future__ import annotations

import ast
import json
import os
import re
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grading import sealed
from grading.confirm import settle, wants_rerun
from grading.errors import GraderError
from grading.hashing import tree_sha256
from grading.judge_plugin import EVIDENCE_VAR, FLAGS_VAR
from grading.layout import GRADING_OUTCOME_PROPERTY, LOG_DIR, GradeOptions, Layout
from grading.models import (
    BUDGET_RAN_OUT,
    HIDDEN_PREFIX,
    NOT_SELECTED,
    STOPPED_AT_FAILURE,
    ContractResult,
    Outcome,
)
from grading.probe import PROBES_VAR
from grading.public import child_env, excerpt_of, read_log_text, run_evidence
from grading.run import RunResult, Watchdog, run_command, signal_name
from grading.trace import TRACE_TEST_VAR
from grading.warm_start import DAEMONS_VAR, WARM_START_VAR


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
                **({WARM_START_VAR: str(layout.warm_tally)} if opts.warm_start else {}),
                **({DAEMONS_VAR: str(opts.warm_start_daemons)}
                   if opts.warm_start and opts.warm_start_daemons is not None else {}),
            },
        )
        self.expected = discover_hidden_tests(self.checks)
        self.statements = {t.nodeid: t.statement for t in self.expected}
        self.results: dict[str, ContractResult] = {}
        self.collected: list[str] | None = None
        self.deadline = time.monotonic() + opts.hidden_timeout_s
        # The last pytest process's number: each has its own log, junit and evidence files.
        self.round_no = 0

    # -- pytest invocation

    def _argv(self, junit: Path, targets: list[str], *, collect_only: bool = False) -> list[str]:
        argv = [
            # pytest, ended without the interpreter's teardown (see grading.judge_main).
            sys.executable, "-m", "grading.judge_main",
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
            if self.opts.stop_at_first_failure:
                argv.append("--exitfirst")
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
            # A skip followed by an error (a teardown that failed) is the error: a skipped
            # contract can be excused (CUDA configurations not run here), an error never.
            children = sorted((c for c in case if c.tag in ("failure", "error", "skipped")),
                              key=lambda c: c.tag == "skipped")
            for child in children:
                message = child.get("message") or ""
                evidence["message"] = excerpt_of(message, 1000)
                if child.text:
                    evidence["details"] = excerpt_of(child.text)
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
        for line in read_log_text(log_path).splitlines():
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
        """Exact node ids of every hidden test, from ``pytest --collect-only``.

        Kept for the life of the process, keyed by the checks folder and its digest: the
        judge's pytest never imports candidate code, so what it collects depends on the checks
        alone, and a process grading many submissions (``grading.mutants``) collects once.
        """
        if self.collected is not None:
            return self.collected
        key = (str(self.checks), tree_sha256(self.checks))
        if key in _COLLECTED:
            self.collected = list(_COLLECTED[key])
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
        for line in read_log_text(self.opts.out / log_rel).splitlines():
            if "::" in line and not line.startswith("[grading]"):
                path, _, rest = line.strip().partition("::")
                ids.append(self._nodeid(path, rest))
        self.collected = ids
        _COLLECTED[key] = tuple(ids)
        return ids

    # -- the loop

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def run(self) -> list[ContractResult]:
        if not self.expected:
            raise GraderError(f"no hidden tests found under {self.checks}")
        if self.opts.hidden_share is not None and not self.opts.trace_each_hidden_test:
            raise GraderError("a share of the hidden checks is graded one check per process "
                              "(hidden_share needs trace_each_hidden_test)")
        if self.opts.trace_each_hidden_test:
            self._run_each()
        else:
            self._run_rounds()
        if self._stopped_at_failure():
            self._leftovers("not_run", STOPPED_AT_FAILURE)
        self._leftovers("crash", "pytest never reported this test")
        if self.opts.confirm_unsteady:
            self._confirm_unsteady()
        order = {t.nodeid: i for i, t in enumerate(self.expected)}
        return sorted(
            self.results.values(),
            key=lambda c: (order.get(_base_id(c.id[len(HIDDEN_PREFIX) :]), len(order)), c.id),
        )

    def _out_of_time(self) -> bool:
        if self.remaining() > 1.0:
            return False
        self._leftovers(
            "not_run",
            f"{BUDGET_RAN_OUT} ({self.opts.hidden_timeout_s:g} s) before this test ran",
        )
        return True

    def _selected_targets(self) -> list[str] | None:
        """The targets of the first round: all checks, or only ``opts.hidden_tests`` (the
        others are settled ``not_run`` at once). None when the checks cannot be collected."""
        if self.opts.hidden_tests is None:
            return [str(self.checks)]
        collected = self._collect()
        if collected is None:
            return None
        known = set(collected)
        missing = [n for n in self.opts.hidden_tests if n not in known]
        if missing:
            # The selection comes from an earlier collection of the same checks (the judge's
            # collection never depends on the candidate), so this is a grader defect.
            raise GraderError(f"the selected hidden check {missing[0]} is not among the "
                              f"{len(collected)} pytest collected in {self.checks}")
        chosen = list(dict.fromkeys(self.opts.hidden_tests))
        for nodeid in collected:
            if nodeid not in chosen:
                self.results[nodeid] = self._contract(nodeid, "not_run", reason=NOT_SELECTED)
        return [f"{self.checks}/{n}" for n in chosen]

    def _run_rounds(self, targets: list[str] | None = None,
                    among: frozenset[str] | None = None) -> None:
        """One pytest process for every check (or ``targets``, node ids ``among``); after a
        crash or hang, a new one for the rest."""
        if targets is None:
            targets = self._selected_targets()
        if targets is None:
            self._leftovers("crash", "pytest could not collect the hidden checks")
            return
        first_round = self.round_no
        while targets and not self._out_of_time():
            self.round_no += 1
            if self._round(self.round_no, targets) or self._stopped_at_failure():
                return
            collected = self._collect()
            if collected is None:
                self._leftovers("crash", "pytest could not collect the hidden checks again")
                return
            # Exact node ids as positional arguments: --deselect matches by prefix, and
            # "test_x[1]" would also deselect "test_x[10]".
            targets = [f"{self.checks}/{n}" for n in collected
                       if n not in self.results and (among is None or n in among)]
            # Each round settles at least one test, unless the ids pytest printed while running
            # and while collecting disagree; never loop on that.
            if self.round_no - first_round > len(collected):
                self._leftovers("crash", "the grader lost track of this test across reruns")
                return

    def _confirm_unsteady(self) -> None:
        """Run every check that crashed or hung once more, in rounds of their own, and settle
        each from its two runs (grading.confirm)."""
        unsteady = [n for n, c in self.results.items() if wants_rerun(c)]
        if not unsteady:
            return
        first, self.results = self.results, {}
        try:
            if self.opts.trace_each_hidden_test:
                for nodeid in unsteady:
                    if self._out_of_time():
                        break
                    self.round_no += 1
                    self._round(self.round_no, [f"{self.checks}/{nodeid}"],
                                {TRACE_TEST_VAR: nodeid}, running=[nodeid])
            else:
                self._run_rounds([f"{self.checks}/{n}" for n in unsteady],
                                 among=frozenset(unsteady))
        finally:
            reruns, self.results = self.results, first
        for nodeid in unsteady:
            self.results[nodeid] = settle(first[nodeid], reruns.get(nodeid))

    def _run_each(self) -> None:
        """One pytest process per check, named to the tracer: what each check ran is its own,
        not a session fixture's or a cache's that an earlier check filled (grading.trace)."""
        collected = self._collect()
        if collected is None:
            self._leftovers("crash", "pytest could not collect the hidden checks")
            return
        if self.opts.hidden_share is not None:
            share = share_of(collected, self.opts.hidden_share)
            for nodeid in collected:
                if nodeid not in share:
                    self.results[nodeid] = self._contract(nodeid, "not_run",
                                                          reason=NOT_SELECTED)
        for nodeid in collected:
            if self._out_of_time():
                return
            if nodeid not in self.results:
                self.round_no += 1
                self._round(self.round_no, [f"{self.checks}/{nodeid}"],
                            {TRACE_TEST_VAR: nodeid}, running=[nodeid])

    def _round(self, round_no: int, targets: list[str],
               extra_env: dict[str, str] | None = None,
               running: list[str] | None = None) -> bool:
        """One pytest process; True when nothing is left to run.

        ``running``: the node ids this process was given, when not every pending one; a
        process that dies outside any test is blamed on those alone.
        """
        stem = f"{LOG_DIR}/hidden-checks.round-{round_no}"
        log_rel, junit = f"{stem}.log", self.opts.out / f"{stem}.junit.xml"
        log_path = self.opts.out / log_rel
        watchdog: Watchdog = _ProgressWatchdog(log_path, self.opts.hidden_test_timeout_s)
        evidence_path = self.opts.out / f"{stem}.evidence.jsonl"
        res = run_command(
            self._argv(junit, targets),
            cwd=self.cwd,
            env={**self.env, EVIDENCE_VAR: str(evidence_path), **(extra_env or {})},
            timeout_s=self.remaining(),
            log_path=log_path,
            watchdog=watchdog,
            as_candidate=False,
        )
        # A judge killed mid-check leaves the candidate job it was waiting for: kill it now.
        run_ev = run_evidence(res)
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
        kept = _finished_evidence(evidence_path)
        for nodeid, outcome in progress.completed.items():
            if nodeid not in self.results:
                reason = "from the pytest log (the run did not finish)"
                evidence: dict[str, Any] = {"round": round_no, **kept.get(nodeid, {})}
                props = evidence.get("properties") or {}
                if outcome == "fail" and props.get(GRADING_OUTCOME_PROPERTY) in ("crash", "hang"):
                    outcome = props[GRADING_OUTCOME_PROPERTY]
                self.results[nodeid] = self._contract(
                    nodeid, outcome, reason=reason, evidence=evidence, log=log_rel
                )
        if progress.in_progress is None:
            outcome = "hang" if res.timed_out else "crash"
            why = (
                res.kill_reason
                if res.timed_out
                else (f"pytest died outside any test ({_describe(res)})")
            )
            self._leftovers(outcome, why or "pytest did not report", evidence=run_ev, log=log_rel,
                            only=running)
            return True
        if res.timed_out:
            outcome, reason = "hang", f"killed: {res.kill_reason}"
        else:
            outcome, reason = "crash", f"the pytest process died in this test ({_describe(res)})"
        self.results[progress.in_progress] = self._contract(
            progress.in_progress, outcome, reason=reason, evidence=run_ev, log=log_rel
        )
        return False

    def _stopped_at_failure(self) -> bool:
        return self.opts.stop_at_first_failure and any(
            c.outcome in FAILING_OUTCOMES for c in self.results.values())

    def _leftovers(
        self,
        outcome: Outcome,
        reason: str,
        *,
        evidence: dict[str, Any] | None = None,
        log: str | None = None,
        only: list[str] | None = None,
    ) -> None:
        """Give every test not reported yet (or only those of ``only``) the outcome ``outcome``."""
        seen = {_base_id(n) for n in self.results}
        pending = [n for n in (self.collected or []) if n not in self.results]
        pending += [t.nodeid for t in self.expected if t.nodeid not in seen]
        if only is not None:
            pending = [n for n in pending if n in only]
        for nodeid in dict.fromkeys(pending):
            if nodeid in self.results:
                continue
            self.results[nodeid] = self._contract(
                nodeid, outcome, reason=reason, evidence=dict(evidence or {}), log=log
            )


# (checks folder, its digest) -> the node ids pytest collected there (_HiddenRunner._collect).
_COLLECTED: dict[tuple[str, str], tuple[str, ...]] = {}


def collected_ids(checks: Path) -> list[str] | None:
    """What this process's pytest collected in ``checks`` (None: not collected yet)."""
    ids = _COLLECTED.get((str(checks.resolve()), tree_sha256(checks)))
    return None if ids is None else list(ids)


def remember_collection(checks: Path, ids: list[str]) -> None:
    """Take an earlier process's collection of these very checks (``grading.mutants`` hands
    the reference's on to the processes that grade its mutants): same folder and digest, so
    pytest would collect the same."""
    _COLLECTED[(str(checks.resolve()), tree_sha256(checks))] = tuple(ids)


FAILING_OUTCOMES = frozenset({"fail", "crash", "hang", "flaky"})


def share_of(collected: list[str], part: tuple[int, int]) -> set[str]:
    """Part (k, n) of the collected checks: every n-th from the k-th, so the n parts hold each
    check exactly once."""
    k, n = part
    return set(collected[k::n])


def _finished_evidence(path: Path) -> dict[str, dict[str, Any]]:
    """What the judge wrote of each check it finished (grading.judge_plugin), by node id; a
    line cut off by the judge's death is skipped."""
    found: dict[str, dict[str, Any]] = {}
    for line in read_log_text(path).splitlines():
        try:
            item = json.loads(line)
            nodeid = str(item["nodeid"])
        except (ValueError, KeyError, TypeError):
            continue
        evidence: dict[str, Any] = {"duration_s": float(item.get("duration_s") or 0.0)}
        if item.get("properties"):
            evidence["properties"] = dict(item["properties"])
        if item.get("message"):
            evidence["message"] = excerpt_of(str(item["message"]), 1000)
        found[nodeid] = evidence
    return found


def _describe(res: RunResult) -> str:
    if res.signal is not None:
        return f"killed by {signal_name(res.signal)}"
    return f"exit code {res.exit_code}"


def run_hidden_checks(opts: GradeOptions, layout: Layout) -> list[ContractResult]:
    return _HiddenRunner(opts, layout).run()
