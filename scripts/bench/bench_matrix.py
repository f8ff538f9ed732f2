"""A matrix run's slot utilisation and the harness's own time per session, measured in one run.

Runs a real matrix (``harness matrix run``, local executor) of a frozen study and reads its
state file and session records afterwards:

- slot utilisation = busy slot-seconds / available slot-seconds, where a slot is busy from a
  session worker's start to its exit, and available is the number of slots times the span from
  the run's start to the end of its last session worker (the gradings that follow run in
  their own workers and are not slot time);
- harness time per session = the session worker's wall time minus the agent's part (the
  ledger's wall clock, from the first model turn to the agent's end): Python start-up, the
  lock check, container start, copying the workspace in and out, the diff, the record and
  manifest. Reported in seconds and as a share of the worker's wall time. The grader's time
  is not in it.

By default it makes a study of the fast fixture task (``--pairs`` pairs, both arms, 1 CPU per
session, so ``host cores`` slots) in a temporary runs folder; ``--think S`` adds a step in
which the scripted agent works S seconds (``sleep``), standing in for a model's turns, to see
the share at longer sessions. ``--study FILE`` runs a study of yours instead (frozen first).
Usage: .venv/bin/python scripts/bench/bench_matrix.py [--pairs 4] [--think 0] [--study FILE]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import yaml

from harness.paths import REPO_ROOT
from harness.records.attempt import TRANSCRIPT_NAME, study_records
from harness.records.study import load_study
from harness.records.transcript import read_events
from harness.study.matrix.state import MatrixState, state_path

TINY = "tiny-regression"


def fixture_study(folder: Path, pairs: int, think: float) -> Path:
    study = yaml.safe_load((REPO_ROOT / "tests/fixtures/studies/fixture.yaml").read_text())
    steps = yaml.safe_load((REPO_ROOT / "tests/fixtures/agents/tiny-regression-solve.yaml")
                           .read_text())["steps"]
    if think:
        steps = [{"tool": "bash", "args": {"command": f"sleep {think}",
                                           "timeout_s": think + 60}}, *steps]
    (folder / "agent.yaml").write_text(yaml.safe_dump({"steps": steps}))
    study.update(name=f"bench-{uuid.uuid4().hex[:6]}", pairs_per_task=pairs,
                 runs_dir=str(folder / "runs"))
    study["tasks"] = [{"id": TINY, "packet": str(REPO_ROOT / "tests/fixtures/task_packets" / TINY),
                       "hidden": str(REPO_ROOT / "hidden" / TINY),
                       "comparison": "coverage-audit"}]
    study["agent"]["model"] = f"scripted:{folder / 'agent.yaml'}"
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def harness(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "harness.cli", *args], check=True,
                   stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--think", type=float, default=0.0)
    parser.add_argument("--study", type=Path)
    parser.add_argument("--parallel", type=int)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-matrix-") as tmp:
        path = args.study or fixture_study(Path(tmp), args.pairs, args.think)
        study = load_study(path)
        harness("freeze", "--study", str(path))
        started = time.monotonic()
        harness("matrix", "run", "--study", str(path),
                *(["--parallel", str(args.parallel)] if args.parallel else []))
        wall = time.monotonic() - started
        revision = max(int(p.stem.split("-")[1]) for p in
                       (study.runs_root() / "locks").glob("rev-*.json"))
        state = MatrixState.model_validate_json(state_path(study, revision).read_text())
        run = state.runs[-1]
        jobs = [j for j in state.jobs if j.run_id == run.run_id and j.kind == "session"]
        if not jobs:
            print("nothing ran (the matrix was already finished)")
            return
        end = max(j.ended_at or 0.0 for j in jobs)
        busy = sum((j.ended_at or end) - (j.started_at or j.submitted_at) for j in jobs)
        slots = run.slots or 1
        available = slots * (end - run.started_at)
        shares, overheads, before, after, walls, queues = [], [], [], [], [], []
        for attempt_dir, record in study_records(study.runs_root()):
            if not record.launch or record.launch.run_id != run.run_id:
                continue
            started = _epoch(record.started_at)
            job = next(j for j in jobs if j.session_id == record.session_id
                       and (j.started_at or 0) <= started <= (j.ended_at or 0))
            events = {e.kind: _epoch(e.ts) for e in read_events(
                attempt_dir / TRANSCRIPT_NAME) if e.kind in ("budget_start", "agent_end")}
            worker = (job.ended_at or 0) - (job.started_at or 0)
            agent = events["agent_end"] - events["budget_start"]
            walls.append(worker)
            overheads.append(worker - agent)
            before.append(events["budget_start"] - (job.started_at or 0))
            after.append((job.ended_at or 0) - events["agent_end"])
            shares.append((worker - agent) / worker)
            queues.append(record.launch.queue_seconds or 0.0)
        print(f"study {study.name}: {len(jobs)} sessions on {slots} slot(s), matrix wall "
              f"{wall:.1f} s (sessions and gradings)")
        print(f"slot utilisation: {busy:.1f} busy / {available:.1f} available slot-seconds "
              f"= {busy / available:.1%}")
        print(f"session worker wall: median {statistics.median(walls):.1f} s; harness time per "
              f"session: median {statistics.median(overheads):.2f} s (min "
              f"{min(overheads):.2f}, max {max(overheads):.2f}) = "
              f"{statistics.median(shares):.1%} of the session's wall (before the agent "
              f"{statistics.median(before):.2f} s, after it {statistics.median(after):.2f} s)")
        print(f"queue time (run start to container start): median "
              f"{statistics.median(queues):.1f} s, max {max(queues):.1f} s")
        grades = [j for j in state.jobs if j.run_id == run.run_id and j.kind == "grade"]
        if grades:
            print(f"gradings: {len(grades)}, median "
                  f"{statistics.median((j.ended_at or 0) - j.submitted_at for j in grades):.1f} "
                  "s each, beside the sessions")


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


if __name__ == "__main__":
    main()
