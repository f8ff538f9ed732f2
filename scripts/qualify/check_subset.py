"""Grade a few hidden checks on a few variants, for writing or changing a check.

Gold validation grades every variant with every check (tens of minutes); a check's author needs
the new check on the reference, the baseline and the faults it is meant to catch, in minutes.
This runs the grader's own code (``grading.grade.grade`` with ``hidden_tests`` set and the
public tests left out; with no ``--check``, a whole grade) in one grader container, one variant after the other, and prints each
selected check's outcome and failure line per variant. It decides nothing: `harness validate`
is the measurement; this is the author's loop.

    .venv/bin/python scripts/qualify/check_subset.py --task moe-router \\
        --check 'test_moe_training.py::test_objective_replay_at_other_options' \\
        --variant reference --variant baseline --variant fault:renormalised-gates \\
        --variant regression:aux-gradient-cut --variant blind:2026-12-05/gate-renormalised

A variant is ``reference``, ``baseline``, or ``fault:``/``regression:``/``blind:`` followed by
the folder under ``hidden/<task>/faults|regressions|blind`` (its ``fault.patch`` goes on top of
the reference, as in gold validation), or ``patch:FILE`` (a patch on top of the reference).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import docker

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.infra.images.specs import image_tag  # noqa: E402
from harness.infra.workspace import snapshot_baseline, workspace_archive  # noqa: E402
from harness.oracle.grade import JUDGE_USER, grader_sandbox  # noqa: E402
from harness.oracle.validate import fault_diff  # noqa: E402

KINDS = {"fault": "faults", "regression": "regressions", "blind": "blind"}

# Runs inside the grader container as the judge: one grade per variant, selected checks only.
DRIVER = r"""
import json, sys
from pathlib import Path
from grading.grade import grade
from grading.layout import GradeOptions
from grading.packet import load_packet_spec

root = Path("/workspace")
spec = json.loads((root / "subset.json").read_text())
packet = load_packet_spec(root / "packet.yaml")
for i, variant in enumerate(spec["variants"]):
    work = root / f"work-{i}"
    (work / "work").mkdir(parents=True)
    opts = GradeOptions(baseline=root / "baseline", packet=packet, diff=root / f"diff-{i}",
                        hidden=root / "hidden", out=work / "out", submission_id=f"subset-{i}",
                        work=work / "work", hidden_tests=None if spec["checks"] is None else tuple(spec["checks"]),
                        public_tests=spec["checks"] is None)
    (work / "out").mkdir()
    report = grade(opts)
    for c in report.contracts:
        if c.outcome == "not_run":
            continue
        print(json.dumps({"variant": variant, "contract": c.id, "outcome": c.outcome,
                          "reason": (c.reason or "")[:600],
                          "evidence": {k: str(v)[:4000] for k, v in (c.evidence or {}).items()}}),
              flush=True)
"""


def variant_diff(task: str, variant: str, baseline: Path, work: Path) -> bytes:
    hidden = REPO / "hidden" / task
    reference = (hidden / "reference" / "solution.patch").read_bytes()
    if variant == "reference":
        return reference
    if variant == "baseline":
        return b""
    kind, _, name = variant.partition(":")
    if kind == "patch" and name:
        return fault_diff(baseline, reference, Path(name).read_bytes(), work)
    if kind not in KINDS or not name:
        raise SystemExit(f"unknown variant {variant!r} (reference, baseline, fault:ID, "
                         "regression:ID, blind:DATE/ID, patch:FILE)")
    patch = hidden / KINDS[kind] / name / "fault.patch"
    if not patch.is_file():
        raise SystemExit(f"{patch} does not exist")
    return fault_diff(baseline, reference, patch.read_bytes(), work)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--check", action="append",
                        help="FILE::TEST under hidden/<task>/checks (repeatable; none: every "
                             "hidden check, as a grade runs them)")
    parser.add_argument("--variant", action="append", required=True)
    parser.add_argument("--log", type=Path, default=Path("/tmp/check_subset.log"))
    a = parser.parse_args()
    hidden = REPO / "hidden" / a.task
    # Node ids as the judge collects them (FILE::TEST); None runs every hidden check.
    checks = list(a.check) if a.check else None
    with tempfile.TemporaryDirectory(prefix="check-subset-") as tmp:
        root = Path(tmp) / "inputs"
        snapshot_baseline(REPO / "task_packets" / a.task / "repo", root / "baseline")
        (root / "packet.yaml").write_bytes(
            (REPO / "task_packets" / a.task / "packet.yaml").read_bytes())
        shutil.copytree(hidden, root / "hidden")
        for i, variant in enumerate(a.variant):
            (root / f"diff-{i}").write_bytes(
                variant_diff(a.task, variant, root / "baseline", Path(tmp) / f"v{i}"))
        (root / "subset.json").write_text(json.dumps({"variants": a.variant, "checks": checks}))
        (root / "driver.py").write_text(DRIVER)
        client = docker.from_env()
        with grader_sandbox(client, image_tag("grader"), labels={"harness.dev": "1"},
                            name_hint="check-subset") as box:
            box.put_archive("/workspace", workspace_archive(root))
            result = box.exec(["python", "/workspace/driver.py"], timeout_s=3600,
                              artifact=a.log, user=JUDGE_USER)
    rows = []
    for line in a.log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            rows.append(json.loads(line))
    for row in rows:
        print(f"{row['variant']:45s} {row['outcome']:8s} {row['contract']}")
        if row["outcome"] != "pass":
            print(f"    {row['reason'][:400]}")
    if result.exit_code != 0:
        raise SystemExit(f"the driver failed (exit {result.exit_code}); log: {a.log}\n"
                         f"{result.output[-2000:]}")


if __name__ == "__main__":
    main()
