"""Transparency: does tracing change what a healthy run computes? (issue 6, point 5)

For one configuration of one tree, in this container, with the same training arguments:

=====================  ========================================================================
run                    what
=====================  ========================================================================
``plain``              the reference run: plain, checkpoints every ``save_every`` steps
``traced``             the same run under TrainCheck (``collect.run(traced=True)``)
``plain_repeat``       control: a second plain run (is a plain run repeatable at all?)
``plain_from_plain``   control: plain resume from ``plain``'s mid checkpoint (is resume exact?)
``plain_from_traced``  plain resume from ``traced``'s mid checkpoint
``traced_from_plain``  traced resume from ``plain``'s mid checkpoint
``plain_other_seed``   sensitivity control: plain, seed + 1 (the comparison can see a change)
=====================  ========================================================================

Every other run is compared with ``plain`` on: exceptions (outcome and exception lines of the
output), per-step metrics, ``summary.json`` (timings and ``resumed_from`` left out),
``final_state.pt`` model and optimizer tensors, the DCP checkpoints' whole contents (loaded
offline) and the per-rank RNG states they hold. Each comparison is one row, ``identical``,
``differs`` (with numbers) or ``failed`` (with the cause); deviations are reported as found,
never folded into a pass. torch is imported only here, lazily: the rest of the runner is
stdlib only.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from diagnostics.collect import run as collect_run
from diagnostics.train_args import checkpoints, option_value, with_option

MAX_LISTED = 12
TAIL_CHARS = 2000
# summary.json fields that are timings or say how the run started, not what it computed.
VOLATILE_SUMMARY_KEYS = ("wall_s", "train_s", "resumed_from")

# label -> (traced, resumed from the mid checkpoint of, seed offset)
RUNS: dict[str, tuple[bool, str | None, int]] = {
    "plain": (False, None, 0),
    "traced": (True, None, 0),
    "plain_repeat": (False, None, 0),
    "plain_from_plain": (False, "plain", 0),
    "plain_from_traced": (False, "traced", 0),
    "traced_from_plain": (True, "plain", 0),
    "plain_other_seed": (False, None, 1),
}

FULL_ASPECTS = ("exceptions", "metrics", "summary", "final_model", "final_optimizer",
                "checkpoint_mid", "checkpoint_final", "rng")
RESUME_ASPECTS = ("exceptions", "metrics", "summary", "final_model", "final_optimizer",
                  "checkpoint_final", "rng")
SENSITIVITY_ASPECTS = ("metrics", "final_model", "final_optimizer", "checkpoint_final", "rng")

# (run compared with ``plain``, what the pair asks, aspects, expected status)
PAIRS: list[tuple[str, str, tuple[str, ...], str]] = [
    ("traced", "does tracing change a run?", FULL_ASPECTS, "identical"),
    ("plain_repeat", "control: is a plain run repeatable?", FULL_ASPECTS, "identical"),
    ("plain_from_traced", "does a checkpoint written under tracing resume a plain run?",
     RESUME_ASPECTS, "identical"),
    ("traced_from_plain", "does a plain run's checkpoint resume a traced run?",
     RESUME_ASPECTS, "identical"),
    ("plain_from_plain", "control: is a plain resume exact?", RESUME_ASPECTS, "identical"),
    ("plain_other_seed", "sensitivity control: seed + 1 must differ", SENSITIVITY_ASPECTS,
     "differs"),
]

_EXCEPTION_LINE = re.compile(
    r"^(?:\[(?:rank|default)\d*\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Failure|Interrupt))"
    r"(?::|$)", re.M)


def exception_lines(output: str) -> list[str]:
    """The distinct exception names an output mentions, in order of first appearance."""
    seen: dict[str, None] = {}
    for match in _EXCEPTION_LINE.finditer(output):
        seen.setdefault(match.group(1), None)
    return list(seen)


# --- flattening and comparing values -------------------------------------------------------


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts / lists / tuples -> ``{"a/b[0]": leaf}``."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}/{key}" if prefix else str(key)))
        return out if out or not prefix else {prefix: obj}
    if isinstance(obj, (list, tuple)):
        out = {}
        for i, value in enumerate(obj):
            out.update(flatten(value, f"{prefix}[{i}]"))
        return out if out or not prefix else {prefix: obj}
    return {prefix: obj}


def _compare_tensors(a: Any, b: Any) -> tuple[bool, float | None, str]:
    import torch

    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False, None, f"{a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    if a.numel() == 0:
        return True, 0.0, ""
    same = torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    if same:
        return True, 0.0, ""
    if a.is_floating_point() or a.is_complex():
        a64, b64 = a.to(torch.complex128 if a.is_complex() else torch.float64), \
            b.to(torch.complex128 if b.is_complex() else torch.float64)
        diff = (a64 - b64).abs()
        both_nan = torch.isnan(a64) & torch.isnan(b64) if not a.is_complex() else None
        if both_nan is not None:
            diff = torch.where(both_nan, torch.zeros_like(diff), diff)
        diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
        n = int((a64 != b64).sum())
        return False, float(diff.max()), f"{n}/{a.numel()} elements differ"
    if a.dtype == torch.bool:
        n = int((a != b).sum())
        return False, float(n > 0), f"{n}/{a.numel()} elements differ"
    diff = (a.to(torch.float64) - b.to(torch.float64)).abs()
    n = int((a != b).sum())
    return False, float(diff.max()), f"{n}/{a.numel()} elements differ"


def _compare_leaves(a: Any, b: Any) -> tuple[bool, float | None, str]:
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return _compare_tensors(a, b)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False, None, f"{type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, float) and isinstance(b, float):
        if struct.pack("<d", a) == struct.pack("<d", b):
            return True, 0.0, ""
        if math.isnan(a) and math.isnan(b):
            return True, 0.0, ""
        if math.isnan(a) or math.isnan(b):
            return False, math.inf, f"{a!r} vs {b!r}"
        return False, abs(a - b), f"{a!r} vs {b!r}"
    if type(a) is not type(b):
        return False, None, f"{type(a).__name__} {a!r:.60} vs {type(b).__name__} {b!r:.60}"
    if isinstance(a, (int, bool)):
        return (a == b), (0.0 if a == b else float(abs(int(a) - int(b)))), \
            ("" if a == b else f"{a!r} vs {b!r}")
    try:
        same = bool(a == b)
    except Exception:  # an object without a usable ==: compare its text
        same = repr(a) == repr(b)
    return same, None, "" if same else f"{a!r:.60} vs {b!r:.60}"


def compare_values(a: Any, b: Any) -> dict[str, Any]:
    """Leaf-by-leaf comparison of two nested values (``a`` = the run, ``b`` = ``plain``)."""
    flat_a, flat_b = flatten(a), flatten(b)
    common = [k for k in flat_b if k in flat_a]
    differing: list[dict[str, Any]] = []
    max_abs = 0.0
    for key in common:
        same, diff, note = _compare_leaves(flat_a[key], flat_b[key])
        if diff is not None and diff > max_abs:
            max_abs = diff
        if not same:
            differing.append({"key": key, "max_abs_diff": diff, "note": note})
    only_a = [k for k in flat_a if k not in flat_b]
    only_b = [k for k in flat_b if k not in flat_a]
    status = "identical" if not differing and not only_a and not only_b else "differs"
    return {
        "status": status, "n_compared": len(common), "n_differing": len(differing),
        "max_abs_diff": max_abs,
        "differing": sorted(differing, key=lambda d: -(d["max_abs_diff"] or 0))[:MAX_LISTED],
        "only_in_a": only_a[:MAX_LISTED], "only_in_b": only_b[:MAX_LISTED],
        "detail": (f"{len(only_a)} key(s) only in this run, {len(only_b)} only in plain"
                   if only_a or only_b else ""),
    }


# --- loading what a run left ----------------------------------------------------------------


class _Missing(Exception):
    """A file a comparison needs is not there; the row becomes ``failed``."""


class RunFiles:
    """What one run wrote, loaded lazily and once."""

    def __init__(self, label: str, record: dict[str, Any], scratch: Path) -> None:
        self.label = label
        self.record = record
        self.train = Path(record["train_out"]) if record.get("train_out") else None
        self.ckpt = Path(record["ckpt"]) if record.get("ckpt") else None
        self._scratch = scratch
        self._cache: dict[str, Any] = {}

    def _why_missing(self, what: str) -> _Missing:
        how = self.record.get("outcome", "not_run")
        cause = self.record.get("cause", "")
        return _Missing(f"{self.label}: {what} missing (run {how}"
                        f"{': ' + cause if cause else ''})")

    def metrics(self) -> dict[str, Any]:
        path = self.train / "metrics.jsonl" if self.train else None
        if path is None or not path.is_file():
            raise self._why_missing("metrics.jsonl")
        by_step: dict[str, Any] = {}
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                step = row.pop("step", None)
                by_step[f"step {step}"] = row
        return by_step

    def summary(self) -> dict[str, Any]:
        path = self.train / "summary.json" if self.train else None
        if path is None or not path.is_file():
            raise self._why_missing("summary.json")
        data = json.loads(path.read_text())
        return {k: v for k, v in data.items() if k not in VOLATILE_SUMMARY_KEYS}

    def final_state(self) -> dict[str, Any]:
        if "final" not in self._cache:
            import torch

            path = self.train / "final_state.pt" if self.train else None
            if path is None or not path.is_file():
                raise self._why_missing("final_state.pt")
            self._cache["final"] = torch.load(path, map_location="cpu", weights_only=False)
        return self._cache["final"]

    def checkpoint(self, step: int) -> dict[str, Any]:
        key = f"ckpt{step}"
        if key not in self._cache:
            import torch
            from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

            found = checkpoints(self.ckpt) if self.ckpt else {}
            if step not in found:
                raise self._why_missing(f"checkpoint of step {step}")
            with tempfile.TemporaryDirectory(dir=self._scratch) as tmp:
                target = Path(tmp) / "ckpt.pt"
                dcp_to_torch_save(str(found[step]), str(target))
                self._cache[key] = torch.load(target, map_location="cpu", weights_only=False)
        return self._cache[key]


def _rng_entries(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if "rng" in str(k)}


def _section(state: dict[str, Any], name: str, label: str) -> Any:
    if name not in state:
        raise _Missing(f"{label}: final_state.pt has no {name!r} entry")
    return state[name]


def compare_aspect(aspect: str, run: RunFiles, plain: RunFiles, *, mid: int, final: int,
                   resumed: bool) -> dict[str, Any]:
    """One row: ``run`` against ``plain`` on one aspect."""
    if aspect == "exceptions":
        a, b = run.record, plain.record
        for side in (run, plain):
            if side.record.get("outcome") == "not_run":
                raise _Missing(f"{side.label}: not run ({side.record.get('cause', '')})")
        same = (a.get("outcome") == b.get("outcome")
                and a.get("exceptions") == b.get("exceptions"))
        detail = (f"{run.label}: {a.get('outcome')} {a.get('exceptions') or 'no exception'}; "
                  f"plain: {b.get('outcome')} {b.get('exceptions') or 'no exception'}")
        return {"status": "identical" if same else "differs", "n_compared": 2,
                "n_differing": 0 if same else 1, "max_abs_diff": None, "differing": [],
                "only_in_a": [], "only_in_b": [], "detail": detail}
    if aspect == "metrics":
        ours, theirs = run.metrics(), plain.metrics()
        if resumed:
            # A resumed run's metrics start at the resume step; plain's earlier steps are not
            # in its file by design.
            theirs = {k: v for k, v in theirs.items() if int(k.split()[1]) >= mid}
        return compare_values(ours, theirs)
    if aspect == "summary":
        return compare_values(run.summary(), plain.summary())
    if aspect == "final_model":
        return compare_values(_section(run.final_state(), "model", run.label),
                              _section(plain.final_state(), "model", "plain"))
    if aspect == "final_optimizer":
        return compare_values(_section(run.final_state(), "optim", run.label),
                              _section(plain.final_state(), "optim", "plain"))
    if aspect == "checkpoint_mid":
        return compare_values(run.checkpoint(mid), plain.checkpoint(mid))
    if aspect == "checkpoint_final":
        return compare_values(run.checkpoint(final), plain.checkpoint(final))
    if aspect == "rng":
        ours, theirs = _rng_entries(run.checkpoint(final)), _rng_entries(plain.checkpoint(final))
        if not theirs:
            raise _Missing(f"plain: the step-{final} checkpoint holds no RNG entry")
        return compare_values(ours, theirs)
    raise ValueError(f"unknown aspect {aspect!r}")


# --- the whole check ------------------------------------------------------------------------


def _run_record(record: dict[str, Any], out: Path, ckpt: Path, *, seed: int,
                resume_from: str | None, resume_step: int | None) -> dict[str, Any]:
    log = out / "output.log"
    output = log.read_text(errors="replace") if log.exists() else ""
    found = checkpoints(ckpt)
    result = {
        "traced": record["traced"], "seed": seed, "resume_from": resume_from,
        "resume_step": resume_step, "outcome": record["outcome"], "cause": record["cause"],
        "wall_s": record["wall_s"], "exceptions": exception_lines(output),
        "warnings": sum(1 for line in output.splitlines() if "Warning" in line),
        "checkpoints": [p.name for p in found.values()], "train_out": record["train_out"],
        "ckpt": str(ckpt), "train_args": record["train_args"],
        # Evidence that a traced run was traced: TrainCheck's records per rank.
        "trace_records": {rank: {"api": v.get("api_records", 0), "var": v.get("var_records", 0)}
                          for rank, v in (record.get("ranks") or {}).items()},
    }
    if record["outcome"] != "ok" or result["exceptions"]:
        result["output_tail"] = output[-TAIL_CHARS:]
    return result


def transparency(src: Path, out: Path, config: str, train_args: list[str], *,
                 save_every: int, wall_s: float, observe_state: bool = False,
                 invariants: Path | None = None) -> dict[str, Any]:
    """Run the seven runs of one configuration and compare them; writes out/transparency.json.

    ``observe_state``: the traced runs also observe the training state (``observe.py``), as
    the resume probe's runs do. ``invariants``: the traced runs collect selectively for
    them, as the agent's tool does where the reference says so."""
    steps_text = option_value(train_args, "--steps")
    seed_text = option_value(train_args, "--seed")
    if steps_text is None or seed_text is None:
        raise ValueError("the training arguments need --steps and --seed")
    steps, seed = int(steps_text), int(seed_text)
    if save_every < 1 or steps % save_every or steps < 2 * save_every:
        raise ValueError(f"--steps {steps} must be a multiple of --save-every {save_every} "
                         "with at least two checkpoints (a mid one to resume from, a final one)")
    for word in ("--ckpt", "--resume", "--save-every", "--out"):
        if option_value(train_args, word) is not None:
            raise ValueError(f"{word} is set by the transparency check, not by the caller")
    if out.exists():
        raise FileExistsError(f"output folder {out} exists; every check needs a fresh one")
    out.mkdir(parents=True)
    mid, final = save_every, steps
    started = time.monotonic()

    runs: dict[str, dict[str, Any]] = {}
    for label, (traced, resume_from, seed_offset) in RUNS.items():
        run_out, ckpt = out / label, out / label / "ckpt"
        args = with_option(train_args, "--seed", str(seed + seed_offset))
        args += ["--ckpt", str(ckpt), "--save-every", str(save_every)]
        resume_step = None
        if resume_from is not None:
            source = runs[resume_from]
            found = checkpoints(Path(source["ckpt"]))
            if mid not in found:
                runs[label] = {
                    "traced": traced, "seed": seed + seed_offset, "resume_from": resume_from,
                    "resume_step": mid, "outcome": "not_run",
                    "cause": f"{resume_from} left no step-{mid} checkpoint "
                             f"({source['outcome']})",
                    "wall_s": None, "exceptions": [], "warnings": 0, "checkpoints": [],
                    "train_out": None, "ckpt": None, "train_args": args, "trace_records": {}}
                continue
            args += ["--resume", str(found[mid])]
            resume_step = mid
        record = collect_run(src, run_out, config, args, traced=traced, wall_s=wall_s,
                             observe_state=observe_state and traced,
                             invariants=invariants if traced else None)
        runs[label] = _run_record(record, run_out, ckpt, seed=seed + seed_offset,
                                  resume_from=resume_from, resume_step=resume_step)
    runs_s = time.monotonic() - started

    import torch

    torch.set_num_threads(1)
    scratch = out / "compare-tmp"
    scratch.mkdir()
    files = {label: RunFiles(label, record, scratch) for label, record in runs.items()}
    comparisons = []
    for label, question, aspects, expected in PAIRS:
        for aspect in aspects:
            row: dict[str, Any] = {"pair": f"{label} vs plain", "run": label,
                                   "question": question, "aspect": aspect,
                                   "expected": expected}
            try:
                row.update(compare_aspect(aspect, files[label], files["plain"], mid=mid,
                                          final=final, resumed=RUNS[label][1] is not None))
            except _Missing as exc:
                row.update(status="failed", detail=str(exc))
            except Exception as exc:  # a comparison that breaks is a finding
                row.update(status="failed", detail=f"{type(exc).__name__}: {exc}"[:500])
            comparisons.append(row)
    shutil.rmtree(scratch, ignore_errors=True)

    result = {
        "config": config, "src": str(src), "train_args": train_args, "steps": steps,
        "seed": seed, "save_every": save_every, "mid_step": mid, "final_step": final,
        "observe_state": observe_state, "selective": invariants is not None,
        "torch_version": torch.__version__, "runs": runs, "comparisons": comparisons,
        "runs_s": round(runs_s, 3), "compare_s": round(time.monotonic() - started - runs_s, 3),
    }
    (out / "transparency.json").write_text(json.dumps(result, indent=1) + "\n")
    return result
