"""Warm starts in mutant grades: the same mutants graded cold and warm, side by side.

``harness oracle-strength --mutant ...`` twice per repetition, in one grader container
(``--workers 1``, so nothing else shares the cores), once with every candidate process a fresh
interpreter (``--cold-start``) and once forked from the warm server (``grading.warm_start``),
the order alternating between repetitions so the shared machine's noise lands on both sides.
The reference's grade comes from the run cache (grade it once first: any oracle-strength run
of the task). Prints each mutant's grading time both ways and the ratio of the totals, and
fails if a mutant's verdict (status, killing contract) differs between the two.

Usage: .venv/bin/python scripts/bench/bench_warm_start.py [--task hybrid-arch] [--reps 1]
       [--mutant ID ...]   (default: the two slowest survivors and two kills of the task's
                            committed report)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from harness.oracle.strength import OracleStrengthOptions, OracleStrengthReport, oracle_strength
from harness.paths import REPO_ROOT


def default_mutants(task: str) -> list[str]:
    report = OracleStrengthReport.model_validate_json(
        (REPO_ROOT / "reports" / "oracle-strength" / f"{task}.json").read_text())
    results = [e.result for e in report.entries]
    survivors = sorted((r for r in results if r.status == "survived"),
                       key=lambda r: -r.duration_s)[:2]
    kills = sorted((r for r in results if r.status != "survived"),
                   key=lambda r: r.duration_s)
    middle = kills[len(kills) // 2 - 1:len(kills) // 2 + 1]
    return [r.id for r in survivors + middle]


Graded = dict[str, tuple[str, str, float]]  # mutant -> (status, killing contract, seconds)


def grade(task: str, ids: list[str], warm: bool, report_dir: Path) -> Graded:
    report = oracle_strength(OracleStrengthOptions(
        task=task, packet_dir=REPO_ROOT / "task_packets" / task,
        hidden_dir=REPO_ROOT / "hidden" / task,
        runs_root=REPO_ROOT / "runs" / "oracle-strength" / task, report_dir=report_dir,
        ids=set(ids), workers=1, warm_start=warm),
                             log=lambda line: print(f"  [{'warm' if warm else 'cold'}] {line}"))
    if not report.reference_reused:
        print("  (the reference was graded in this run: its time is not counted below)")
    return {e.result.id: (e.result.status, e.result.killed_by or "", e.result.duration_s)
            for e in report.entries}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="hybrid-arch")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--mutant", action="append", default=[])
    args = parser.parse_args()
    ids = args.mutant or default_mutants(args.task)
    times: dict[bool, dict[str, list[float]]] = {False: {}, True: {}}
    verdicts: dict[bool, dict[str, tuple[str, str]]] = {False: {}, True: {}}
    with tempfile.TemporaryDirectory() as tmp:
        equivalents = REPO_ROOT / "reports" / "oracle-strength" / f"{args.task}.equivalent.yaml"
        if equivalents.is_file():
            (Path(tmp) / equivalents.name).write_text(equivalents.read_text())
        for rep in range(args.reps):
            for warm in ((False, True) if rep % 2 == 0 else (True, False)):
                for mid, (status, killer, seconds) in grade(args.task, ids, warm,
                                                            Path(tmp)).items():
                    times[warm].setdefault(mid, []).append(seconds)
                    if verdicts[warm].setdefault(mid, (status, killer)) != (status, killer):
                        print(f"{mid}: verdict changed between repetitions", file=sys.stderr)
    print(f"\n{args.task}: {len(ids)} mutants, {args.reps} repetition(s), one grader container")
    print(f"{'mutant':28} {'verdict':44} {'cold s':>8} {'warm s':>8} {'warm/cold':>9}")
    differ = []
    for mid in ids:
        cold_s = statistics.median(times[False][mid])
        warm_s = statistics.median(times[True][mid])
        verdict = " ".join(verdicts[False][mid]).strip()[:44]
        print(f"{mid:28} {verdict:44} {cold_s:8.1f} {warm_s:8.1f} {warm_s / cold_s:9.2f}")
        if verdicts[False][mid] != verdicts[True][mid]:
            differ.append(mid)
    total_cold = sum(statistics.median(v) for v in times[False].values())
    total_warm = sum(statistics.median(v) for v in times[True].values())
    print(f"{'total':73} {total_cold:8.1f} {total_warm:8.1f} {total_warm / total_cold:9.2f}")
    print(json.dumps({"task": args.task, "mutants": ids, "cold_s": times[False],
                      "warm_s": times[True]}))
    if differ:
        print(f"verdicts differ cold vs warm: {differ}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
