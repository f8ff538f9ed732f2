"""Blind faults, measured: does the grader catch faults written without seeing its checks?

Someone who has read only the task's packet and its reference solution (never
``hidden/<task>/checks/``) writes realistic faults, one folder each: ``fault.patch`` (a diff
on top of the reference) and ``fault.yaml`` (id, area, description, how, in_practice, and
``shown_by``: the command and output that showed the fault changes behaviour). This script
grades each one for real with the mutation analysis' grader pool (``harness.oracle
.mutant_pool``): the reference graded in full first, then each fault, as the diff an agent
would submit (baseline -> reference + fault), in grader containers with no network, every
contract run until one fails, and a kill by a crash, a hang or after other checks in the same
process graded again alone before it counts (``grading.mutants``). A fault is caught when a
contract fails; the report names the first that did.

    .venv/bin/python scripts/qualify/blind_faults.py --task moe-router --faults DIR \
        --report reports/oracle-strength/blind/moe-router-2026-12-05.md

Nothing under ``hidden/`` changes. A caught fault becomes an oracle regression by hand
(``hidden/<task>/regressions/blind-<id>/``, its ``breaks`` from ``harness validate --variant
regression:blind-<id>``); a missed one is a finding, closed by a check aimed at its class
(docs/oracle-strength.md, "Blind faults").
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from grading.hashing import grader_source_sha256, tree_sha256  # noqa: E402
from grading.mutant_report import DETECTED, REFERENCE_NAME, MutantResult, MutantSpec  # noqa: E402
from harness.infra.workspace import snapshot_baseline  # noqa: E402
from harness.oracle.mutant_pool import MutantInputs, grade_in_pool, grade_reference  # noqa: E402
from harness.oracle.validate import fault_diff  # noqa: E402

PREFIX = "blind-"
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? ", re.MULTILINE)
FILE = re.compile(r"^--- a/(\S+)", re.MULTILINE)


def blind_faults(folder: Path) -> list[tuple[str, Path]]:
    """(id, folder) of every fault under ``folder`` (sub-folders with fault.yaml and
    fault.patch), sorted by id."""
    found = []
    for spec in sorted(folder.glob("*/fault.yaml")):
        data = yaml.safe_load(spec.read_text())
        if not (spec.parent / "fault.patch").is_file():
            raise SystemExit(f"{spec.parent}: fault.yaml without fault.patch")
        found.append((str(data["id"]), spec.parent))
    if not found:
        raise SystemExit(f"{folder}: no <fault>/fault.yaml found")
    return sorted(found)


def spec_of(fault_id: str, patch: str) -> MutantSpec:
    """Where the fault's first hunk sits in the reference: the grader runs the contracts that
    executed those lines first."""
    path, hunk = FILE.search(patch), HUNK.search(patch)
    if path is None or hunk is None:
        raise SystemExit(f"{fault_id}: fault.patch has no file header or hunk")
    first = int(hunk[1])
    return MutantSpec(id=PREFIX + fault_id, path=path[1], first_line=first,
                      last_line=first + max(int(hunk[2] or 1), 1) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--faults", type=Path, required=True, help="one folder per fault")
    parser.add_argument("--report", type=Path, required=True, help="markdown; .json beside it")
    parser.add_argument("--writer", default="a helper who read only the packet and the "
                        "reference solution")
    parser.add_argument("--workers", type=int, default=2, help="grader containers side by side")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "blind-faults",
                        help="where each fault's grading log is kept")
    a = parser.parse_args()

    faults = blind_faults(a.faults)
    packet, hidden = ROOT / "task_packets" / a.task, ROOT / "hidden" / a.task
    reference = (hidden / "reference" / "solution.patch").read_bytes()
    started = dt.datetime.now(dt.UTC)
    out_dir = a.runs / a.task / started.strftime("%Y%m%dT%H%M%S")
    out_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="blind-faults-") as tmp:
        work = Path(tmp)
        baseline = work / "baseline"
        snapshot_baseline(packet / "repo", baseline)
        folder = work / "mutants"
        folder.mkdir()
        specs = []
        for fault_id, source in faults:
            patch = (source / "fault.patch").read_bytes()
            scratch = work / f"apply-{fault_id}"
            scratch.mkdir()
            (folder / f"{PREFIX}{fault_id}.diff").write_bytes(
                fault_diff(baseline, reference, patch, scratch))
            specs.append(spec_of(fault_id, patch.decode()).model_dump())
        (folder / "index.json").write_text(json.dumps(specs))
        (work / "reference.diff").write_bytes(reference)
        inputs = MutantInputs(baseline=baseline, packet_yaml=packet / "packet.yaml",
                              hidden=hidden, reference_diff=work / "reference.diff",
                              mutants=folder, grader_sha256=grader_source_sha256(),
                              hidden_sha256=tree_sha256(hidden))
        header = grade_reference(inputs, out_dir, timeout_s=3600, parts=a.workers, log=print)
        print(f"reference: {header.reference_verdict} in {header.reference_duration_s:.0f} s")
        (out_dir / REFERENCE_NAME).write_text(header.model_dump_json())
        results: dict[str, MutantResult] = {}

        def on_result(result: MutantResult) -> None:
            results[result.id] = result
            print(f"{result.id}: {result.status} {result.killed_by or ''} "
                  f"({result.duration_s:.0f} s)", flush=True)

        grade_in_pool(inputs, out_dir / REFERENCE_NAME, [s["id"] for s in specs], out_dir,
                      workers=a.workers, per_mutant_s=5400, on_result=on_result, log=print)
    rows = [{"fault": fid, "caught": results[PREFIX + fid].status in DETECTED,
             "status": results[PREFIX + fid].status,
             "caught_by": results[PREFIX + fid].killed_by,
             "outcome": results[PREFIX + fid].outcome,
             "confirmed": results[PREFIX + fid].confirmed,
             "reason": (results[PREFIX + fid].reason or "")[:300]} for fid, _ in faults]
    caught = sum(r["caught"] for r in rows)
    day = started.date().isoformat()
    lines = [f"# Blind faults: {a.task}, {day}", "",
             f"**blind faults: caught {caught} of {len(rows)}** ({day}); written by {a.writer}; "
             f"graded by `scripts/qualify/blind_faults.py` against grading code "
             f"`{inputs.grader_sha256[:16]}` and hidden tree `{inputs.hidden_sha256[:16]}` "
             f"(the reference graded `{header.reference_verdict}` first).", "",
             "| fault | result | first failing contract | outcome | confirmed |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        by = f"`{r['caught_by']}`" if r["caught_by"] else ("**not caught**" if not r["caught"]
                                                            else r["reason"])
        lines.append(f"| {r['fault']} | {r['status']} | {by} | {r['outcome'] or ''} | "
                     f"{r['confirmed'] or ''} |")
    a.report.parent.mkdir(parents=True, exist_ok=True)
    a.report.write_text("\n".join(lines) + "\n")
    a.report.with_suffix(".json").write_text(json.dumps(
        {"task": a.task, "date": day, "caught": caught, "total": len(rows),
         "grader_source_sha256": inputs.grader_sha256, "hidden_tree_sha256":
         inputs.hidden_sha256, "faults": rows}, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
