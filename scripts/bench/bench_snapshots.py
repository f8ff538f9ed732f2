"""What trajectory snapshots cost a session: the demo session with and without them.

Runs the demo study's first session (scripted agent, real container, no grading) with
snapshots and without, alternately, ``--repeats`` times each, and prints the median wall time
of each and their ratio, plus the snapshots' own time as the session recorded it
(``usage.harness_seconds``, kept off the budget's clock). Goal: under 5% added wall time.
Usage: .venv/bin/python scripts/bench/bench_snapshots.py [--repeats 2] [--study studies/demo.yaml]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from harness.paths import REPO_ROOT
from harness.records.attempt import read_record
from harness.study.session import SessionOptions, run_session


def study_copy(study: Path, runs: Path) -> Path:
    data = yaml.safe_load(study.read_text())
    data["runs_dir"] = str(runs)
    path = runs.parent / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--study", type=Path, default=REPO_ROOT / "studies/demo.yaml")
    args = parser.parse_args()
    walls: dict[bool, list[float]] = {True: [], False: []}
    taken: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        study = study_copy(args.study, Path(tmp) / "runs")
        for _ in range(args.repeats):
            for snapshots in (True, False):  # alternated: the host's load hits both alike
                started = time.monotonic()
                attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control",
                                                     grade=False, snapshots=snapshots),
                                      log=lambda _m: None)
                walls[snapshots].append(time.monotonic() - started)
                usage = read_record(attempt).usage
                if snapshots and usage is not None:
                    taken.append(usage.harness_seconds)
    on, off = statistics.median(walls[True]), statistics.median(walls[False])
    print(f"demo session wall: with snapshots {on:.1f} s, without {off:.1f} s "
          f"(median of {args.repeats}); ratio {on / off:.3f}")
    print(f"snapshot time recorded by the sessions: median {statistics.median(taken):.2f} s "
          f"= {100 * statistics.median(taken) / on:.1f}% of the session's wall")


if __name__ == "__main__":
    main()
