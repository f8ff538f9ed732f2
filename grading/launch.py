"""Launch a distributed job the way the graded contracts need it, and name what went wrong.

A static loopback rendezvous (``MASTER_ADDR=127.0.0.1`` and a free port, the environment
``torchrun --nnodes 1 --master-addr 127.0.0.1`` would give each rank): ``torchrun
--standalone`` hangs under ``--network none`` because the container's hostname does not
resolve. Each rank is its own process with its own log, started through ``run_command`` so
nothing it spawns outlives it. The launcher watches all ranks together:

- the first rank to fail (non-zero exit, or a signal) is the culprit; the others get a short
  grace to fail on their own, then are torn down (a collective blocked on a dead peer would
  otherwise wait for the process-group timeout);
- at the hard wall limit every rank still running is killed and the run is a ``hang`` that
  names them;
- a rank that exits 0 but leaves none of its expected outputs is a ``crash`` naming it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from grading import sealed
from grading.run import RunResult, run_command, signal_name

LaunchOutcome = Literal["ok", "crash", "hang"]


class RankResult(BaseModel):
    rank: int
    exit_code: int | None
    signal: str | None
    killed_by_launcher: str | None
    duration_s: float
    log: str
    missing_outputs: list[str] = []


class LaunchResult(BaseModel):
    outcome: LaunchOutcome
    detail: str
    culprit_ranks: list[int]
    ranks: list[RankResult]
    duration_s: float
    master_port: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(
    argv: Sequence[str],
    *,
    nproc: int,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    log_dir: Path,
    grace_s: float = 10.0,
    expected_outputs: Callable[[int], list[Path]] | None = None,
) -> LaunchResult:
    """Run ``argv`` as ``nproc`` ranks; never returns with a rank process alive."""
    port = free_port()
    started = time.monotonic()
    deadline = started + timeout_s
    lock = threading.Lock()
    failures: list[tuple[float, int]] = []  # (when, rank), first failure first
    results: list[RunResult | None] = [None] * nproc

    def watchdog() -> str | None:
        now = time.monotonic()
        if now >= deadline:
            return f"wall limit of {timeout_s:g} s"
        with lock:
            if failures and now >= failures[0][0] + grace_s:
                return f"rank {failures[0][1]} failed; the job was torn down"
        return None

    def run_rank(rank: int) -> None:
        rank_env = {
            **env, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
        }
        # The ranks run side by side: one rank ending must not reap its peers.
        result = run_command(list(argv), cwd, rank_env, timeout_s + grace_s + 30,
                             log_dir / f"rank{rank}.log", watchdog=watchdog,
                             reap_candidate=False)
        results[rank] = result
        if not result.timed_out and result.exit_code != 0:
            with lock:
                failures.append((time.monotonic(), rank))

    threads = [threading.Thread(target=run_rank, args=(r,), daemon=True) for r in range(nproc)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Whatever a rank left behind (however detached) dies before anyone reads its outputs.
    sealed.end_job()

    ranks = []
    for rank, res in enumerate(results):
        assert res is not None
        missing = []
        if expected_outputs is not None and res.exit_code == 0 and not res.timed_out:
            # A link is not an output: the job's folder is sealed later and links go.
            missing = [str(p) for p in expected_outputs(rank)
                       if not p.is_file() or p.is_symlink()]
        ranks.append(RankResult(
            rank=rank, exit_code=res.exit_code,
            signal=signal_name(res.signal) if res.signal else None,
            killed_by_launcher=res.kill_reason, duration_s=res.duration_s,
            log=str(res.log_path), missing_outputs=missing,
        ))
    duration = round(time.monotonic() - started, 3)
    if failures:
        culprit = failures[0][1]
        bad = ranks[culprit]
        how = f"signal {bad.signal}" if bad.signal else f"exit code {bad.exit_code}"
        return LaunchResult(outcome="crash", detail=f"rank {culprit} failed first ({how})",
                            culprit_ranks=[culprit], ranks=ranks, duration_s=duration,
                            master_port=port)
    hung = [r.rank for r in ranks if r.killed_by_launcher]
    if hung:
        return LaunchResult(outcome="hang", detail=f"rank(s) {hung} still running at the wall "
                            f"limit of {timeout_s:g} s", culprit_ranks=hung, ranks=ranks,
                            duration_s=duration, master_port=port)
    empty = [r.rank for r in ranks if r.missing_outputs]
    if empty:
        return LaunchResult(outcome="crash", detail=f"rank(s) {empty} exited 0 but left no "
                            f"output ({ranks[empty[0]].missing_outputs[0]})",
                            culprit_ranks=empty, ranks=ranks, duration_s=duration,
                            master_port=port)
    return LaunchResult(outcome="ok", detail=f"{nproc} ranks finished", culprit_ranks=[],
                        ranks=ranks, duration_s=duration, master_port=port)
