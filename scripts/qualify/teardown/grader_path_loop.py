"""The grader's own public-tests path, many times: where a two-rank run that does not end waits.

Both sightings of the packets' teardown hang were inside a grade: the packet test's two-rank
``torchrun`` printed its result and did not exit before the test's timeout. The other loops
(teardown_loop.py, public_path_loop.py) run the two-rank command alone; this one runs what a
grade runs, through the grader's own code: ``grading.grade.grade`` on the submission with the
hidden checks left out, so the public test command runs exactly as in a grade (the judge's
allow-listed environment, a job folder and HOME of its own, stdin from /dev/null, pytest as
the parent of every launcher, the reaper and the end-of-job cleanup, the confirming rerun).

A watcher thread looks at the container's processes every 2 s. A ``torch.distributed.run``
process alive for more than ``STALL_S`` seconds is a stalled launcher: the watcher writes, once,
the process tree under it, every thread's state and wait channel, and the Python and native
stacks of the launcher and each rank (``py-spy dump --native``, root with CAP_SYS_PTRACE; the
processes are the candidate's and never see the capability), then leaves them alone: the
packet test's own timeout and the grade's cleanup end them as in a real grade.

One line per grade, then the stall evidence indented under it::

    run <i> outcome=<public-tests outcome> wall=<s> stalled=<0|1> rerun=<0|1>

    python grader_path_loop.py N STALL_S INPUTS   (INPUTS: baseline/ packet.yaml diff hidden/)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from grading.grade import grade
from grading.layout import GradeOptions
from grading.packet import load_packet_spec

HERE = Path(__file__).resolve().parent
PY_SPY = HERE / "py-spy"
TICKS = os.sysconf("SC_CLK_TCK")


def _read(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def _uptime() -> float:
    return float(_read("/proc/uptime").split()[0])


def _processes() -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, age in seconds, command line)."""
    now = _uptime()
    found: dict[int, tuple[int, float, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _read(f"/proc/{entry}/stat")
        if not stat:
            continue
        # Fields after the command name, which may hold spaces and parentheses.
        fields = stat.rsplit(")", 1)[-1].split()
        cmd = _read(f"/proc/{entry}/cmdline").replace("\0", " ").strip()
        found[int(entry)] = (int(fields[1]), now - int(fields[19]) / TICKS, cmd)
    return found


def _tree(root: int, procs: dict[int, tuple[int, float, str]]) -> list[int]:
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += [p for p, (ppid, _, _) in procs.items() if ppid == pid]
    return out


def _threads(pid: int) -> list[str]:
    lines = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return [f"{pid}: gone"]
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        comm = _read(f"{base}/comm").strip()
        state = _read(f"{base}/stat").rsplit(")", 1)[-1].split()[:1]
        lines.append(f"  tid {tid} {comm} state={''.join(state)} wchan={_read(f'{base}/wchan')}")
    return lines


def _evidence(launcher: int) -> list[str]:
    procs = _processes()
    lines = []
    for pid in _tree(launcher, procs):
        ppid, age, cmd = procs.get(pid, (0, 0.0, "?"))
        lines.append(f"process {pid} ppid={ppid} age={age:.0f}s {cmd[:200]}")
        lines += _threads(pid)
        if PY_SPY.is_file():
            dump = subprocess.run([str(PY_SPY), "dump", "--native", "--pid", str(pid)],
                                  capture_output=True, text=True, timeout=60, check=False)
            lines += ["  " + ln for ln in (dump.stdout + dump.stderr).splitlines()]
    return lines


class Watcher(threading.Thread):
    def __init__(self, stall_s: float) -> None:
        super().__init__(daemon=True)
        self.stall_s = stall_s
        self.seen: set[int] = set()
        self.pending: list[str] = []
        self.lock = threading.Lock()

    def run(self) -> None:
        while True:
            for pid, (_, age, cmd) in _processes().items():
                if "torch.distributed.run" in cmd and age > self.stall_s and pid not in self.seen:
                    self.seen.add(pid)
                    lines = [f"stalled launcher {pid} after {age:.0f} s", *_evidence(pid)]
                    with self.lock:
                        self.pending += lines
            time.sleep(2)

    def take(self) -> list[str]:
        with self.lock:
            lines, self.pending = self.pending, []
        return lines


def main() -> None:
    runs, stall_s, inputs = int(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3])
    packet = load_packet_spec(inputs / "packet.yaml")
    watcher = Watcher(stall_s)
    watcher.start()
    for i in range(runs):
        work = Path(f"/tmp/grader-path/{i}")
        out = work / "out"
        out.mkdir(parents=True)
        opts = GradeOptions(baseline=inputs / "baseline", packet=packet, diff=inputs / "diff",
                            hidden=inputs / "hidden", out=out, submission_id=f"loop-{i}",
                            work=work / "work")
        (work / "work").mkdir()
        started = time.monotonic()
        report = grade(opts)
        public = report.contracts[0]
        wall = time.monotonic() - started
        rerun = int("rerun" in public.evidence)
        lines = watcher.take()
        print(f"run {i} outcome={public.outcome} wall={wall:.1f} stalled={int(bool(lines))} "
              f"rerun={rerun}", flush=True)
        if lines or public.outcome != "pass":
            for name in ("public-tests.log", "public-tests.rerun.log"):
                log = out / "logs" / name
                if log.is_file():
                    lines += [f"{name} (last 60 lines):",
                              *log.read_text(errors="replace").splitlines()[-60:]]
            print("\n".join("    " + line for line in lines), flush=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
