"""The candidate's reaper: ``kill(-1, SIGKILL)`` with the candidate uid's right to signal, from
a process the candidate can neither signal, trace nor stop.

The kernel lets a process signal another when the sender's real or effective uid is the
target's real or saved uid. The reaper runs with real and saved uid REAPER and effective uid
CANDIDATE (``setresuid``): its effective uid reaches every candidate process, while no
candidate process (real, effective and saved uid CANDIDATE) matches its real or saved uid, so
none may signal it, and ptrace needs every uid to match. Nothing of the judge matches it either
(real and saved uid 0), so ``kill(-1)`` from it reaches the candidate's processes and only
those. The kernel delivers ``kill(-1)`` in one walk of its task list and a fork that races it
fails, so a process that forks and exits all the time is caught as surely as one that sleeps.

The judge starts it once per process before any candidate code runs (``grading.sealed``), so
the candidate cannot keep it from starting (at its pids limit) or watch for it starting.
Protocol on stdin/stdout: each ``reap`` line is answered by ``done N`` once no live candidate
process is left (N rounds), or ``left N`` after the last round; EOF ends it.

    python -m grading.reaper CANDIDATE_UID REAPER_UID
"""

from __future__ import annotations

import os
import signal
import sys
import time

from grading.sealed import processes_of

ROUNDS = 500


def reap(uid: int) -> tuple[bool, int]:
    """Signal every process of ``uid`` until none is alive: (none left, rounds)."""
    for round_no in range(1, ROUNDS + 1):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass  # none this process may signal: nothing of the candidate runs
        if not processes_of(uid):
            return True, round_no
        time.sleep(0.002)
    return not processes_of(uid), ROUNDS


def main(argv: list[str]) -> int:
    candidate, own = int(argv[1]), int(argv[2])
    if 0 in (candidate, own) or candidate == own:
        print(f"grading.reaper: bad uids {candidate} {own}", file=sys.stderr)
        return 2
    os.setgroups([])
    os.setresgid(own, own, own)
    os.setresuid(own, candidate, own)  # real and saved: its own; effective: the candidate's
    for line in sys.stdin:
        if line.strip() != "reap":
            continue
        clean, rounds = reap(candidate)
        print(f"{'done' if clean else 'left'} {rounds}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
