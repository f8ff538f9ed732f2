"""Resumable checkpoints (torch.distributed.checkpoint) and the final full state.

A checkpoint holds the model, the optimizer, the scheduler, the data position and each rank's
RNG state. The RNG goes under a rank-suffixed key (``rng_rank<r>``): DCP deduplicates
replicated entries saved under one key, so a shared key would resume every rank with rank 0's
generator. Under FSDP the model and optimizer entries are sharded DTensors; under DDP and in one
process they are full tensors. A checkpoint saved by two ranks loads in one process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    get_state_dict,
    set_state_dict,
)

from tinylm.data import TokenStream
from tinylm.distributed import Runtime


def _rng_key(rank: int) -> str:
    return f"rng_rank{rank}"


def _rng_state(rt: Runtime) -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if rt.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(rt.device)
    return state


def _app_state(model: nn.Module, optimizer: torch.optim.Optimizer,
               scheduler: torch.optim.lr_scheduler.LRScheduler, stream: TokenStream,
               rt: Runtime) -> dict[str, Any]:
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {
        "model": model_sd,
        "optim": optim_sd,
        "scheduler": scheduler.state_dict(),
        "data": stream.state_dict(),
        _rng_key(rt.rank): _rng_state(rt),
    }


def save_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, stream: TokenStream,
                    rt: Runtime) -> None:
    """Collective: every rank calls it with the same path."""
    dcp.save(_app_state(model, optimizer, scheduler, stream, rt), checkpoint_id=str(path))


def load_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, stream: TokenStream,
                    rt: Runtime) -> None:
    """Collective: restore everything save_checkpoint wrote, in place."""
    state = _app_state(model, optimizer, scheduler, stream, rt)
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    # The optimizer's param groups carry the current lr; the scheduler carries the step count.
    scheduler.load_state_dict(state["scheduler"])
    stream.load_state_dict(state["data"])
    rng = state[_rng_key(rt.rank)]
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng:
        torch.cuda.set_rng_state(rng["cuda"], rt.device)


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Collective: the reconstructed full model and optimizer state on CPU (empty off rank 0)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return {
        "model": get_model_state_dict(model, options=options),
        "optim": get_optimizer_state_dict(model, optimizer, options=options),
    }
