"""Running contracts: the candidate's environment, and the public test command."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from grading import sealed
from grading.layout import (
    CRASH_SIGNALS,
    DEFAULT_PATH,
    EXCERPT_CHARS,
    LOG_DIR,
    PASSTHROUGH_ENV,
    GradeOptions,
    Layout,
)
from grading.models import (
    PUBLIC_CONTRACT_ID,
    ContractResult,
    Outcome,
)
from grading.packet import PacketSpec
from grading.run import RunResult, run_command, signal_name


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
    pool = sealed.candidate_uids()
    env[sealed.CANDIDATE_UID_VAR] = str(pool.start)
    env[sealed.CANDIDATE_UIDS_VAR] = str(len(pool))
    env[sealed.CANDIDATE_AREA_VAR] = str(layout.area)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env.update(extra or {})
    return env


def read_log_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def excerpt_of(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def run_evidence(res: RunResult) -> dict[str, Any]:
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
    for sig in CRASH_SIGNALS:
        if exit_code == 128 + sig:
            return sig.name
    return None


def public_statement(spec: PacketSpec) -> str:
    return (
        f"The public test command `{spec.public_test_command}` exits 0 within "
        f"{spec.public_test_timeout_s:g} s on the graded tree."
    )


def run_public_tests(opts: GradeOptions, layout: Layout, *, rerun: bool = False) -> ContractResult:
    """The public test command's contract; ``rerun``: its confirming run (grading.confirm),
    in a fresh copy of the graded tree, logged apart."""
    spec = opts.packet
    # The candidate's own copy: the public command may write where it runs.
    repo = sealed.give(layout.graded, "public-tests-rerun" if rerun else "public-tests")
    log_rel = f"{LOG_DIR}/public-tests{'.rerun' if rerun else ''}.log"
    res = run_command(
        spec.public_test_command,
        cwd=repo,
        env=child_env(layout),
        timeout_s=spec.public_test_timeout_s,
        log_path=opts.out / log_rel,
    )
    log_text = read_log_text(opts.out / log_rel)
    evidence = run_evidence(res)
    summary = [ln for ln in log_text.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    if summary:
        evidence["failed"] = summary[:50]
    evidence["excerpt"] = excerpt_of(log_text)
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
        statement=public_statement(spec),
        outcome=outcome,
        reason=reason,
        evidence=evidence,
        log=log_rel,
    )
