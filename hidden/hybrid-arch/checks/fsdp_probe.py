# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""Probe (run as each rank by the launcher): how the candidate's gloo-fsdp-2 wraps a hybrid model.

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
Usage: python fsdp_probe.py OUT_DIR PATTERN   (RANK/WORLD_SIZE/MASTER_* from the launcher)

Uses the candidate's own ``setup("gloo-fsdp-2")`` and ``parallelize``, then reports, per block:
its class, whether it is its own ``fully_shard`` unit (an ``FSDPModule`` managing exactly the
block's parameters) and how each parameter is placed (a DTensor sharded on dim 0). Writes
OUT_DIR/probe-rank{r}.json; the check reads it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def unit_params(module: torch.nn.Module) -> list[int] | None:
    """ids of the parameters this FSDP unit manages itself (None if not introspectable)."""
    try:
        state = module._get_fsdp_state()  # noqa: SLF001 - torch 2.13 FSDP2 internals
        group = state._fsdp_param_group  # noqa: SLF001
    except Exception:  # noqa: BLE001
        return None
    if group is None:
        return []
    return [id(fp.sharded_param) for fp in group.fsdp_params]


def main() -> int:
    out, pattern = Path(sys.argv[1]), sys.argv[2]
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor, Shard

    from hybridlm.model import ModelArgs, Transformer
    from hybridlm.parallel import parallelize, setup, teardown

    ctx = setup("gloo-fsdp-2")
    try:
        torch.manual_seed(0)
        model = Transformer(ModelArgs(n_layers=len(pattern), layer_pattern=pattern))
        model = parallelize(model, ctx)
        blocks = []
        for i, block in enumerate(model.layers):
            params = dict(block.named_parameters())
            managed = unit_params(block) if isinstance(block, FSDPModule) else []
            placements = {}
            for name, p in params.items():
                if isinstance(p, DTensor):
                    placements[name] = [str(pl) for pl in p.placements]
                    placements[name].append("shard0" if p.placements == (Shard(0),) else "other")
                else:
                    placements[name] = ["plain tensor (not sharded)"]
            blocks.append({
                "index": i,
                "kind": pattern[i],
                "class": type(block).__name__,
                "is_fsdp_unit": isinstance(block, FSDPModule),
                "n_params": len(params),
                "manages_exactly_its_params": (
                    None if managed is None else sorted(managed) == sorted(map(id, params.values()))
                ),
                "placements": placements,
            })
        root_managed = unit_params(model) if isinstance(model, FSDPModule) else []
        block_param_ids = {id(p) for b in model.layers for p in b.parameters()}
        report = {
            "rank": ctx.rank,
            "world_size": ctx.world_size,
            "root_is_fsdp_unit": isinstance(model, FSDPModule),
            "root_manages_block_params": (
                None if root_managed is None else bool(set(root_managed) & block_param_ids)
            ),
            "blocks": blocks,
        }
        (out / f"probe-rank{ctx.rank}.json").write_text(json.dumps(report, indent=1) + "\n")
    finally:
        teardown(ctx)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
