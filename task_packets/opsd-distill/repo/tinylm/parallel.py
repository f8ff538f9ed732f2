"""Process groups, device meshes and model wrapping for the named configurations.

``cpu-1`` runs without a process group. The ``*-2`` configurations expect to be launched by
torchrun with two processes; every rank builds the same model from the same seed and then wraps
it with DDP or FSDP2 (``fully_shard`` per block, then the root).
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP


@dataclass(frozen=True)
class ParallelConfig:
    name: str
    world_size: int
    backend: str | None  # None: no process group
    strategy: str  # "none" | "ddp" | "fsdp"
    device_type: str  # "cpu" | "cuda"
    # bf16 autocast for the forward pass (GPU configurations only)
    autocast_bf16: bool = False


CONFIGURATIONS: dict[str, ParallelConfig] = {
    c.name: c
    for c in (
        ParallelConfig("cpu-1", 1, None, "none", "cpu"),
        ParallelConfig("gloo-ddp-2", 2, "gloo", "ddp", "cpu"),
        ParallelConfig("gloo-fsdp-2", 2, "gloo", "fsdp", "cpu"),
        ParallelConfig("cuda-ddp-2", 2, "nccl", "ddp", "cuda", autocast_bf16=True),
        ParallelConfig("cuda-fsdp-2", 2, "nccl", "fsdp", "cuda", autocast_bf16=True),
    )
}

# A failing collective blocks the other rank until this fires; the gloo default is 30 minutes.
PG_TIMEOUT = timedelta(seconds=60)


@dataclass
class Runtime:
    cfg: ParallelConfig
    rank: int
    world_size: int
    device: torch.device
    mesh: DeviceMesh | None

    @property
    def distributed(self) -> bool:
        return self.cfg.backend is not None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum of ``t`` over ranks (a new tensor; ``t`` itself is not modified)."""
        out = t.detach().clone()
        if self.distributed:
            dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def local_slice(self, n_global: int) -> slice:
        """This rank's contiguous slice of a global batch of ``n_global`` rows."""
        if n_global % self.world_size:
            raise ValueError(f"global batch {n_global} is not divisible by world size {self.world_size}")
        per_rank = n_global // self.world_size
        return slice(self.rank * per_rank, (self.rank + 1) * per_rank)

    def autocast(self) -> torch.autocast:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.autocast_bf16)


def init_runtime(name: str) -> Runtime:
    if name not in CONFIGURATIONS:
        raise ValueError(f"unknown configuration {name!r}; choose from {sorted(CONFIGURATIONS)}")
    cfg = CONFIGURATIONS[name]
    # One thread per rank: the thread count changes the floating-point bits, and more threads
    # than cores per rank oversubscribes a small machine.
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != cfg.world_size:
        raise RuntimeError(
            f"configuration {name} needs {cfg.world_size} process(es) but WORLD_SIZE={world}; "
            "launch the two-process configurations with torchrun --nproc-per-node 2"
        )
    if cfg.backend is None:
        return Runtime(cfg, 0, 1, torch.device("cpu"), None)

    local_rank = int(os.environ["LOCAL_RANK"])
    if cfg.device_type == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=cfg.backend, timeout=PG_TIMEOUT)
    mesh = init_device_mesh(cfg.device_type, (cfg.world_size,))
    return Runtime(cfg, dist.get_rank(), dist.get_world_size(), device, mesh)


def shutdown(rt: Runtime) -> None:
    """Leave the process group and end its gloo threads while the interpreter still runs.

    A gloo worker thread that lets go of a finished collective's tensor while Python shuts
    down must take the GIL, and CPython ends such a thread with pthread_exit: the process
    aborts after every output was written (SIGABRT, "terminate called without an active
    exception"). The threads end only with the group's last reference, and two holders
    outlive destroy_process_group(): the DDP and FSDP modules (reference cycles, collected
    here) and every device mesh, which torch's DTensor caches keep until the process exits
    (its groups are dropped here; the mesh is not used after training).
    """
    if not (rt.distributed and dist.is_initialized()):
        return
    # Leave together: rank 0 may still be evaluating and writing outputs.
    dist.barrier()
    dist.destroy_process_group()
    gc.collect()
    for obj in gc.get_objects():
        if isinstance(obj, DeviceMesh):
            obj._pg_registry.clear()
    gc.collect()


def parallelize(model: nn.Module, rt: Runtime) -> nn.Module:
    """Wrap ``model`` (already on ``rt.device``) for the configuration's strategy."""
    if rt.cfg.strategy == "none":
        return model
    if rt.cfg.strategy == "ddp":
        return DDP(model, device_ids=[rt.device.index] if rt.device.type == "cuda" else None)
    # FSDP2: shard each block separately so only one block's parameters are gathered at a time.
    for block in model.blocks:
        fully_shard(block, mesh=rt.mesh)
    fully_shard(model, mesh=rt.mesh)
    return model


def unwrap(model: nn.Module) -> nn.Module:
    """The TinyLM inside a DDP wrapper (FSDP2 modifies the module in place, nothing to unwrap)."""
    return model.module if isinstance(model, DDP) else model
