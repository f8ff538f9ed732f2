"""What a trace folder actually recorded, per observation kind.

The capability matrix is decided from this, i.e. from trace content, not from TrainCheck's
documentation: each kind is ``observed``, ``partly`` or ``not`` with the evidence that
decided it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from diagnostics.traces import records, trace_files

_OPTIMIZER_STATE_KEYS = ("exp_avg", "exp_avg_sq", "momentum_buffer", "state_dict")


_SAVE_FUNCTIONS = frozenset({"torch.save", "torch.serialization.save",
                             "torch.distributed.checkpoint.save",
                             "torch.distributed.checkpoint.state_dict_saver.save",
                             "torch.export.save"})


def _tensor_dicts(value: Any) -> list[dict[str, Any]]:
    """Tensor records inside an API return value: {"torch.FloatTensor": {...}, ...}."""
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if key.startswith("torch.") and key.endswith("Tensor") and isinstance(inner, dict):
                found.append(inner)
            else:
                found.extend(_tensor_dicts(inner))
    elif isinstance(value, list):
        for item in value:
            found.extend(_tensor_dicts(item))
    return found


def _kind(status: str, evidence: str) -> dict[str, str]:
    return {"status": status, "evidence": evidence}


def inspect_trace(trace_dir: Path) -> dict[str, Any]:
    api_records = 0
    api_functions: set[str] = set()
    api_with_rank = 0
    distributed_calls: set[str] = set()
    optimizer_calls: set[str] = set()
    forward_outputs = forward_output_values = 0
    save_calls = 0
    for path in trace_files(trace_dir, "API"):
        for rec in records(path):
            api_records += 1
            function = rec.get("function")
            if isinstance(function, str):
                api_functions.add(function)
                if function.startswith("torch.distributed"):
                    distributed_calls.add(function)
                if function.startswith("torch.optim"):
                    optimizer_calls.add(function)
                if function.endswith(".forward") and rec.get("type") == "function_call (post)":
                    tensors = _tensor_dicts(rec.get("return_values"))
                    forward_outputs += bool(tensors)
                    forward_output_values += any("data" in t for t in tensors)
                if function in _SAVE_FUNCTIONS:
                    save_calls += 1
            if isinstance((rec.get("meta_vars") or {}).get("rank"), int):
                api_with_rank += 1

    var_records = 0
    names_by_rank: dict[int, set[str]] = {}
    steps_by_rank: dict[int, set[int]] = {}
    types: set[str] = set()
    data_repr: set[str] = set()
    grads_present = 0
    shard_mismatch = 0
    optimizer_state_seen = False
    var_with_rank = 0
    hashes: dict[tuple[str, Any], dict[int, Any]] = {}
    for path in trace_files(trace_dir, "VAR"):
        for rec in records(path):
            var_records += 1
            meta = rec.get("meta_vars") or {}
            rank = meta.get("rank")
            if isinstance(rank, int):
                var_with_rank += 1
                names_by_rank.setdefault(rank, set()).add(str(rec.get("var_name")))
                if isinstance(meta.get("step"), int):
                    steps_by_rank.setdefault(rank, set()).add(meta["step"])
            types.add(str(rec.get("var_type")))
            attrs = rec.get("attributes") or {}
            if isinstance(rank, int):
                hashes.setdefault((str(rec.get("var_name")), meta.get("step")), {})[rank] = (
                    attrs.get("data"))
            data_repr.add(type(attrs.get("data")).__name__)
            if attrs.get("grad") is not None:
                grads_present += 1
            shape, nbytes, itemsize = attrs.get("shape"), attrs.get("nbytes"), attrs.get("itemsize")
            if isinstance(shape, list) and isinstance(nbytes, int) and isinstance(itemsize, int):
                if math.prod(shape) * itemsize != nbytes:
                    shard_mismatch += 1
            if any(key in attrs for key in _OPTIMIZER_STATE_KEYS):
                optimizer_state_seen = True

    compared = [h for h in hashes.values() if len(h) > 1]
    equal = sum(1 for h in compared if len(set(h.values())) == 1)
    # fully_shard itself is not traced by TrainCheck 0.2.0; its collectives are.
    sharded = any("reduce_scatter" in f for f in api_functions)
    kinds: dict[str, dict[str, str]] = {}
    kinds["api_events"] = (
        _kind("observed", f"{api_records} API records, {len(api_functions)} distinct "
              f"functions, {len(distributed_calls)} torch.distributed functions")
        if api_records else _kind("not", "no API records"))
    if not var_records:
        kinds["model_parameters"] = _kind("not", "no VAR records")
    elif sharded and compared and equal < len(compared):
        kinds["model_parameters"] = _kind(
            "partly", f"{var_records} parameter records with the global shape, but the value "
            f"hash differs across ranks for {len(compared) - equal}/{len(compared)} "
            "(parameter, step) pairs while gradients are reduce-scattered (sharded training): each "
            "rank hashes its local shard")
    elif shard_mismatch:
        kinds["model_parameters"] = _kind(
            "partly", f"{var_records} parameter records, but {shard_mismatch} report a global "
            "shape whose size does not match the bytes hashed (local shard only)")
    else:
        kinds["model_parameters"] = _kind(
            "observed", f"{var_records} parameter records after every optimizer step")
    kinds["gradients"] = (
        _kind("observed" if kinds["model_parameters"]["status"] == "observed" else "partly",
              f"{grads_present}/{var_records} parameter records carry a grad value"
              + ("" if kinds["model_parameters"]["status"] == "observed"
                 else "; hashed like the parameters (local shard)"))
        if grads_present else _kind("not", "no record carries a grad value"))
    kinds["optimizer_state"] = (
        _kind("observed", "optimizer state keys in variable records") if optimizer_state_seen
        else _kind("not", f"no optimizer state in any variable record (variable types: "
                   f"{sorted(types) or 'none'}); only {len(optimizer_calls)} torch.optim API "
                   "calls are seen"))
    reprs = sorted(data_repr - {"NoneType"})
    kinds["tensor_representation"] = (
        _kind("partly", "tensor values recorded as one 64-bit hash per tensor "
              f"(data is {reprs}); values and differences are not recoverable")
        if reprs == ["int"] else
        _kind("observed", f"tensor data recorded as {reprs}") if reprs else
        _kind("not", "no tensor data recorded"))
    if not forward_outputs:
        kinds["module_outputs"] = _kind("not", "no module forward returned a recorded tensor")
    elif forward_output_values:
        kinds["module_outputs"] = _kind("observed", f"{forward_output_values} forward outputs "
                                        "carry a value hash")
    else:
        kinds["module_outputs"] = _kind(
            "partly", f"{forward_outputs} module forward outputs recorded with shape and dtype "
            "only, no values")
    wrappers = sorted(f for f in api_functions
                      if f.endswith("DistributedDataParallel.__init__") or "fully_shard" in f)
    if wrappers:
        kinds["parallel_wrapping"] = _kind("observed", f"wrapping calls traced: {wrappers}")
    elif sharded:
        kinds["parallel_wrapping"] = _kind(
            "not", "sharded training (reduce_scatter traced) but no fully_shard call in the "
            "trace: which modules were wrapped is not recorded")
    else:
        kinds["parallel_wrapping"] = _kind("not", "no data-parallel wrapping call in the trace")
    kinds["file_contents"] = _kind(
        "not", f"{save_calls} save calls recorded as API events with argument metadata; no "
        "record holds what a checkpoint or export file contains")
    multi_step = {r: len(s) for r, s in steps_by_rank.items()}
    kinds["step_identity"] = (
        _kind("observed", f"meta_vars.step on variable records, distinct steps per rank "
              f"{multi_step} (set by the harness's entry; TrainCheck counts steps only in "
              "loops of the main script)")
        if multi_step and min(multi_step.values()) > 1 else
        _kind("not", "no step values on variable records"))
    total = api_records + var_records
    tagged = api_with_rank + var_with_rank
    kinds["rank_identity"] = (
        _kind("observed" if tagged == total else "partly",
              f"{tagged}/{total} records carry meta_vars.rank (set by the harness's entry; "
              f"TrainCheck records pid and thread only); ranks {sorted(names_by_rank)}")
        if tagged else _kind("not", "no record carries a rank"))
    names = {r: sorted(n) for r, n in names_by_rank.items()}
    return {"trace_dir": str(trace_dir), "kinds": kinds, "api_records": api_records,
            "var_records": var_records, "parameter_names": names,
            "names_equal_across_ranks": len({tuple(n) for n in names.values()}) <= 1,
            "cross_rank_equal_pairs": [equal, len(compared)]}
