"""Named run configurations, process-group setup and model wrapping (DDP or FSDP2)."""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

# Short on purpose: a collective that fails on one rank must end the job, not wait 30 min.
PG_TIMEOUT = timedelta(seconds=60)


@dataclass(frozen=True)
class RunConfig:
    name: str
    world_size: int
    backend: Literal["gloo", "nccl"] | None
    parallel: Literal["none", "ddp", "fsdp"]
    device_type: Literal["cpu", "cuda"]
    # bf16 autocast on the CUDA configurations only; CPU runs stay in the requested dtype.
    bf16_autocast: bool = False


CONFIGS: dict[str, RunConfig] = {
    c.name: c
    for c in (
        RunConfig("cpu-1", 1, None, "none", "cpu"),
        RunConfig("gloo-ddp-2", 2, "gloo", "ddp", "cpu"),
        RunConfig("gloo-fsdp-2", 2, "gloo", "fsdp", "cpu"),
        RunConfig("cuda-ddp-2", 2, "nccl", "ddp", "cuda", bf16_autocast=True),
        RunConfig("cuda-fsdp-2", 2, "nccl", "fsdp", "cuda", bf16_autocast=True),
    )
}


@dataclass
class DistContext:
    config: RunConfig
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.config.world_size > 1


def setup(config_name: str) -> DistContext:
    """Join the process group the launcher describes (torchrun env vars) for ``config_name``."""
    if config_name not in CONFIGS:
        raise ValueError(f"unknown config {config_name!r}; choose from {sorted(CONFIGS)}")
    config = CONFIGS[config_name]
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size != config.world_size:
        raise RuntimeError(f"{config_name} needs {config.world_size} processes, launched with "
                           f"{world_size} (use torchrun --nproc-per-node {config.world_size})")
    # The thread count changes floating-point results, and >1 per rank oversubscribes small hosts.
    torch.set_num_threads(1)
    if config.device_type == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    rank = 0
    if config.world_size > 1:
        dist.init_process_group(backend=config.backend, timeout=PG_TIMEOUT,
                                device_id=device if config.device_type == "cuda" else None)
        rank = dist.get_rank()
    return DistContext(config=config, rank=rank, world_size=world_size, device=device)


def teardown(ctx: DistContext) -> None:
    """Leave the process group and end its gloo threads while the interpreter still runs.

    A gloo worker thread that lets go of a finished collective's tensor while Python shuts
    down must take the GIL, and CPython ends such a thread with pthread_exit: the process
    aborts after every output was written (SIGABRT, "terminate called without an active
    exception"). The threads end only with the group's last reference, and two holders
    outlive destroy_process_group(): the DDP and FSDP modules (reference cycles, collected
    here) and every device mesh, which torch's DTensor caches keep until the process exits
    (its groups are dropped here; the mesh is not used after training).

    The modules are collected before the group is destroyed, never after: DDP's reducer holds
    the group from C++ and lets it go with the GIL held, so if its reference were the last,
    the group's destructor would join a gloo worker that needs the GIL to drop a finished
    collective's tensor, and the rank would wait forever (pytorch/pytorch#56297). Collected
    first, the reducer goes while the group registry still holds the group, and
    destroy_process_group() drops the last reference through a binding that releases the GIL.
    """
    if not (ctx.distributed and dist.is_initialized()):
        return
    # Leave together: rank 0 may still be evaluating and writing outputs.
    dist.barrier()
    gc.collect()
    dist.destroy_process_group()
    gc.collect()
    for obj in gc.get_objects():
        if isinstance(obj, DeviceMesh):
            obj._pg_registry.clear()
    gc.collect()


def parallelize(model: nn.Module, ctx: DistContext) -> nn.Module:
    """Wrap ``model`` for the configuration; parameters must already be on ``ctx.device``."""
    if ctx.config.parallel == "ddp":
        return DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    if ctx.config.parallel == "fsdp":
        mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
        mp = None
        if ctx.config.bf16_autocast:
            # Parameters are gathered in bf16 for compute; gradients reduce in fp32.
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        kwargs = {"mesh": mesh} if mp is None else {"mesh": mesh, "mp_policy": mp}
        # One FSDP unit per block (each all-gathers just before it runs), then the root for
        # the embeddings, final norm and output projection.
        for block in model.layers:
            fully_shard(block, **kwargs)
        fully_shard(model, **kwargs)
        return model
    return model


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, DDP) else model


def all_reduce_mean(value: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Mean over ranks of a scalar (for logging and evaluation only, never for gradients)."""
    if not ctx.distributed:
        return value
    value = value.detach().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / ctx.world_size
