"""Trajectory snapshots: the agent's code as a diff against the baseline at each moment that
matters (a candidate run, a public-test run, a diagnostic call, the submit, a budget stop).

Each snapshot takes the same path as the final diff (copy the tree out of the container,
diff it on the host against the pristine baseline, with the same caps), is kept as
``snapshots/NNNN.diff`` in the attempt folder (so the manifest hashes it) and announced by a
``snapshot`` event. A snapshot that cannot be taken is an event saying why; it never stops
the session. Grading them is post hoc and blind (``harness grade --snapshots``).
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from pathlib import Path
from typing import Literal

from harness.errors import HarnessError
from harness.infra.sandbox import WORKSPACE, Sandbox
from harness.infra.workspace import compute_diff, extract_tree
from harness.records.attempt import AttemptPaths
from harness.records.budget import Ledger
from harness.records.transcript import TranscriptWriter

# The tool calls before which the code is captured: what they are about to run or hand in.
SNAPSHOT_TOOLS = frozenset({"run_candidate", "run_public_tests", "traincheck", "submit"})

Trigger = Literal["run_candidate", "run_public_tests", "traincheck", "submit", "budget_stop"]
# The harness's time for one session's snapshots, all together. A snapshot's time is off the
# agent's clock (it is frozen meanwhile), so it must be bounded apart: past this, snapshots are
# recorded as not taken. The final diff is not a snapshot and is always taken.
SNAPSHOT_ALLOWANCE_S = 300.0


def snapshot_name(index: int) -> str:
    return AttemptPaths.snapshot_diff_name(index)


class Snapshots:
    """Takes the snapshots of one session."""

    def __init__(self, sandbox: Sandbox, baseline: Path, attempt_dir: Path,
                 transcript: TranscriptWriter, ledger: Ledger, *, max_tree_bytes: int,
                 max_diff_bytes: int, allowance_s: float = SNAPSHOT_ALLOWANCE_S) -> None:
        self.sandbox = sandbox
        self.ledger = ledger
        self.baseline = baseline
        self.attempt_dir = attempt_dir
        self.transcript = transcript
        self.max_tree_bytes = max_tree_bytes
        self.max_diff_bytes = max_diff_bytes
        self.allowance_s = allowance_s
        self.spent_s = 0.0
        self.taken = 0

    def capture(self, trigger: Trigger, call_id: str | None = None) -> None:
        if self.spent_s >= self.allowance_s:
            self.taken += 1
            self.transcript.append("snapshot", {
                "index": self.taken, "trigger": trigger, "call_id": call_id, "diff": None,
                "error": f"not taken: the session's snapshots have used their allowance of "
                         f"{self.allowance_s:g} s ({self.spent_s:.1f} s)", "duration_s": 0.0})
            return
        started = time.monotonic()
        paused = False
        try:
            # The agent's processes are frozen while the tree is copied: its time is then the
            # harness's own, off the budget's clock for both arms alike, and nothing the agent
            # left running can use it. If the freezer refuses, they run on and the time stays
            # on the agent's clock.
            paused = self._pause()
            self._capture(trigger, call_id, started, paused)
        finally:
            if paused:
                self._thaw()
            elapsed = time.monotonic() - started
            self.spent_s += elapsed
            if paused:
                self.ledger.add_harness_time(elapsed)

    def _pause(self) -> bool:
        try:
            return self.sandbox.freeze()
        except HarnessError:  # the container is gone: the copy below says so
            return False

    def _thaw(self) -> None:
        # A container that is gone cannot be thawed; the next tool call says it is gone.
        with contextlib.suppress(Exception):
            self.sandbox.thaw()

    def _capture(self, trigger: Trigger, call_id: str | None, started: float,
                 paused: bool) -> None:
        self.taken += 1
        index = self.taken
        scratch = self.attempt_dir / f".snapshot-{index:04d}"
        try:
            extract_tree(self.sandbox.get_archive(WORKSPACE), scratch,
                         max_bytes=self.max_tree_bytes)
            patch, result = compute_diff(self.baseline, scratch,
                                         max_diff_bytes=self.max_diff_bytes)
        except Exception as exc:  # too large, unsafe, the container gone: said, never fatal
            error = exc.line() if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}"
            self.transcript.append("snapshot", {
                "index": index, "trigger": trigger, "call_id": call_id, "diff": None,
                "error": error[:2000], "duration_s": round(time.monotonic() - started, 4),
                "paused": paused})
            return
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        rel = snapshot_name(index)
        path = self.attempt_dir / rel
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(patch)
        self.transcript.append("snapshot", {
            "index": index, "trigger": trigger, "call_id": call_id, "diff": rel,
            "sha256": hashlib.sha256(patch).hexdigest(), "bytes": len(patch),
            "files_changed": result.files_changed,
            "duration_s": round(time.monotonic() - started, 4), "paused": paused})
