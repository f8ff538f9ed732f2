"""The public tests' two-rank path, many times: where a run that does not end waits.

The packets' tests launch a two-rank run as ``subprocess.run(torchrun ..., capture_output=True,
timeout=180)``: the test waits for the launcher to exit *and* for end of file on both pipes,
which every process that inherited them holds. run_loop.sh redirects to a file and waits for
the launcher only, so a process that outlives the launcher with the pipes open would hang a
test and never a loop run. This loop runs the test's exact command shape with pipes, one run
at a time (the caller adds load beside it), and for a run still not done after ``--stall-s``:

- the process tree under the launcher and any process still holding the run's pipes,
- every Python process of the run writes all its threads' stacks to stderr (sitecustomize.py
  registers SIGUSR1 for faulthandler in every process of the run, the launcher included),

then kills the run's processes and goes on. One line per run::

    run <i> rc=<exit code> wall=<s> stalled=<0|1>

followed, for a stalled or failed run, by its indented evidence. Runs inside the grader image
as the candidate uid, from the root of a task's repo:

    python .teardown/public_path_loop.py N STALL_S -- train.py --config gloo-ddp-2 ...
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MARK = "TEARDOWN_PUBLIC_PATH_RUN"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_processes(run_id: str) -> list[int]:
    """PIDs whose environment carries this run's mark (every process the run started)."""
    found = []
    needle = f"{MARK}={run_id}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(int(entry))
    return sorted(found)


def describe(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        fields = {k: v.strip() for k, _, v in (line.partition(":") for line in status)}
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
    except OSError:
        return f"{pid}: gone"
    return (f"{pid} ppid={fields.get('PPid')} state={fields.get('State')} "
            f"threads={fields.get('Threads')} wchan={wchan} {cmd}")


def one_run(index: int, stall_s: float, limit_s: float, train_args: list[str]) -> None:
    run_id = f"{os.getpid()}-{index}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node",
           "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           *[a.replace("{run}", f"/tmp/public-path-{index}") for a in train_args]]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", MARK: run_id,
           "PYTHONPATH": str(HERE)}
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stalled = False
    evidence: list[str] = []
    try:
        out, err = proc.communicate(timeout=stall_s)
    except subprocess.TimeoutExpired:
        stalled = True
        pids = run_processes(run_id)
        evidence.append(f"launcher exit code so far: {proc.poll()}")
        evidence += [describe(p) for p in pids]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGUSR1)
            except OSError:
                pass
        time.sleep(3)
        for pid in run_processes(run_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            out, err = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    wall = time.monotonic() - started
    print(f"run {index} rc={proc.returncode} wall={wall:.1f} stalled={int(stalled)}", flush=True)
    if stalled or proc.returncode != 0:
        text = err.decode(errors="replace").splitlines()
        tail = out.decode(errors="replace").strip()[-300:]
        lines = [*evidence, f"stdout: {tail}", *text[-400:]]
        print("\n".join("    " + line for line in lines), flush=True)
    subprocess.run(["rm", "-rf", f"/tmp/public-path-{index}"], check=False)


def main() -> None:
    n, stall_s = int(sys.argv[1]), float(sys.argv[2])
    train_args = sys.argv[sys.argv.index("--") + 1:]
    for i in range(n):
        one_run(i, stall_s, 30.0, train_args)


if __name__ == "__main__":
    main()
