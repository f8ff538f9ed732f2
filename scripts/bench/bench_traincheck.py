"""Cost of one TrainCheck diagnostic run (collect + check) vs the plain run, side by side.

In one treatment container, on the task's healthy baseline and the packet's diagnostic run
arguments: "plain" is ``train.py`` run by the contained runner without tracing; "diagnostic"
is the traced run plus ``traincheck-check`` against the frozen reference invariants (what
the treatment tool does, minus the upload). Repetitions are interleaved so the shared
machine's noise lands on both sides; the ratio of medians is printed per configuration.

Usage: .venv/bin/python scripts/bench/bench_traincheck.py --task moe-router
       [--config cpu-1 --config gloo-ddp-2] [--reps 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from harness.infra import images
from harness.traincheck.box import RUNS, DiagnosticsBox
from harness.traincheck.reference import CPU_CONFIGURATIONS, load_frozen, traced_run
from harness.traincheck.variants import build_variants, task_files


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="moe-router")
    parser.add_argument("--config", action="append")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    files = task_files(args.task)
    spec = files.packet.spec.diagnostics
    assert spec is not None
    client = images.docker_client()
    with tempfile.TemporaryDirectory() as tmp:
        baseline = build_variants(files, Path(tmp), faults=False)[0]
        for config in args.config or list(CPU_CONFIGURATIONS):
            _, frozen = load_frozen(files, config)
            plain_s: list[float] = []
            diag_s: list[float] = []
            with DiagnosticsBox(client, f"bench-{args.task}-{config}") as box:
                tree = box.put_tree("baseline", baseline.tree)
                box.sandbox.put_file("/workspace", "ref.json", frozen.invariants)
                for rep in range(args.reps):
                    plain = traced_run(box, tree, f"{RUNS}/plain-{rep}", config,
                                       spec.train_args(feature=False), spec.wall_s,
                                       traced=False)
                    plain_s.append(plain["wall_s"])
                    traced = traced_run(box, tree, f"{RUNS}/traced-{rep}", config,
                                        spec.train_args(feature=False), spec.wall_s)
                    checked = box.call(["check", "--trace", traced["trace_dir"], "--invariants",
                                        "/workspace/ref.json", "--out", f"{RUNS}/chk-{rep}"],
                                       timeout_s=1200)
                    diag_s.append(traced["wall_s"] + checked["wall_s"])
            p, d = statistics.median(plain_s), statistics.median(diag_s)
            print(f"{args.task} {config}: plain {p:.1f} s, diagnostic (collect+check) {d:.1f} s, "
                  f"ratio {d / p:.1f}x  (medians of {args.reps} interleaved reps)")


if __name__ == "__main__":
    main()
