"""Judge side of a probe: call one function of the candidate's code in a sealed process.

A hidden check never imports candidate code. When it needs the candidate's API (build the
model, run a forward, parse a flag), it calls a function of the task's *probe* modules
(``hidden/<task>/probes/``, copied where the candidate uid can read them) with plain inputs::

    out = probe.call("warmup_probe", "lr_history", steps=12, warmup=5)

The function runs in a fresh process as the candidate uid (``grading.probe_runner``), on the
candidate tree, with its own job folder; its result comes back as data (JSON, or tensors
through ``torch.load(weights_only=True)``) and the check decides. A probe holds no expected
value: references stay on the judge's side.

What can come back:
- the function's result;
- :class:`CandidateRaised` when the candidate's code raised (the check fails, as it would have
  if the exception had reached it);
- :class:`CandidateRunFailed` when the process crashed, hung or left no result; the judge's
  pytest plugin (``grading.judge_plugin``) turns that into a ``crash``/``hang`` contract.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from grading import sealed
from grading.run import run_command, signal_name

PROBES_VAR = "GRADING_PROBES"
WORKDIR_VAR = "GRADING_WORKDIR"
INPUTS, OUTPUTS = "inputs.bin", "outputs.bin"
# A probe's result is a few tensors or numbers; anything near this is a bug or an attack.
MAX_RESULT_BYTES = 256 * 1024 * 1024
_JSON_MAGIC = b"JSON\n"
LOG_TAIL_CHARS = 2500


class CandidateRaised(Exception):
    """The candidate's code raised inside a probe; the message names the exception."""

    def __init__(self, error: str, traceback_text: str) -> None:
        super().__init__(f"the candidate's code raised {error}\n{traceback_text}")
        self.error = error


class CandidateRunFailed(Exception):
    """The candidate process crashed, hung, or left no result."""

    def __init__(self, outcome: str, detail: str) -> None:
        super().__init__(f"candidate process {outcome}: {detail}")
        self.outcome = outcome  # "crash" or "hang"
        self.detail = detail


# ---------------------------------------------------------------------------------------------
# Payloads: JSON when the value is plain, else torch.save (loaded with weights_only=True).


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False  # tuples, tensors, non-finite floats: torch keeps them as they are


def dump(value: Any, path: Path) -> None:
    if _plain(value):
        path.write_bytes(_JSON_MAGIC + json.dumps(value).encode())
        return
    import torch

    torch.save(value, path)


def load(path: Path, max_bytes: int = MAX_RESULT_BYTES) -> Any:
    """Read a payload as data: never a pickle that can run code."""
    size = os.lstat(path).st_size
    if size > max_bytes:
        raise CandidateRunFailed("crash", f"result of {size} bytes is over the {max_bytes} cap")
    with open(path, "rb") as fh:
        head = fh.read(len(_JSON_MAGIC))
        if head == _JSON_MAGIC:
            return json.loads(fh.read())
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


# ---------------------------------------------------------------------------------------------


def _tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text if len(text) <= LOG_TAIL_CHARS else "[...]\n" + text[-LOG_TAIL_CHARS:]


def probes_dir() -> Path:
    value = os.environ.get(PROBES_VAR)
    if not value:
        raise sealed.SealError(f"{PROBES_VAR} is not set (the grader sets it for its checks)")
    return Path(value)


def call(module: str, function: str, /, *, root: Path | None = None, timeout_s: float = 120.0,
         **inputs: Any) -> Any:
    """``module.function(**inputs)`` in a sealed candidate process on ``root`` (default: the
    graded tree); its result as data."""
    root = root or Path(os.environ[WORKDIR_VAR])
    job = sealed.job_dir(f"probe-{function}")
    dump(inputs, job / INPUTS)
    os.chmod(job / INPUTS, 0o644)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(probes_dir())])
    env["PYTHONNOUSERSITE"] = "1"
    logs = Path(tempfile.mkdtemp(prefix=f"probe-{function}-"))
    log = logs / "probe.log"
    res = run_command(
        [sys.executable, "-m", "grading.probe_runner", module, function, str(job / INPUTS),
         str(job / OUTPUTS)],
        cwd=root, env=env, timeout_s=timeout_s, log_path=log,
    )
    sealed.seal(job)
    out = job / OUTPUTS
    where = f"probe {module}.{function}"
    if res.timed_out:
        raise CandidateRunFailed("hang", f"{where} still running after {timeout_s:g} s\n"
                                 f"{_tail(log)}")
    if res.signal is not None or res.exit_code != 0:
        how = (f"killed by {signal_name(res.signal)}" if res.signal is not None
               else f"exit code {res.exit_code}")
        raise CandidateRunFailed("crash", f"{where} died ({how})\n{_tail(log)}")
    if not out.is_file():
        raise CandidateRunFailed("crash", f"{where} exited 0 but left no result\n{_tail(log)}")
    try:
        payload = load(out)
    except CandidateRunFailed:
        raise
    except Exception as exc:
        raise CandidateRunFailed("crash", f"{where} left an unreadable result: "
                                 f"{type(exc).__name__}: {exc}") from None
    if not isinstance(payload, dict) or "ok" not in payload:
        raise CandidateRunFailed("crash", f"{where} left a result of the wrong shape")
    if payload["ok"] is not True:
        raise CandidateRaised(str(payload.get("error"))[:2000],
                              str(payload.get("traceback", ""))[-4000:])
    return payload.get("result")
