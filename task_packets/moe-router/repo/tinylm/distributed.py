"""Process-group set-up and model wrapping for the declared configurations."""

from __future__ import annotations

import gc
import os
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

# A collective that fails on one rank blocks the others until this timeout; keep it short so a
# broken run ends as an error instead of a 30-minute hang.
PG_TIMEOUT = timedelta(seconds=60)


@dataclass(frozen=True)
class Runtime:
    config: str
    rank: int
    world_size: int
    device: torch.device
    # "none" (one process), "ddp" or "fsdp".
    parallel: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self) -> AbstractContextManager[object]:
        # The CUDA configurations train under bf16 autocast; CPU runs use the parameter dtype.
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return nullcontext()


def setup(config: str) -> Runtime:
    """Start the process group the configuration needs (none for cpu-1)."""
    torch.set_num_threads(1)  # the thread count changes the bits, and 2 cores are shared
    if config == "cpu-1":
        return Runtime(config, 0, 1, torch.device("cpu"), "none")
    if "RANK" not in os.environ:
        raise RuntimeError(f"--config {config} must be launched with torchrun --nproc-per-node 2")
    cuda = config.startswith("cuda-")
    if cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all ranks are on this host
        device = torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", timeout=PG_TIMEOUT)
    if dist.get_world_size() != 2:
        raise RuntimeError(f"{config} expects 2 processes, got {dist.get_world_size()}")
    parallel = "fsdp" if config.endswith("fsdp-2") else "ddp"
    return Runtime(config, dist.get_rank(), dist.get_world_size(), device, parallel)


def parallelize(model: nn.Module, rt: Runtime) -> nn.Module:
    """Wrap the model for data parallelism; every rank must hold identical initial weights."""
    if rt.parallel == "ddp":
        return DDP(model, device_ids=[rt.device.index] if rt.device.type == "cuda" else None)
    if rt.parallel == "fsdp":
        mesh = init_device_mesh(rt.device.type, (rt.world_size,))
        # Shard each block on its own so only one block's full weights exist at a time.
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    return model


def all_reduce_mean(value: torch.Tensor, rt: Runtime) -> torch.Tensor:
    """Mean of a scalar over ranks (gloo has no AVG op)."""
    value = value.detach().clone()
    if rt.world_size > 1:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        value /= rt.world_size
    return value


def teardown() -> None:
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
    if not dist.is_initialized():
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
