"""Grading overhead: ``grade_diff`` vs running the same checks directly, side by side.

Both sides run in a fresh grader container on the same task and the same diff (the hidden
reference by default). "Direct" applies the diff with ``git apply`` and runs the public test
command and pytest on the hidden checks, nothing else. "Harness" is the full grading path:
input transfer, diff application, protected-path restore, per-contract isolation and
watchdogs, ``grade.json``, output transfer and manifest. Repetitions are interleaved so the
shared machine's noise lands on both sides; the ratio of medians is printed.

Usage: .venv/bin/python scripts/bench/bench_grading.py [--task tiny-regression] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from harness import images
from harness.grade import GraderInputs, grade_diff, tar_inputs
from harness.images import REPO_ROOT
from harness.packets import load_packet
from harness.sandbox import Sandbox, SandboxLimits
from harness.workspace import snapshot_baseline

PACKETS = {"tiny-regression": REPO_ROOT / "tests/fixtures/task_packets/tiny-regression"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="tiny-regression")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    packet_dir = PACKETS.get(args.task, REPO_ROOT / "task_packets" / args.task)
    hidden = REPO_ROOT / "hidden" / args.task
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
            with Sandbox(client, grader, labels={"org.harness.bench": "1"},
                         limits=SandboxLimits(pids=1024)) as box:
                box.put_archive("/workspace", tar_inputs({"repo": baseline,
                                                           "hidden": hidden,
                                                           "change.diff": diff}))
                script = (f"cd /workspace/repo && git init -q && git apply /workspace/change.diff"
                          f" && {packet.spec.public_test_command}; "
                          "GRADING_WORKDIR=/workspace/repo python -m pytest -q "
                          "-p no:cacheprovider /workspace/hidden/checks")
                box.exec(["bash", "-c", script], timeout_s=1800)

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
    print(f"task {args.task}, reference diff, {args.reps} interleaved repetitions")
    print(f"direct checks   median {d:7.1f} s  ({', '.join(f'{x:.1f}' for x in direct_s)})")
    print(f"harness grading median {h:7.1f} s  ({', '.join(f'{x:.1f}' for x in harness_s)})")
    print(f"overhead ratio  {h / d:.2f}")


if __name__ == "__main__":
    main()
