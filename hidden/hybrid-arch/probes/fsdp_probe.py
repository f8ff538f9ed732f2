"""Run as each rank by the launcher: how the candidate's gloo-fsdp-2 wraps a hybrid model.

Usage: python fsdp_probe.py OUT_DIR PATTERN   (RANK/WORLD_SIZE/MASTER_* from the launcher)

Runs as the candidate uid and is readable by candidate code, so it holds no expected value and
no canary: it only reports what it sees, and the check (the judge) decides. Uses the
candidate's own ``setup("gloo-fsdp-2")`` and ``parallelize``, then reports, per block: its
class, whether it is an ``FSDPModule``, the ids of the parameters its own ``fully_shard`` unit
manages next to the ids of the block's parameters, and how each parameter is placed (its
DTensor placements, or none for a plain tensor); for the root, whether it is an
``FSDPModule`` and the ids its unit manages. Writes OUT_DIR/probe-rank{r}.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def unit_params(module: torch.nn.Module) -> list[int] | None:
    """ids of the parameters this FSDP unit manages itself (None if not introspectable)."""
    try:
        state = module._get_fsdp_state()
        group = state._fsdp_param_group
    except Exception:
        return None
    if group is None:
        return []
    return [id(fp.sharded_param) for fp in group.fsdp_params]


def main() -> int:
    out, pattern = Path(sys.argv[1]), sys.argv[2]
    from hybridlm.model import ModelArgs, Transformer
    from hybridlm.parallel import parallelize, setup, teardown
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    ctx = setup("gloo-fsdp-2")
    try:
        torch.manual_seed(0)
        model = Transformer(ModelArgs(n_layers=len(pattern), layer_pattern=pattern))
        model = parallelize(model, ctx)
        blocks = []
        for i, block in enumerate(model.layers):
            params = dict(block.named_parameters())
            managed = unit_params(block) if isinstance(block, FSDPModule) else []
            placements: dict[str, list[dict[str, object]] | None] = {}
            for name, p in params.items():
                if isinstance(p, DTensor):
                    placements[name] = [{"type": type(pl).__name__,
                                         "dim": getattr(pl, "dim", None),
                                         "str": str(pl)} for pl in p.placements]
                else:
                    placements[name] = None
            blocks.append({
                "index": i,
                "kind": pattern[i],
                "class": type(block).__name__,
                "is_fsdp_unit": isinstance(block, FSDPModule),
                "n_params": len(params),
                "managed_param_ids": managed,
                "param_ids": [id(p) for p in params.values()],
                "placements": placements,
            })
        report = {
            "rank": ctx.rank,
            "world_size": ctx.world_size,
            "root_is_fsdp_unit": isinstance(model, FSDPModule),
            "root_managed_param_ids": unit_params(model) if isinstance(model, FSDPModule) else [],
            "block_param_ids": [id(p) for b in model.layers for p in b.parameters()],
            "blocks": blocks,
        }
        (out / f"probe-rank{ctx.rank}.json").write_text(json.dumps(report, indent=1) + "\n")
    finally:
        teardown(ctx)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
