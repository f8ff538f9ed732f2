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

import hashlib
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from grading import jobcgroup, sealed
from grading.apply import apply_diff
from grading.confirm import settle, wants_rerun
from grading.errors import GraderError
from grading.hashing import grader_source_sha256, tree_sha256
from grading.hidden import (
    FAILING_OUTCOMES,
    discover_hidden_tests,
    run_hidden_checks,
)
from grading.layout import LOG_DIR, GradeOptions, Layout
from grading.models import (
    HIDDEN_PREFIX,
    NOT_SELECTED,
    PUBLIC_CONTRACT_ID,
    STOPPED_AT_FAILURE,
    ContractResult,
    DiffInfo,
    GradeReport,
    RestoreInfo,
    SealInfo,
    configuration_results,
    count_outcomes,
    verdict_for,
)
from grading.packet import CUDA_CONFIGURATIONS, PacketSpec
from grading.public import public_statement, read_log_text, run_public_tests
from grading.trees import copy_tree, restore_locked_paths


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


def announce(opts: GradeOptions, contracts: list[ContractResult]) -> None:
    """Each contract's outcome on stdout as soon as it is decided (``grading: contract ID:
    OUTCOME``), for whoever follows the grade as it runs; grade.json stays the record."""
    if not opts.announce:
        return
    for contract in contracts:
        print(f"grading: contract {contract.id}: {contract.outcome}", flush=True)


def grade(opts: GradeOptions) -> GradeReport:
    """Grade one submission and return the report (the caller writes it)."""
    started, t0 = _now(), time.monotonic()
    pool = sealed.candidate_uids()
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
                statement=public_statement(opts.packet),
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
        # Mutation analysis runs the public tests last unless they are the cheapest contract
        # that ran the mutated statement (see grading.mutants.CoverageMap.select).
        public = None if opts.public_tests_last else _public_contract(opts, layout)
        if public is not None:
            announce(opts, [public])
        if public is not None and opts.stop_at_first_failure and \
                public.outcome in FAILING_OUTCOMES:
            hidden = [ContractResult(id=HIDDEN_PREFIX + t.nodeid, kind="hidden_check",
                                     statement=t.statement, outcome="not_run",
                                     reason=STOPPED_AT_FAILURE)
                      for t in (discover_hidden_tests(checks) if checks.is_dir() else [])]
        elif checks.is_dir():
            _expect_same("the graded tree", tree, graded_sha)
            hidden = run_hidden_checks(opts, layout)
            announce(opts, hidden)
        else:
            # A task whose oracle is not written yet is graded as such, never as complete.
            hidden = [ContractResult(
                id="hidden-checks", kind="hidden_check",
                statement="the task's hidden contract checks",
                outcome="not_run", reason="this task has no hidden checks yet (no checks/)",
            )]
        if public is None and opts.stop_at_first_failure and any(
                c.outcome in FAILING_OUTCOMES for c in hidden):
            public = ContractResult(id=PUBLIC_CONTRACT_ID, kind="public_tests",
                                    statement=public_statement(opts.packet), outcome="not_run",
                                    reason=STOPPED_AT_FAILURE)
        elif public is None:
            public = _public_contract(opts, layout)
            announce(opts, [public])
        # The public tests are listed first whichever ran first.
        contracts = [public, *hidden]
        _expect_same("the graded tree", tree, graded_sha)
    # Nothing the candidate started may outlive the verdict, and the judge must be untouched.
    killed = sealed.end_job()
    _expect_same("the hidden tree", opts.hidden, hidden_sha)
    if layout.flags.exists():
        raise GraderError(f"grader defect: {read_log_text(layout.flags).splitlines()[0]}")

    not_run = opts.configurations_not_run
    if not_run is None:
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
        seal=SealInfo(judge_uid=os.geteuid(), candidate_uid=pool.start,
                      candidate_uids=len(pool),
                      candidate_processes_killed_at_end=killed,
                      job_kill=jobcgroup.kill_mechanism()),
        python_version=platform.python_version(),
        torch_version=_torch_version(),
        configurations_not_run=not_run,
        configurations=configurations if apply_error is None else {},
    )


def _public_contract(opts: GradeOptions, layout: Layout) -> ContractResult:
    if opts.public_tests:
        first = run_public_tests(opts, layout)
        log_text = read_log_text(opts.out / first.log) if first.log else ""
        if not (opts.confirm_unsteady and wants_rerun(first, log_text)):
            return first
        return settle(first, run_public_tests(opts, layout, rerun=True))
    return ContractResult(id=PUBLIC_CONTRACT_ID, kind="public_tests",
                          statement=public_statement(opts.packet), outcome="not_run",
                          reason=NOT_SELECTED)


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
