"""Run one declared configuration of a task's code, plain or under TrainCheck, contained.

Containment (each point answers a failure seen when measuring TrainCheck 0.2.0):
- the code runs from a scratch copy made here, never from the tree whose diff is graded:
  TrainCheck writes ``_traincheck_<script>.py`` next to the traced script;
- every run gets a fresh output folder; reusing one silently mixes traces of two runs;
- the environment is rebuilt from a short allow-list, so ``env_dump.txt`` holds no secret;
- thread counts are pinned and a hard wall limit kills the whole process group;
- a crash, a hang or a rank without a trace is the run's outcome, never "0 violations".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from diagnostics.entry import ENTRY_NAME, render_entry
from diagnostics.traces import rank_traces

WORLD_SIZE = {"cpu-1": 1, "gloo-ddp-2": 2, "gloo-fsdp-2": 2, "cuda-ddp-2": 2, "cuda-fsdp-2": 2}
MAIN_SCRIPT = "train.py"
MASTER_PORT = 29541  # distinct from the candidate runs' 29521, so both may run at once
OUTPUT_TAIL_CHARS = 4000

# The only variables a traced program sees; TrainCheck dumps its whole environment to disk.
_PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "TZ")
_PINNED = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}

_IGNORED = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "_traincheck_*")


def scrubbed_env(home: Path) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASSED_THROUGH if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(_PINNED)
    env["HOME"] = str(home)
    return env


def kill_marked(marker: str) -> int:
    """SIGKILL every process whose environment carries ``DIAGNOSTICS_RUN=marker``.

    torchrun starts its ranks in sessions of their own, so killing the launcher's process
    group misses them; the inherited environment marker finds them (re-parented or not).
    """
    needle = f"DIAGNOSTICS_RUN={marker}".encode()
    killed = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            continue
    return killed


def _launch_line(config: str, script: Path, args: list[str]) -> list[str]:
    if WORLD_SIZE[config] == 1:
        return ["python", str(script), *args]
    return ["torchrun", "--nnodes", "1", "--nproc-per-node", str(WORLD_SIZE[config]),
            "--master-addr", "127.0.0.1", "--master-port", str(MASTER_PORT),
            str(script), *args]


def _shell_quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def _tail(text: str) -> str:
    return text[-OUTPUT_TAIL_CHARS:]


_FAILED_RANK = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank.*?\n.*?exitcode\s*:\s*(-?\d+)",
                          re.S)


def failure_cause(return_code: int, output: str) -> str:
    """One line naming how the program died: torchrun's failing rank, or the signal."""
    # torchrun lists "Other Failures" (peers it terminated) before the "Root Cause" section.
    root = output.rfind("Root Cause")
    match = _FAILED_RANK.search(output, root if root >= 0 else 0)
    if match:
        rank, code = int(match.group(1)), int(match.group(2))
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return f"rank {rank} failed first ({how})"
    if return_code < 0 or return_code > 128:
        signum = -return_code if return_code < 0 else return_code - 128
        try:
            return f"killed by {signal.Signals(signum).name}"
        except ValueError:
            return f"exit code {return_code}"
    last = [line for line in output.strip().splitlines() if line.strip()]
    return f"exit code {return_code}: {last[-1][:300] if last else 'no output'}"


