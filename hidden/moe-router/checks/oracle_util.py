# HARNESS-CANARY-8a0e5fe7-3b11-4c19-b138-53348751b84e
"""Helpers shared by the moe-router checks and the 2-rank probe (no candidate import here).

Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import torch


def load_candidate_model(cfg: Any, params: dict[str, torch.Tensor],
                         dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    """The candidate's TinyLM for reference Cfg ``cfg`` holding ``params`` (export-schema keys).

    The state dict is expected to use the export schema's names (the export is the full state
    dict); a candidate that names its modules differently is given the parameters through its
    own ``load_export`` instead, so only the documented interface is relied on.
    """
    from tinylm.config import ModelConfig
    from tinylm.model import TinyLM

    mcfg = ModelConfig(**cfg.model_config_kwargs())
    torch.manual_seed(0)
    model = TinyLM(mcfg).to(dtype)
    if set(model.state_dict()) == set(params):
        model.load_state_dict({k: v.to(dtype) for k, v in params.items()}, strict=True)
        return model
    from tinylm.export import load_export

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "params.pt"
        torch.save({"format": "tinylm-export-v1", "model_config": dataclasses.asdict(mcfg),
                    "state_dict": {k: v.to(torch.float32).contiguous()
                                   for k, v in params.items()}}, path)
        model = load_export(path)
    # make_params draws float32-representable values, so the detour loses no bit.
    model = model.to(dtype)
    return model


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items()
                for k, v in flatten(val, f"{prefix}/{key}").items()}
    if isinstance(obj, (list, tuple)):
        return {k: v for i, val in enumerate(obj)
                for k, v in flatten(val, f"{prefix}/{i}").items()}
    return {prefix: obj}


def compare_states(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Max abs difference (fp64) of model and optimizer states, and whether all bits agree."""
    out: dict[str, Any] = {"bitwise_equal": True}
    for part in ("model", "optim"):
        fa, fb = flatten(a.get(part, {})), flatten(b.get(part, {}))
        if fa.keys() != fb.keys():
            out[f"{part}_key_mismatch"] = sorted(set(fa) ^ set(fb))[:8]
            out["bitwise_equal"] = False
            out[f"{part}_max_abs_diff"] = float("inf")
            continue
        if not fa:
            out[f"{part}_key_mismatch"] = ["(empty)"]
            out["bitwise_equal"] = False
            out[f"{part}_max_abs_diff"] = float("inf")
            continue
        worst = 0.0
        for key, x in fa.items():
            y = fb[key]
            if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
                if x.shape != y.shape:
                    worst = float("inf")
                    out["bitwise_equal"] = False
                    continue
                if x.numel():
                    worst = max(worst, (x.double() - y.double()).abs().max().item())
                out["bitwise_equal"] &= x.dtype == y.dtype and torch.equal(x, y)
            elif isinstance(x, (int, float)) and not isinstance(x, bool) and \
                    isinstance(y, (int, float)):
                worst = max(worst, abs(float(x) - float(y)))
                out["bitwise_equal"] &= x == y
            else:
                out["bitwise_equal"] &= x == y
        out[f"{part}_max_abs_diff"] = worst
    out["max_abs_diff"] = max(out["model_max_abs_diff"], out["optim_max_abs_diff"])
    return out
