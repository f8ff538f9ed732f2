"""Cost of one TrainCheck diagnostic run (collect + check) vs the plain run, side by side.

In one treatment container, on the task's healthy baseline and the packet's diagnostic run
arguments: "plain" is ``train.py`` run by the contained runner without tracing; "full" is
the traced run recording every torch call plus ``traincheck-check`` against the frozen
reference invariants; "selective" is the same with TrainCheck's selective collection (the
traced run given the frozen invariants, so only the functions they name dump records).
Repetitions are interleaved so the shared machine's noise lands on every side; the ratio of
medians is printed per configuration, with the traced-run and check parts apart.

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

ARMS = ("plain", "full", "selective")


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
            collect_s: dict[str, list[float]] = {arm: [] for arm in ARMS}
            check_s: dict[str, list[float]] = {arm: [] for arm in ARMS}
            violations: dict[str, list[int]] = {arm: [] for arm in ARMS}
            with DiagnosticsBox(client, f"bench-{args.task}-{config}") as box:
                tree = box.put_tree("baseline", baseline.tree)
                box.sandbox.put_file("/workspace", "ref.json", frozen.invariants)
                for rep in range(args.reps):
                    for arm in ARMS:
                        run = traced_run(box, tree, f"{RUNS}/{arm}-{rep}", config,
                                         spec.train_args(feature=False), spec.wall_s,
                                         traced=arm != "plain",
                                         selective="/workspace/ref.json"
                                         if arm == "selective" else None)
                        assert run["outcome"] == "ok", (arm, run["outcome"], run["cause"])
                        collect_s[arm].append(run["wall_s"])
                        if arm == "plain":
                            continue
                        checked = box.call(["check", "--trace", run["trace_dir"],
                                            "--invariants", "/workspace/ref.json",
                                            "--out", f"{RUNS}/chk-{arm}-{rep}"],
                                           timeout_s=1200)
                        check_s[arm].append(checked["wall_s"])
                        violations[arm].append(len(checked.get("violations") or []))
            plain = statistics.median(collect_s["plain"])
            print(f"{args.task} {config}: plain {plain:.1f} s  (medians of {args.reps} "
                  "interleaved reps)")
            for arm in ARMS[1:]:
                c, k = statistics.median(collect_s[arm]), statistics.median(check_s[arm])
                print(f"  {arm:9s} traced run {c:.1f} s + check {k:.1f} s = {c + k:.1f} s, "
                      f"ratio {(c + k) / plain:.1f}x; violations per rep {violations[arm]}")


if __name__ == "__main__":
    main()
