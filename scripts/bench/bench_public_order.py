"""Where a mutant's grade runs the public tests: before and after 2026-12-02, side by side.

Before, a mutant's grade ran the public tests first whenever they had executed the mutated
statement while the reference was graded; now they run first only when they also cost the
reference no more than the cheapest hidden check that executed it, and last otherwise
(``grading.mutants.CoverageMap.select``). This grades the same mutants both ways in one grader
container, one ``grading.mutants --only ID`` per mutant and side, the sides alternating from
mutant to mutant so the shared machine's noise lands on both. The "before" side is today's
grader with the old rule put back by a wrapper (``BEFORE``); everything else (warm daemons,
reference header, per-test limits) is shared.

Mutants: a seeded sample (``--limit``) of those whose statement the public tests executed,
the only ones whose grade the rule can change, leaving out those the task's report marks
equivalent: a survivor runs every contract either way, only in another order, and costs two
full grades here. The reference's header comes from the run cache (graded first, in two
containers, if no run of this grading code did yet). Prints each mutant's time both ways and
the ratio of the totals, and fails if a mutant is detected one way and not the other.

Usage: .venv/bin/python scripts/bench/bench_public_order.py [--task moe-router] [--limit 12]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from grading.hashing import grader_source_sha256, tree_sha256
from grading.models import PUBLIC_CONTRACT_ID
from grading.mutant_report import DETECTED, REFERENCE_NAME, RESULTS_NAME, MutantResult
from grading.mutants import CoverageMap
from harness.infra import images
from harness.infra.workspace import snapshot_baseline
from harness.oracle.grade import INPUT_DIR, JUDGE_USER, OUTPUT_DIR, grader_sandbox, send_inputs
from harness.oracle.mutant_pool import MutantInputs
from harness.oracle.mutation import generate_mutants
from harness.oracle.strength import load_equivalents, mutant_spec, reference_header, write_mutants
from harness.paths import REPO_ROOT

# The old rule: the public tests first whenever they ran the statement.
BEFORE = """
import dataclasses, sys
import grading.mutants as m
select = m.CoverageMap.select
m.CoverageMap.select = lambda self, spec: dataclasses.replace(
    select(self, spec), public_last=m.PUBLIC_CONTRACT_ID not in select(self, spec).covering)
sys.exit(m.main(sys.argv[1:]))
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="moe-router")
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    packet, hidden = REPO_ROOT / "task_packets" / args.task, REPO_ROOT / "hidden" / args.task
    reference = (hidden / "reference" / "solution.patch").read_bytes()
    client = images.docker_client()
    times: dict[str, dict[str, float]] = {"before": {}, "after": {}}
    results: dict[str, dict[str, MutantResult]] = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        snapshot_baseline(packet / "repo", tmp / "baseline")
        mutants = generate_mutants(tmp / "baseline", reference, limit=None, seed=args.seed)
        folder = tmp / "mutants"
        write_mutants(folder, mutants)
        (tmp / "reference.diff").write_bytes(reference)
        inputs = MutantInputs(baseline=tmp / "baseline", packet_yaml=packet / "packet.yaml",
                              hidden=hidden, reference_diff=tmp / "reference.diff",
                              mutants=folder, grader_sha256=grader_source_sha256(),
                              hidden_sha256=tree_sha256(hidden))
        # The reference's header as a run of this grading code caches it (graded now if no
        # run did yet; not counted below).
        cache_dir = REPO_ROOT / "runs" / "oracle-strength" / args.task / "reference-cache"
        header, _ = reference_header(inputs, cache_dir, tmp, reuse=True, parts=2, log=print)
        cache = tmp / REFERENCE_NAME
        cache.write_text(header.model_dump_json())
        coverage = CoverageMap.of(header)
        equivalent = load_equivalents(REPO_ROOT / "reports" / "oracle-strength" /
                                      f"{args.task}.equivalent.yaml")
        public_ran = [m for m in mutants if m.id not in equivalent and
                      PUBLIC_CONTRACT_ID in coverage.select(mutant_spec(m)).covering]
        sample = random.Random(args.seed).sample(public_ran, min(args.limit, len(public_ran)))
        print(f"{args.task}: the statements of {len(public_ran)} of {len(mutants)} mutants (not "
              f"marked equivalent) ran in the public tests; grading {len(sample)} both ways")
        with grader_sandbox(client, images.image_id(client, "grader"), labels={},
                            name_hint="bench-public-order") as box:
            send_inputs(box, inputs.entries(cache))
            for n, mutant in enumerate(sample):
                for side in (("before", "after") if n % 2 == 0 else ("after", "before")):
                    out = f"{OUTPUT_DIR}/{side}-{n}"
                    command = inputs.command(out, "--reference", f"{INPUT_DIR}/{REFERENCE_NAME}",
                                             "--mutants", f"{INPUT_DIR}/mutants",
                                             "--only", mutant.id)
                    if side == "before":
                        command = ["python", "-c", BEFORE, *command[3:]]
                    t0 = time.monotonic()
                    done = box.exec(command, timeout_s=1800, user=JUDGE_USER)
                    times[side][mutant.id] = time.monotonic() - t0
                    if done.exit_code != 0:
                        print(done.output[-2000:], file=sys.stderr)
                        return 1
                    raw = box.exec(["cat", f"{out}/{RESULTS_NAME}"], timeout_s=60,
                                   user=JUDGE_USER).output
                    graded = json.loads(raw)["mutants"][0]
                    results[side][mutant.id] = MutantResult.model_validate(graded)
    print(f"{'mutant':30} {'before':>8} {'after':>8} {'after/before':>12}  first killer "
          "before -> after")
    differ = []
    for mutant in sample:
        b, a = results["before"][mutant.id], results["after"][mutant.id]
        tb, ta = times["before"][mutant.id], times["after"][mutant.id]
        print(f"{mutant.id:30} {tb:8.1f} {ta:8.1f} {ta / tb:12.2f}  "
              f"{b.killed_by or b.status} -> {a.killed_by or a.status}")
        if (b.status in DETECTED) != (a.status in DETECTED):
            differ.append(mutant.id)
    total_b, total_a = sum(times["before"].values()), sum(times["after"].values())
    print(f"{'total':30} {total_b:8.1f} {total_a:8.1f} {total_a / total_b:12.2f}  (median "
          f"{statistics.median(times['before'].values()):.1f} -> "
          f"{statistics.median(times['after'].values()):.1f} s)")
    print(json.dumps({"task": args.task, "before_s": times["before"],
                      "after_s": times["after"]}))
    if differ:
        print(f"detected one way and not the other: {differ}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