def run(src: Path, out: Path, config: str, train_args: list[str], *, traced: bool,
        wall_s: float, invariants: Path | None = None, observe_state: bool = False,
        first_step: int = 0) -> dict[str, Any]:
    """Run ``train.py`` of ``src`` under ``config``; returns (and writes) ``out/run.json``.

    ``invariants`` (a traced run only) is TrainCheck's selective collection: every torch
    function is still wrapped, but only those the invariants name dump records (an empty
    file: none; the sampled parameters and observed state are recorded regardless).
    ``observe_state`` adds the training state beyond parameters to a traced run's trace
    (``observe.py``); ``first_step`` is the step number of a resumed run's first step."""
    if (observe_state or first_step or invariants is not None) and not traced:
        raise ValueError("selective collection, state observation and step numbering apply "
                         "to traced runs only")
    if config not in WORLD_SIZE:
        raise ValueError(f"unknown configuration {config!r}; use one of {sorted(WORLD_SIZE)}")
    if out.exists():
        raise FileExistsError(f"output folder {out} exists; every run needs a fresh one")
    out.mkdir(parents=True)
    scratch = out / "src"
    shutil.copytree(src, scratch, ignore=_IGNORED, symlinks=True)
    home = out / "home"
    home.mkdir()
    train_out = out / "train"
    args = ["--config", config, *train_args, "--out", str(train_out)]
    trace_dir = out / "trace"

    if traced:
        entry = scratch / ENTRY_NAME
        entry.write_text(render_entry(str(scratch), str(scratch / MAIN_SCRIPT)))
        command = ["traincheck-collect", "-p", str(entry), "--output-dir", str(trace_dir)]
        # `-p` alone passes no program arguments, so even one process goes through a script.
        launcher = out / "launch.sh"
        launcher.write_text(
            " ".join(_shell_quote(w) for w in _launch_line(config, entry, args)) + "\n")
        command += ["-s", str(launcher)]
        if invariants is not None:
            # Selective collection: only the functions the invariants name dump records.
            # Its own default samples every 10th step after 10; the learning runs trace
            # every step, and so must the runs checked against what they learned.
            command += ["--invariants", str(invariants), "--sampling-interval", "1",
                        "--warm-up-steps", "1"]
    else:
        command = _launch_line(config, scratch / MAIN_SCRIPT, args)

    log_path = out / "output.log"
    marker = uuid.uuid4().hex
    env = {**scrubbed_env(home), "DIAGNOSTICS_RUN": marker}
    if traced:  # read and removed by the entry script before the task's code runs
        env.update(DIAG_FIRST_STEP=str(first_step),
                   DIAG_OBSERVE_STATE="1" if observe_state else "0")
    started = time.monotonic()
    hung = False
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, cwd=scratch, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return_code = proc.wait(timeout=wall_s)
        except subprocess.TimeoutExpired:
            hung = True
            kill_marked(marker)
            return_code = proc.wait()
        finally:
            # Anything the run left behind (a stray rank, a background child) goes too.
            left_behind = kill_marked(marker)
    wall = time.monotonic() - started
    output = log_path.read_text(errors="replace")

    record: dict[str, Any] = {
        "config": config, "traced": traced, "world_size": WORLD_SIZE[config],
        "command": command, "train_args": args, "return_code": return_code,
        "wall_s": round(wall, 3), "out": str(out), "train_out": str(train_out),
        "trace_dir": str(trace_dir) if traced else None,
        "selective": invariants is not None, "observe_state": observe_state,
        "first_step": first_step, "output_tail": _tail(output),
        "killed_left_behind": left_behind,
    }
    if hung:
        record.update(outcome="hang",
                      cause=f"no exit within the wall limit of {wall_s:g} s; process group "
                      "killed")
    elif return_code != 0:
        record.update(outcome="crash", cause=failure_cause(return_code, output))
    else:
        record.update(outcome="ok", cause="")
    if traced:
        ranks = rank_traces(trace_dir) if trace_dir.exists() else {}
        record["ranks"] = {str(r): v for r, v in sorted(ranks.items())}
        # A full collection records torch calls on every rank that ran; a selective one may
        # record none (its selection can name no call), but every rank that trained has the
        # parameters the entry samples after each step.
        kind = "var_files" if invariants is not None else "api_files"
        missing = [r for r in range(WORLD_SIZE[config]) if r not in ranks
                   or not ranks[r][kind]]
        if record["outcome"] == "ok" and missing:
            record.update(outcome="missing_rank_trace",
                          cause=f"no trace records for rank(s) {missing}")
    summary = train_out / "summary.json"
    record["summary"] = json.loads(summary.read_text()) if summary.exists() else None
    (out / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    return record
