"""Checkpoints with torch.distributed.checkpoint (DCP): sharded save, resharding load.

One checkpoint folder holds:

    model      the model state dict (key schema in hybridlm.model; no "module." prefix)
    optim      the optimizer state dict, keyed by parameter name
    scheduler  the LR scheduler state
    train      {"step": completed steps, "data": the data stream position}
    rng_rank{r} the CPU RNG state of rank r (and cuda_rng_rank{r} on CUDA runs)

The RNG keys carry the rank on purpose: DCP stores a replicated, non-sharded value saved
under one key on every rank only once, so a plain "rng" key would resume every rank with
rank 0's state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from hybridlm.data import ShardedBatches
from hybridlm.parallel import DistContext


def _rng_state(ctx: DistContext) -> dict[str, torch.Tensor]:
    state = {f"rng_rank{ctx.rank}": torch.get_rng_state()}
    if ctx.device.type == "cuda":
        state[f"cuda_rng_rank{ctx.rank}"] = torch.cuda.get_rng_state(ctx.device)
    return state


def save_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    data: ShardedBatches,
    step: int,
    ctx: DistContext,
) -> None:
    """Collective: every rank calls it with the same ``path``."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state: dict[str, Any] = {
        "model": model_sd,
        "optim": optim_sd,
        "scheduler": scheduler.state_dict(),
        "train": {"step": step, "data": data.state_dict()},
        **_rng_state(ctx),
    }
    dcp.save(state, checkpoint_id=str(path))


def load_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    data: ShardedBatches,
    ctx: DistContext,
) -> int:
    """Collective: restore what ``save_checkpoint`` wrote (any world size); returns the step."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state: dict[str, Any] = {
        "model": model_sd,
        "optim": optim_sd,
        "scheduler": scheduler.state_dict(),
        "train": {"step": 0, "data": data.state_dict()},
        **_rng_state(ctx),
    }
    # DCP loads tensors in place and replaces the non-tensor leaves in `state`.
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    scheduler.load_state_dict(state["scheduler"])
    data.load_state_dict(state["train"]["data"])
    torch.set_rng_state(state[f"rng_rank{ctx.rank}"])
    if ctx.device.type == "cuda":
        torch.cuda.set_rng_state(state[f"cuda_rng_rank{ctx.rank}"], ctx.device)
    return int(state["train"]["step"])


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The unsharded model and optimizer state on CPU.

    Collective; the result is complete on rank 0 only (empty elsewhere), so only rank 0 may
    read it.
    """
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
    return {"model": model_sd, "optim": optim_sd}
