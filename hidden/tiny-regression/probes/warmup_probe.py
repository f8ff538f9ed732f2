"""Candidate side of the tiny-regression checks: drive ``tinytrain``'s API, return raw results.

Runs as the candidate uid through ``grading.probe`` and is readable by it, so it holds no
expected value and no canary: the checks (judge side) decide.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch


def _train(**config: Any) -> dict[str, Any]:
    import tinytrain

    result = tinytrain.train(tinytrain.TrainConfig(**config))
    return {"history": [dict(h) for h in result.history],
            "state": {k: v.detach().clone() for k, v in result.model.state_dict().items()}}


def train(**config: Any) -> dict[str, Any]:
    """One in-memory run of ``train(TrainConfig(**config))``: its history and final state."""
    torch.set_num_threads(1)
    return _train(**config)


def default_and_zero(steps: int) -> dict[str, Any]:
    """A run with the default config and one with ``warmup_steps=0``."""
    torch.set_num_threads(1)
    return {"default": _train(steps=steps), "zero": _train(steps=steps, warmup_steps=0)}


def resume_mid_warmup(steps: int, warmup: int, stop_at: int) -> dict[str, Any]:
    """An uninterrupted run, and one stopped after ``stop_at`` steps then resumed."""
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="resume-"))
    full = _train(steps=steps, warmup_steps=warmup, out=tmp / "full")
    _train(steps=stop_at, warmup_steps=warmup, out=tmp / "first")
    resumed = _train(steps=steps, warmup_steps=warmup, out=tmp / "second",
                     resume=tmp / "first" / "checkpoint.pt")
    return {"full": full, "resumed": resumed}


def raised_by(**config: Any) -> list[str] | None:
    """The class names (MRO) of what ``train`` raises for this config; None when it trains."""
    try:
        _train(**config)
    except Exception as exc:
        return [c.__name__ for c in type(exc).__mro__]
    return None
