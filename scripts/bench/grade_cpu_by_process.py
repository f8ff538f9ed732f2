"""Where a mutant's grade spends its CPU, by process class, alone and side by side.

Runs ``harness oracle-strength --task T --mutant ID ...`` under BSD process accounting
(``accton``): the kernel writes one record for every process that exits, container processes
included, with its user and system CPU time, uid and parent. Every process of a grade exits
within the run (the grader containers go with it), so the records add up to the grade's whole
cost, not a sample. Two runs, one after the other: the mutants one at a time in one grader
container, then side by side in ``--workers`` containers, which is how a real analysis runs
(both cores busy). Reported per graded mutant, by class:

- the public tests: the candidate-uid process tree under the public test command's shell
  (pytest and every interpreter its tests start, fresh);
- the hidden checks' candidate processes: every other candidate-uid process (forked warm from
  a warm server);
- the grader, the judge and the daemons: root's Python processes in the containers;
- the container runtime (runc, containerd-shim, docker-init, the container's init);
- the rest (the harness CLI, git and anything else that exited on the host meanwhile: run it on
  an otherwise quiet machine).

The reference's grade is cached by ``harness oracle-strength`` (per grading code and image), so
run the analysis once before measuring, or the first run includes it.

Needs root and the ``acct`` package (``apt-get install acct``).

Usage: sudo .venv/bin/python scripts/bench/grade_cpu_by_process.py --task hybrid-arch \
           --mutant arith-d19dc712f2 --mutant constant-c77008fcdf [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ("runc", "containerd-shim", "docker-init", "exe", "harness-init")
CLASSES = ("public tests", "hidden checks' candidate processes",
           "grader, judge and daemons", "container runtime", "the rest")


@dataclass(frozen=True)
class Record:
    comm: str
    cpu_s: float
    sys_s: float
    uid: int
    pid: int
    ppid: int


def parse(dump: str) -> list[Record]:
    """``dump-acct`` lines: comm|version|utime|stime|elapsed|uid|gid|mem|io|pid|ppid|..."""
    records = []
    for line in dump.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 11:
            continue
        # Times are in clock ticks (USER_HZ, 100 on Linux).
        user, system = float(f[2]) / 100, float(f[3]) / 100
        records.append(Record(f[0], user + system, system, int(f[5]), int(f[9]), int(f[10])))
    return records


def classify(records: Iterable[Record], candidate_uid: int) -> dict[str, list[Record]]:
    records = list(records)
    by_pid = {r.pid: r for r in records}
    public_roots = {r.pid for r in records if r.uid == candidate_uid and r.comm == "sh"
                    and by_pid.get(r.ppid, r).uid != candidate_uid}

    def in_public(r: Record) -> bool:
        seen = set()
        while r.pid not in seen:
            if r.pid in public_roots:
                return True
            seen.add(r.pid)
            parent = by_pid.get(r.ppid)
            if parent is None or parent.uid != candidate_uid:
                return False
            r = parent
        return False

    out: dict[str, list[Record]] = {c: [] for c in CLASSES}
    for r in records:
        if r.uid == candidate_uid:
            out[CLASSES[0] if in_public(r) else CLASSES[1]].append(r)
        elif r.comm.startswith(RUNTIME):
            out[CLASSES[3]].append(r)
        elif r.uid == 0 and r.comm.startswith(("python", "pt_")):
            out[CLASSES[2]].append(r)
        else:
            out[CLASSES[4]].append(r)
    return out


def measured(task: str, mutants: list[str], workers: int, candidate_uid: int,
             report_dir: Path) -> dict[str, list[Record]]:
    with tempfile.TemporaryDirectory(prefix="grade-cpu-") as tmp:
        pacct = Path(tmp) / "pacct"
        pacct.touch()
        subprocess.run(["accton", str(pacct)], check=True, stdout=subprocess.DEVNULL)
        try:
            argv = [str(ROOT / ".venv/bin/harness"), "oracle-strength", "--task", task,
                    "--workers", str(workers), "--report-dir", str(report_dir)]
            for m in mutants:
                argv += ["--mutant", m]
            subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        finally:
            subprocess.run(["accton", "off"], check=True, stdout=subprocess.DEVNULL)
        dump = subprocess.run(["dump-acct", str(pacct)], check=True, capture_output=True,
                              text=True).stdout
    return classify(parse(dump), candidate_uid)


def table(title: str, classes: dict[str, list[Record]], grades: int) -> str:
    rows = [f"### {title}", "",
            "| class | processes per grade | CPU-s per grade | of which system |",
            "| --- | --- | --- | --- |"]
    total = 0.0
    for name in CLASSES:
        recs = classes[name]
        cpu = sum(r.cpu_s for r in recs) / grades
        total += cpu
        rows.append(f"| {name} | {len(recs) / grades:.1f} | {cpu:.1f} | "
                    f"{sum(r.sys_s for r in recs) / grades:.1f} |")
    rows.append(f"| **all** | | **{total:.1f}** | |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--mutant", action="append", required=True,
                    help="a mutant id (repeat: as many as --workers for the side-by-side run)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--candidate-uid", type=int, default=2000,
                    help="the grader image's GRADING_CANDIDATE_UID")
    args = ap.parse_args()
    if os.geteuid() != 0 or shutil.which("accton") is None or shutil.which("dump-acct") is None:
        print("error: needs root and BSD process accounting; fix: run as root after "
              "`apt-get install acct`", file=sys.stderr)
        return 2
    equivalent = ROOT / "reports" / "oracle-strength" / f"{args.task}.equivalent.yaml"
    with tempfile.TemporaryDirectory(prefix="grade-cpu-report-") as tmp:
        report_dir = Path(tmp)
        if equivalent.is_file():
            shutil.copy(equivalent, report_dir)
        alone = measured(args.task, args.mutant, 1, args.candidate_uid, report_dir)
        paired = measured(args.task, args.mutant, args.workers, args.candidate_uid, report_dir)
    n = len(args.mutant)
    print(f"## CPU of a grade by process class: {args.task}, {', '.join(args.mutant)}\n")
    print(table("One grader container, one mutant at a time", alone, n) + "\n")
    print(table(f"{args.workers} grader containers side by side", paired, n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
