"""Local slots and study caps: how many sessions run at once on this host, and whether the caps
still cover the next one at its full budget."""

from __future__ import annotations

import os

from harness.errors import HarnessError
from harness.infra.gpu_slots import detect_gpus
from harness.infra.sandbox import SandboxLimits
from harness.records.budget import deadline, worst_case_hours
from harness.study.freeze import Frozen, LockedSession
from harness.study.matrix.rows import SessionRow

GRADER_CPUS = SandboxLimits().cpus  # harness/oracle/grade.py's grader containers keep the default


def worst_case(session: LockedSession) -> tuple[float, float]:
    """(CPU-hours, GPU-hours) the session may use at most."""
    return worst_case_hours(session.budget, gpus=session.gpus, cpus=session.cpus)


def worst_case_seconds(session: LockedSession) -> float:
    return deadline(session.budget, gpus=session.gpus, cpus=session.cpus)[0]


def cap_problem(frozen: Frozen, rows: list[SessionRow], reserved: list[LockedSession],
                session: LockedSession) -> str | None:
    """Why the study's remaining hours cannot cover this session's budget, or None."""
    caps = frozen.lock.caps
    need_cpu, need_gpu = worst_case(session)
    for kind, cap, used, held, need in (
        ("CPU", caps.cpu_hours, sum(r.cpu_hours for r in rows),
         sum(worst_case(s)[0] for s in reserved), need_cpu),
        ("GPU", caps.gpu_hours, sum(r.gpu_hours for r in rows),
         sum(worst_case(s)[1] for s in reserved), need_gpu),
    ):
        if cap is None or need == 0:
            continue
        left = cap - used - held
        if need > left + 1e-9:
            return (f"study cap reached: {max(left, 0):.3f} of {cap:g} {kind}-hours left "
                    f"({used:.3f} used, {held:.3f} held by running sessions), and "
                    f"{session.session_id} may use up to {need:.3f}")
    return None


def host_cores() -> int:
    return len(os.sched_getaffinity(0))


def local_slots(sessions: list[LockedSession], parallel: int | None,
                oversubscribe: bool) -> tuple[int, bool]:
    """(session slots, whether they promise more CPUs than the host has)."""
    cores = host_cores()
    cpus = max(s.cpus for s in sessions)
    gpus = max(s.gpus for s in sessions)
    slots = max(1, int(cores // cpus))
    if gpus:
        host_gpus = len(detect_gpus())
        if host_gpus < gpus:
            raise HarnessError(f"a session is promised {gpus} GPU(s) and this host has "
                               f"{host_gpus}", "run the matrix on a GPU host, or with "
                               "--executor slurm")
        slots = min(slots, host_gpus // gpus)
    if parallel is not None:
        if gpus and parallel * gpus > len(detect_gpus()):
            raise HarnessError(f"--parallel {parallel} needs {parallel * gpus} GPUs; this host "
                               f"has {len(detect_gpus())}",
                               f"use --parallel {len(detect_gpus()) // gpus} or less")
        if parallel * cpus > cores and not oversubscribe:
            raise HarnessError(
                f"--parallel {parallel} promises {parallel * cpus:g} CPUs to sessions on a host "
                f"with {cores}", f"use --parallel {slots} or less, or add --oversubscribe for "
                "a demo (its sessions' timings are then not comparable)")
        slots = parallel
    return slots, slots * cpus > cores
