"""Training state beyond the model's parameters, observed as TrainCheck VAR records.

TrainCheck 0.2.0's sampler dumps a model's parameters (with their gradients) and nothing
else: not the optimizer's state, not module buffers, not the random generators, not the
learning rate; and its default tensor hash covers row 0 of a tensor only. The entry script
(``entry.py``) calls :func:`state_records` after each optimizer step when the run observes
state, and writes the records with TrainCheck's own trace writer, in its VAR record format
(``var_name``, ``var_type``, ``attributes``, ``meta_vars``), so TrainCheck's relations and the
harness's resume pairing (``resume.py``) read them like any other variable.

Each observation is a digest of the whole value (BLAKE2b of its bytes, for a tensor the
rank's local shard), under a logical name that is the same on every rank and in every run:
``state.optim.model.<parameter>.<key>``, ``state.lr.<group>``, ``state.buffer.model.<name>``,
``state.rng.<generator>``, ``state.sched.<index>.<key>`` (a learning-rate scheduler's counters),
``state.param.model.<parameter>`` and ``state.grad.model.<parameter>`` (``model.<parameter>``
is the name TrainCheck's sampler gives the same parameter).
A digest is exact: two values are equal only if every bit is.

This module runs inside the traced program (torch is imported there); it draws no random
number and changes no state it reads.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import torch

STATE_PREFIX = "state"
VAR_TYPE = "diagnostics.state"


def _local(tensor: torch.Tensor) -> torch.Tensor:
    # A DTensor (FSDP2) is observed by the shard this rank holds: reconstructing the logical
    # tensor is a collective, and a resume is compared rank by rank.
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def digest_bytes(data: bytes) -> int:
    """A signed 64-bit digest, the integer width TrainCheck's own hashes have."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)


def tensor_digest(tensor: torch.Tensor) -> int:
    local = _local(tensor).detach()
    if local.device.type != "cpu":
        local = local.cpu()
    # The dtype and shape are part of the digest: a value reinterpreted is another value.
    head = f"{local.dtype}|{tuple(local.shape)}|".encode()
    # reshape(-1): a 0-dim tensor (an optimizer's step count) cannot be viewed as bytes.
    raw = local.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return digest_bytes(head + raw)


def _tensor_entry(tensor: torch.Tensor) -> dict[str, Any]:
    local = _local(tensor)
    return {"digest": tensor_digest(tensor), "shape": list(local.shape),
            "dtype": str(local.dtype).removeprefix("torch.")}


def _value_entry(value: Any) -> dict[str, Any]:
    return {"digest": digest_bytes(repr(value).encode()), "shape": [],
            "dtype": type(value).__name__}


def rng_states() -> dict[str, dict[str, Any]]:
    """Every random generator a training step may draw from, per process."""
    found = {"rng.torch": _tensor_entry(torch.get_rng_state()),
             "rng.python": _value_entry(random.getstate())}
    try:
        import numpy as np
    except ImportError:  # numpy is optional for a task's code
        pass
    else:
        kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
        words = np.asarray(keys, dtype=np.uint32)  # the legacy tuple's key array
        found["rng.numpy"] = {"digest": digest_bytes(
            f"{kind}|{pos}|{has_gauss}|{gauss}|".encode() + words.tobytes()),
            "shape": [int(words.size)], "dtype": "uint32"}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for index in range(torch.cuda.device_count()):
            found[f"rng.cuda{index}"] = _tensor_entry(torch.cuda.get_rng_state(index))
    return found


def _plain(value: Any) -> bool:
    """A value whose repr is the same in every run (no object address, no function)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, (list, tuple)) and all(_plain(v) for v in value)


def schedulers_of(optimizer: torch.optim.Optimizer) -> list[Any]:
    """The learning-rate schedulers that drive ``optimizer`` (a scheduler holds its optimizer;
    the optimizer does not know its schedulers), in creation order of the heap scan."""
    import gc

    from torch.optim.lr_scheduler import LRScheduler

    return [o for o in gc.get_objects()
            if isinstance(o, LRScheduler) and getattr(o, "optimizer", None) is optimizer]


def state_entries(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                  model_name: str = "model",
                  schedulers: list[Any] | None = None) -> dict[str, dict[str, Any]]:
    """Logical name -> digest entry for the state one optimizer step leaves behind."""
    entries: dict[str, dict[str, Any]] = {}
    named = [(f"{model_name}.{name}", p) for name, p in model.named_parameters()]
    names = {id(p): name for name, p in named}
    for name, param in named:
        entries[f"param.{name}"] = _tensor_entry(param)
        if param.grad is not None:
            entries[f"grad.{name}"] = _tensor_entry(param.grad)
    for name, buffer in model.named_buffers():
        entries[f"buffer.{model_name}.{name}"] = _tensor_entry(buffer)
    for index, group in enumerate(optimizer.param_groups):
        entries[f"lr.{index}"] = _value_entry(float(group["lr"]))
        for position, param in enumerate(group["params"]):
            # A parameter the model does not name (an optimizer over extra tensors) gets a
            # positional name: stable across runs of the same code.
            pname = names.get(id(param), f"group{index}.{position}")
            for key, value in sorted(optimizer.state.get(param, {}).items()):
                if isinstance(value, torch.Tensor):
                    entries[f"optim.{pname}.{key}"] = _tensor_entry(value)
                elif isinstance(value, (int, float, bool)):
                    entries[f"optim.{pname}.{key}"] = _value_entry(value)
    for index, scheduler in enumerate(schedulers or []):
        # A scheduler's own counters (last_epoch, _step_count, base and last lrs): a resume
        # that forgets it restarts its schedule while the optimizer's lr looks right.
        for key, value in sorted(scheduler.state_dict().items()):
            if _plain(value):
                entries[f"sched.{index}.{key}"] = _value_entry(value)
    entries.update(rng_states())
    return dict(sorted(entries.items()))


def state_records(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                  meta_vars: dict[str, Any], *, pid: int, tid: int | None,
                  time_ns: int, schedulers: list[Any] | None = None) -> list[dict[str, Any]]:
    """The VAR trace records of one observation, in TrainCheck 0.2.0's record format."""
    return [{"var_name": f"{STATE_PREFIX}.{name}",
             "var_type": f"{VAR_TYPE}.{name.split('.', 1)[0]}",
             "process_id": pid, "thread_id": tid, "meta_vars": dict(meta_vars),
             "type": "state_change", "attributes": entry, "time": time_ns}
            for name, entry in state_entries(model, optimizer,
                                             schedulers=schedulers).items()]
