"""Many two-rank launches the way the grader's launcher starts ranks; a rank left alive is dumped.

``grading/launch.py`` starts each rank itself with a static env rendezvous (``MASTER_ADDR``
and a free port), so rank 0 hosts the store, unlike ``torchrun`` whose agent hosts it. A
two-rank run seen in a grade had rank 0 exit 0 while rank 1 stayed alive with one thread on
the CPU. This loop repeats that launch shape as fast as the host allows, ``--slots`` launches
at a time (each slot: a short run with a checkpoint, then its resume with dropout, gloo-ddp-2
and gloo-fsdp-2 in turn), and when one rank is still alive ``--stall-s`` after its peer ended
(or any rank after ``--wall-s``) it records every thread's state, wait channel and kernel
stack and the rank's ``py-spy dump --native`` stacks, then kills the launch and goes on.

Runs inside a treatment or grader image with ``--cap-add SYS_PTRACE`` (py-spy attaches to a
running rank), from a task repo with the reference applied:

    docker run --rm --network none --cap-add SYS_PTRACE -v /tmp/td:/tmp/td harness-grader:local \
        /opt/venv/bin/python /tmp/td/launcher_stress.py --repo /tmp/td/ref --out /tmp/td/out \
        --py-spy /tmp/td/py-spy --slots 3 --iterations 1200

Prints a progress line every 20 launches and writes ``stall-<n>.txt`` (with the launch's
logs in ``stall-<n>-work/``) or ``bad-<n>.txt`` (a launch with a non-zero exit) under --out.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

COMMON = ["--seed", "0", "--global-batch", "8", "--moe-experts", "4", "--moe-top-k", "2",
          "--dropout", "0.1", "--d-model", "32", "--ffn-hidden", "48"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def thread_census(pid: int) -> str:
    lines = []
    try:
        for tid in sorted(os.listdir(f"/proc/{pid}/task")):
            base = f"/proc/{pid}/task/{tid}"
            comm = Path(f"{base}/comm").read_text().strip()
            stat = Path(f"{base}/stat").read_text().rsplit(")", 1)[1].split()
            wchan = Path(f"{base}/wchan").read_text().strip()
            try:
                kernel = Path(f"{base}/stack").read_text().replace("\n", " | ")
            except OSError:
                kernel = "-"
            lines.append(f"  tid {tid} {comm} state {stat[0]} utime {stat[11]} stime "
                         f"{stat[12]} wchan {wchan} kstack {kernel}")
    except OSError as exc:
        lines.append(f"  gone: {exc}")
    return "\n".join(lines)


class Stress:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lock = threading.Lock()
        self.counter = itertools.count()
        self.stats = {"launches": 0, "bad": 0, "stalls": 0}

    def launch(self, n: int, config: str, extra: list[str], work: Path) -> bool:
        a = self.args
        port = free_port()
        procs = []
        for rank in range(2):
            env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                   "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
                   "OMP_NUM_THREADS": "1"}
            log = (work / f"l{n}-r{rank}.log").open("w")
            procs.append(subprocess.Popen(
                [sys.executable, "train.py", "--config", config, *extra], cwd=a.repo, env=env,
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        start = time.monotonic()
        first_exit: float | None = None
        stalled = False
        while True:
            codes = [p.poll() for p in procs]
            now = time.monotonic()
            if all(c is not None for c in codes):
                break
            if first_exit is None and any(c is not None for c in codes):
                first_exit = now
            if (first_exit and now - first_exit > a.stall_s) or now - start > a.wall_s:
                stalled = True
                report = [f"launch {n} {config} {' '.join(extra)} codes {codes} after "
                          f"{now - start:.1f} s"]
                for rank, proc in enumerate(procs):
                    if proc.poll() is None:
                        report.append(f"rank {rank} pid {proc.pid}:\n{thread_census(proc.pid)}")
                        dump = subprocess.run([a.py_spy, "dump", "--native", "--pid",
                                               str(proc.pid)], capture_output=True, text=True,
                                              timeout=60)
                        report.append(dump.stdout[-20000:] + dump.stderr[-2000:])
                        time.sleep(2)
                        report.append(f"2 s later:\n{thread_census(proc.pid)}")
                (a.out / f"stall-{n}.txt").write_text("\n".join(report))
                for proc in procs:
                    if proc.poll() is None:
                        proc.kill()
                for proc in procs:
                    proc.wait()
                shutil.copytree(work, a.out / f"stall-{n}-work", dirs_exist_ok=True)
                break
            time.sleep(0.2)
        codes = [p.returncode for p in procs]
        with self.lock:
            self.stats["launches"] += 1
            if stalled:
                self.stats["stalls"] += 1
            elif any(c != 0 for c in codes):
                self.stats["bad"] += 1
                shutil.copytree(work, a.out / f"bad-{n}-work", dirs_exist_ok=True)
                (a.out / f"bad-{n}.txt").write_text(f"{config} {extra} codes {codes}")
            if self.stats["launches"] % 20 == 0:
                print(time.strftime("%H:%M:%S"), self.stats, flush=True)
        return not stalled and all(c == 0 for c in codes)

    def slot(self, k: int) -> None:
        while (i := next(self.counter)) < self.args.iterations:
            config = "gloo-ddp-2" if i % 2 == 0 else "gloo-fsdp-2"
            work = Path(f"/tmp/stress-w{k}")
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            common = [*COMMON, "--out", str(work / "out"), "--ckpt", str(work / "ckpt")]
            if self.launch(2 * i, config, ["--steps", "4", "--save-every", "2", *common], work):
                self.launch(2 * i + 1, config, ["--steps", "4", "--resume",
                                                str(work / "ckpt" / "step_2"), *common], work)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", type=Path, required=True, help="task repo, reference applied")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--py-spy", required=True)
    parser.add_argument("--slots", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=500, help="two launches each")
    parser.add_argument("--stall-s", type=float, default=25.0)
    parser.add_argument("--wall-s", type=float, default=150.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stress = Stress(args)
    threads = [threading.Thread(target=stress.slot, args=(k,)) for k in range(args.slots)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("done", stress.stats, flush=True)


if __name__ == "__main__":
    main()
