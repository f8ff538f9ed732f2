"""Grading overhead: ``grade_diff`` vs running the same checks directly, side by side.

Both sides run in a fresh grader container on the same task and the same diff (the hidden
reference by default). "Direct" applies the diff with ``git apply`` and runs the public test
command (as the candidate uid) and pytest on the hidden checks, nothing else; the checks'
own training runs and probes run as the candidate, as they must. "Harness" is the full
grading path: input transfer, digests, diff application, protected-path restore, the sealed
layout and hand-overs, per-contract isolation and watchdogs, reaping, ``grade.json``, output
transfer, binding and manifest. Repetitions are interleaved so the
shared machine's noise lands on both sides; the ratio of medians is printed.

Usage: .venv/bin/python scripts/bench/bench_grading.py [--task tiny-regression] [--reps 3]
       [--hidden PATH]   (another hidden tree of the task, e.g. an earlier commit's, to compare
                          the overhead before and after its checks changed)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from grading.hashing import tree_sha256
from harness.infra import images
from harness.infra.workspace import snapshot_baseline, tar_inputs
from harness.oracle.grade import JUDGE_USER, GraderInputs, grade_diff, grader_sandbox
from harness.paths import REPO_ROOT
from harness.records.packets import load_packet

PACKETS = {"tiny-regression": REPO_ROOT / "tests/fixtures/task_packets/tiny-regression"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="tiny-regression")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--hidden", type=Path, default=None,
                        help="the task's hidden tree (default: hidden/<task> of this checkout)")
    args = parser.parse_args()
    packet_dir = PACKETS.get(args.task, REPO_ROOT / "task_packets" / args.task)
    hidden = (args.hidden or REPO_ROOT / "hidden" / args.task).resolve()
    packet = load_packet(packet_dir)
    client = images.docker_client()
    grader = images.image_id(client, "grader")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        baseline = work / "baseline"
        snapshot_baseline(packet.repo, baseline)
        diff = hidden / "reference" / "solution.patch"
        inputs = GraderInputs(baseline=baseline, packet_yaml=packet_dir / "packet.yaml",
                              hidden=hidden, diff=diff)

        def direct() -> None:
            with grader_sandbox(client, grader, labels={"org.harness.bench": "1"},
                                name_hint="bench") as box:
                box.put_archive("/workspace", tar_inputs({"repo": baseline, "base": baseline,
                                                           "hidden": hidden,
                                                           "change.diff": diff}))
                as_candidate = "setpriv --reuid 2000 --regid 2000 --clear-groups"
                script = ("cd /workspace && mkdir -m 711 area && chmod 755 /workspace && "
                          "(cd repo && git init -q && git apply /workspace/change.diff) && "
                          "cp -r repo public && chown -R 2000:2000 public && "
                          f"(cd public && HOME=/tmp {as_candidate} "
                          f"sh -c '{packet.spec.public_test_command}'); "
                          "GRADING_WORKDIR=/workspace/repo GRADING_BASELINE=/workspace/base "
                          "GRADING_PROBES=/workspace/hidden/probes "
                          "GRADING_CANDIDATE_AREA=/workspace/area "
                          "python -m pytest -q -p no:cacheprovider /workspace/hidden/checks")
                box.exec(["bash", "-c", script], timeout_s=1800, user=JUDGE_USER)

        def harness(n: int) -> None:
            out = work / f"grade-{n}"
            out.mkdir()
            grade_diff(inputs, out, client=client)

        direct_s, harness_s = [], []
        for n in range(args.reps):
            start = time.perf_counter()
            direct()
            direct_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            harness(n)
            harness_s.append(time.perf_counter() - start)
    d, h = statistics.median(direct_s), statistics.median(harness_s)
    print(f"task {args.task}, reference diff, {args.reps} interleaved repetitions; hidden tree "
          f"{tree_sha256(hidden)[:16]} ({len(list((hidden / 'checks').glob('test_*.py')))} "
          "check modules)")
    print(f"direct checks   median {d:7.1f} s  ({', '.join(f'{x:.1f}' for x in direct_s)})")
    print(f"harness grading median {h:7.1f} s  ({', '.join(f'{x:.1f}' for x in harness_s)})")
    print(f"overhead ratio  {h / d:.2f}")


if __name__ == "__main__":
    main()
