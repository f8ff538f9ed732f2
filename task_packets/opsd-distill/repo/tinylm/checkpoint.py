"""Distributed checkpoints (torch.distributed.checkpoint) and the final full state.

A checkpoint holds the model, the optimizer, the LR scheduler, the data stream position and
every rank's RNG state. The sharded model/optimizer state goes through ``get_state_dict`` so the
same checkpoint loads under DDP, FSDP2 or a single process.

Per-rank state uses rank-suffixed keys (``rng/rank{r}``): DCP deduplicates non-sharded tensors
saved under the same key on every rank, so a shared key would silently resume rank 1 with rank
0's state.
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

from tinylm.parallel import Runtime


def rank_key(name: str, rank: int) -> str:
    return f"{name}/rank{rank}"


def per_rank_state(rt: Runtime) -> dict[str, Any]:
    """State that differs between ranks and must come back to the rank that saved it."""
    return {rank_key("rng", rt.rank): torch.get_rng_state()}


def load_per_rank_state(state: dict[str, Any], rt: Runtime) -> None:
    torch.set_rng_state(state[rank_key("rng", rt.rank)])


def save_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_state: dict[str, Any],
    rt: Runtime,
) -> None:
    """Write a DCP checkpoint folder; ``train_state`` holds scheduler, data stream and step."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd, "train": train_state, **per_rank_state(rt)}
    dcp.save(state, checkpoint_id=str(path))


def load_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_state: dict[str, Any],
    rt: Runtime,
) -> dict[str, Any]:
    """Restore model, optimizer and per-rank RNG in place; returns the loaded ``train_state``.

    ``train_state`` must have the structure that was saved (DCP loads into a template).
    """
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd, "train": train_state, **per_rank_state(rt)}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    load_per_rank_state(state, rt)
    return state["train"]


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer, rt: Runtime) -> dict[str, Any] | None:
    """The reconstructed full (unsharded) model and optimizer state on rank 0, ``None`` elsewhere.

    Every rank must call this (it gathers shards). With ``cpu_offload`` the result is empty on
    non-zero ranks, so only rank 0 may look inside it.
    """
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
    if not rt.is_main:
        return None
    return {"model": model_sd, "optimizer": optim_sd}
