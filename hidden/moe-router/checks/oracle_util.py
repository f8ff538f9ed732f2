# HARNESS-CANARY-8a0e5fe7-3b11-4c19-b138-53348751b84e
"""Judge-side helpers of the moe-router checks: comparing the runs' saved states.

Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

No candidate import here. Building the candidate's model from fixed parameters is candidate
code and lives with the probes (``probes/moe_probe.py: load_candidate_model``).
"""

from __future__ import annotations

from typing import Any

import torch


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
