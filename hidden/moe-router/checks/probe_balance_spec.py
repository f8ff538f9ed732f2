# HARNESS-CANARY-8a0e5fe7-3b11-4c19-b138-53348751b84e
"""Fixed inputs of the 2-rank balance probe and the aux losses TASK.md implies for them.

Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

Judge side only: the probe itself (``probes/probe_balance.py``, run as the candidate) is given
the inputs as a tensor file (:func:`write_inputs`) and never sees the expected values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import moe_reference as R
import torch

# The task's MoE settings (E 4, top-2, capacity factor 1.25, aux weight 0.01) in a ONE-layer
# model: the router input then depends only on embeddings and attention, so the aux loss tests
# the balance statistics alone (gating, capacity and the expert outputs cannot move it; those
# are the forward reference check's business).
CFG = R.Cfg(n_layers=1)
PARAM_SEED, ROUTER_SCALE, TOKEN_SEED, GLOBAL_BATCH, WORLD = 11, 0.4, 5, 8, 2
# fp64 throughout; routing in fp32 (allowed by TASK.md) moves the aux loss by ~2e-8 relative.
AUX_RTOL = 1e-6


def params() -> dict[str, torch.Tensor]:
    return R.make_params(CFG, PARAM_SEED, router_scale=ROUTER_SCALE)


def local_tokens(rank: int) -> torch.Tensor:
    per = GLOBAL_BATCH // WORLD
    return R.fixed_tokens(GLOBAL_BATCH, TOKEN_SEED)[rank * per:(rank + 1) * per, :-1]


def write_inputs(path: Path) -> Path:
    """The probe's inputs (model config, parameters, each rank's tokens, world size)."""
    torch.save({"model_config": CFG.model_config_kwargs(), "params": params(),
                "tokens": [local_tokens(r).clone() for r in range(WORLD)], "world": WORLD}, path)
    path.chmod(0o644)
    return path


def expected_aux() -> dict[str, list[float]]:
    """Per rank: the aux loss with global f_e (training) and with local f_e (eval)."""
    p = params()
    with torch.no_grad():
        local = [R.forward(p, local_tokens(r), CFG) for r in range(WORLD)]
        counts = [sum(f.layers[i].counts for f in local) for i in range(CFG.n_layers)]
        glob = [R.forward(p, local_tokens(r), CFG, global_counts=counts) for r in range(WORLD)]
    return {"train_global": [float(f.aux) for f in glob],
            "train_local": [float(f.aux) for f in local]}


def read_rank(out: Path, rank: int) -> dict[str, Any]:
    return json.loads((out / f"rank{rank}.json").read_text())
