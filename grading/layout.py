"""The grade's options, folder layout and the constants every part of grading shares."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

from grading import jobcgroup, sealed
from grading.packet import PacketSpec

# Hidden checks set this junit property ("crash" or "hang") when the run they judge did not
# finish, so the contract reads crash/hang (with the rank named in the message), not fail.
GRADING_OUTCOME_PROPERTY = "grading_outcome"
LOG_DIR = "logs"
EXCERPT_CHARS = 3000
# Environment variables passed from the grader's own environment to graded commands; everything
# else is dropped so nothing from the grading host (PYTEST_ADDOPTS, PYTHONPATH, ...) leaks in.
# GRADING_TRACE_*: line coverage of the reference during mutation analysis (grading/trace.py);
# only grading.mutants sets them in the judge's environment, and only for the reference.
PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                   "GRADING_TRACE_DIR", "GRADING_TRACE_ROOT", "GRADING_TRACE_TEST")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# What a candidate process may see of its environment, whatever its caller built (an
# allow-list, as the diagnostics runner's): the variables above, the ones a run of Python and
# torchrun's ranks need, and git's for the diff's application. Everything else the judge's
# environment holds (what an import in the judge wrote, pytest's own variables) stays out, so
# nothing the judge did reaches a candidate run and no candidate can tell it is being graded.
CANDIDATE_ENV = frozenset({
    *PASSTHROUGH_ENV, "HOME", "TMPDIR", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE",
    "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONNOUSERSITE", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "GLOO_SOCKET_IFNAME", "RANK", "LOCAL_RANK", "WORLD_SIZE",
    "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "ROLE_RANK",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "GIT_DIR", "GIT_WORK_TREE", "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_NOSYSTEM", "GIT_TERMINAL_PROMPT",
    # The judge's own, set for every candidate command: where a stuck process leaves its
    # stacks (grading.stacks).
    "GRADING_STACKS_DIR",
})
# Same role as the harness's attributes: in-tree .gitattributes cannot make git apply convert,
# filter or re-encode anything.
NEUTRAL_ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding !diff\n"
# Exit statuses a shell reports for a child killed by one of these signals (128 + N) mean the
# program crashed, not that it ran and reported failure.
CRASH_SIGNALS = (
    signal.SIGSEGV,
    signal.SIGABRT,
    signal.SIGBUS,
    signal.SIGFPE,
    signal.SIGILL,
    signal.SIGKILL,
)


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
    # Mutation analysis (``grading.mutants``) only needs to know whether some contract fails:
    # stop at the first failing one and report the rest ``not_run``. A session's grade never
    # sets this; its report must hold every contract.
    stop_at_first_failure: bool = False
    # Each contract's outcome on stdout as it is decided (a session's grade; the host shows it).
    announce: bool = False
    # Mutation analysis only: which contracts a mutant's grade runs, in the order the
    # reference's per-check coverage gives. ``hidden_tests``: exact node ids to run, in this
    # order (None: all); ``public_tests``: whether the public test command runs; the others are
    # reported ``not_run`` (NOT_SELECTED). ``trace_each_hidden_test``: the reference's grade runs
    # every hidden check in its own pytest process with GRADING_TRACE_TEST set to its node id,
    # so coverage is filed under the right check (see grading.trace).
    hidden_tests: tuple[str, ...] | None = None
    public_tests: bool = True
    # Run the public tests after the hidden checks instead of before (mutation analysis only).
    public_tests_last: bool = False
    trace_each_hidden_test: bool = False
    # With trace_each_hidden_test: (k, n) runs only every n-th collected check from the k-th
    # (the reference graded in n parts side by side, one grader container each); the others
    # are reported ``not_run`` (NOT_SELECTED).
    hidden_share: tuple[int, int] | None = None
    # Mutation analysis only: start the candidate's Python processes from a warm server that
    # imported torch once (``grading.warm_start``); never for a session's grade or the
    # reference's (whose coverage hook must see each interpreter start).
    warm_start: bool = False
    # Mutation analysis only: the declared configurations this grader cannot run, as the
    # reference's grade in this image found them (None: ask torch, which a process that has not
    # imported it pays 1.4 s for; a mutant's grade would pay it every time).
    configurations_not_run: dict[str, str] | None = None
    # With warm_start: a folder only root reaches, kept from one grade to the next, where the
    # worker's daemons listen (``grading.warm_start.connect_daemon``).
    warm_start_daemons: Path | None = None
    # Run a contract that crashed or hung once more (grading.confirm). Mutation analysis turns
    # it off: it confirms a crash or hang kill with the killing contract alone.
    confirm_unsteady: bool = True


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

    @property
    def warm_tally(self) -> Path:
        """Candidate processes the judge started warm and fresh (``grading.warm_start``)."""
        return self.judge / "warm-starts.jsonl"

    def make(self) -> None:
        os.chmod(self.work, 0o711)
        for sub in ("home", "tmp", "cwd"):
            (self.judge / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.judge, 0o700)
        self.trees.mkdir(exist_ok=True)
        os.chmod(self.trees, 0o755)
        sealed.make_area(self.area)
        jobcgroup.close_root()
