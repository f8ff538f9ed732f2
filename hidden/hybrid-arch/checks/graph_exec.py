# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""Run a ``torch.export`` archive's graph on the judge's side, from its JSON alone.

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

The mixer is the candidate's design, so the judge cannot re-implement the hybrid model's
forward from TASK.md. What it can do is run the candidate's *exported graph* itself: a
``torch.export.save`` archive holds the forward as a list of ATen operator calls (JSON,
``models/model.json``) and its weights as raw bytes (``data/weights``). This module reads both
with ``zipfile``/``json`` (never ``torch.export.load``, which unpickles), refuses anything but
functional ``torch.ops.aten`` operators (no mutation, no random draws, no custom or
higher-order ops, no symbolic shapes), and evaluates the graph with the judge's own tensors:
weights the judge chose (a run's sealed final state, a checkpoint, the archive's own), inputs
the judge generated, autograd on the judge's side. No candidate code runs here; the graph is
data, and every operator it names is torch's own.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from grading.errors import JudgeLimitation
from torch._export.serde.serialize import (
    _SERIALIZE_TO_TORCH_DTYPE,
    _SERIALIZE_TO_TORCH_LAYOUT,
    _SERIALIZE_TO_TORCH_MEMORY_FORMAT,
)

# The JSON of a program for these models is a few hundred KB; weights a few hundred KB.
MAX_JSON_BYTES = 64 * 1024 * 1024
MAX_WEIGHT_BYTES = 64 * 1024 * 1024
MAX_NODES = 20_000
ATEN = "torch.ops.aten."


class GraphRefused(AssertionError):
    """The archive cannot be run by the judge (an operator or a form it does not accept)."""


def _member(zf: zipfile.ZipFile, suffix: str, cap: int) -> bytes:
    hits = [info for info in zf.infolist() if info.filename.endswith(suffix)]
    if len(hits) != 1:
        raise GraphRefused(f"{len(hits)} members named *{suffix} in the archive (want 1)")
    if hits[0].file_size > cap:
        raise GraphRefused(f"{hits[0].filename} is {hits[0].file_size} bytes (cap {cap})")
    return zf.read(hits[0])


def _resolve(target: Any) -> torch._ops.OpOverload:
    if not isinstance(target, str) or not target.startswith(ATEN):
        raise GraphRefused(f"operator {target!r} is not an ATen operator")
    parts = target[len(ATEN):].split(".")
    if len(parts) != 2 or not all(p.isidentifier() for p in parts):
        raise GraphRefused(f"operator {target!r} is not of the form aten.<name>.<overload>")
    try:
        op = getattr(getattr(torch.ops.aten, parts[0]), parts[1])
    except (AttributeError, RuntimeError) as exc:
        raise GraphRefused(f"operator {target!r} does not exist: {exc}") from None
    if not isinstance(op, torch._ops.OpOverload):
        raise GraphRefused(f"{target!r} is not an operator overload")
    if op._schema.is_mutable:
        raise GraphRefused(f"operator {target!r} mutates its inputs")
    return op


# Operators that reach outside the graph (files, stdout); ATen does not mark them mutable.
REFUSED_OPS = frozenset({"aten::save", "aten::from_file", "aten::_print"})
# String arguments that are enum-like options (gelu's approximate="tanh", a conv's
# padding="same", an FFT's norm); any other string could be a path.
STRING_ARGUMENTS = frozenset({"approximate", "rounding_mode", "reduce", "reduction", "mode",
                              "padding", "padding_mode", "equation", "indexing", "side",
                              "interpolation", "norm", "compute_mode"})


def _copy(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """``aten.copy`` (the functional form export gives an in-place slice write): ``self``'s
    shape and dtype holding ``src``'s values. ATen has no derivative for it, and the judge takes
    gradients through the graph, so it runs as this equivalent, whose gradient reaches ``src``
    (``self``'s old values are overwritten: none reaches it)."""
    return src.to(dtype=self.dtype, device=self.device).expand(self.shape).clone()


# Functional operators ATen cannot differentiate, run as equivalents with the same values.
DIFFERENTIABLE = {"aten::copy": _copy}
# The node ATen's autograd records for an operator that has no derivative.
NO_DERIVATIVE = "torch::autograd::NotImplemented"


class _Undifferentiable(torch.autograd.Function):
    """Identity on an operator's output that has no derivative the judge can take.

    A gradient reaching it is decided before it reaches ATen's own error. For an operator
    the task's contract allows, the gap is the judge's: JudgeLimitation, which must not read
    as the submission's fail (the aten.copy case: eight training checks failed a submission
    whose training was the reference's). For one the contract does not allow, the gap is the
    submission's export: the check fails (GraphRefused). Otherwise one harmless-looking
    operator (``h + heaviside(h, h) * 0``) would turn every failing check of a submission
    into the judge's defect.
    """

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor, operator: str,
                within_contract: bool) -> torch.Tensor:
        ctx.operator, ctx.within_contract = operator, within_contract
        return value.view_as(value)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        if not ctx.within_contract:
            raise GraphRefused(f"the exported graph's {ctx.operator} has no derivative, and "
                               f"the task's operator allow-list does not include it")
        raise JudgeLimitation(f"the judge runs {ctx.operator} but cannot differentiate it "
                              f"(ATen has no derivative for it and the judge no equivalent "
                              f"in graph_exec.DIFFERENTIABLE)")


def _guard_derivatives(result: Any, operator: str, within_contract: bool) -> Any:
    if isinstance(result, torch.Tensor):
        if result.grad_fn is not None and result.grad_fn.name() == NO_DERIVATIVE:
            return _Undifferentiable.apply(result, operator, within_contract)
        return result
    if isinstance(result, (tuple, list)):
        return type(result)(tuple(_guard_derivatives(item, operator, within_contract)
                                  for item in result))
    return result


def _check_node(node: Mapping[str, Any], op: torch._ops.OpOverload) -> None:
    """Operators with effects outside the graph and string arguments that are not options are
    refused; random draws too, attention's optional dropout only when it is off."""
    if op.name() in REFUSED_OPS:
        raise GraphRefused(f"operator {node['target']!r} is not run by the judge")
    # By the operator's schema, not the node's argument names (which the file could misname).
    for arg in op._schema.arguments:
        if "str" in str(arg.type) and arg.name not in STRING_ARGUMENTS:
            raise GraphRefused(f"operator {node['target']!r} takes a string as {arg.name!r}")
    if torch.Tag.nondeterministic_seeded not in op.tags:
        return
    dropout = [item["arg"] for item in node["inputs"] if item.get("name") == "dropout_p"]
    if op.name() == "aten::scaled_dot_product_attention" and all(
            arg.get("as_float", arg.get("as_int")) == 0 for arg in dropout):
        return
    raise GraphRefused(f"operator {node['target']!r} draws random numbers")


def _tensor_meta(meta: Mapping[str, Any]) -> tuple[torch.dtype, list[int], list[int], int]:
    dtype = _SERIALIZE_TO_TORCH_DTYPE.get(meta.get("dtype"))
    if dtype is None or dtype.is_complex:
        raise GraphRefused(f"weight dtype {meta.get('dtype')!r} not accepted")
    if meta.get("layout", 7) != 7:
        raise GraphRefused("a weight is not a strided tensor")

    def ints(items: Any) -> list[int]:
        out = []
        for item in items:
            if not isinstance(item, dict) or type(item.get("as_int")) is not int:
                raise GraphRefused(f"a weight has a symbolic size or stride ({item!r})")
            out.append(item["as_int"])
        return out

    offset = meta.get("storage_offset", {"as_int": 0})
    return dtype, ints(meta["sizes"]), ints(meta["strides"]), ints([offset])[0]


@dataclass
class Program:
    """One exported forward: ``tokens -> logits``, run by :meth:`__call__`."""

    nodes: list[dict[str, Any]]
    inputs: list[tuple[str, str, str | None]]  # (kind, placeholder, state-dict key or None)
    output: str
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    ops: list[torch._ops.OpOverload] = field(default_factory=list)
    # The operators the task's contract allows, as "aten.<name>.<overload>" (its allow-list).
    contract_ops: frozenset[str] = frozenset()

    @property
    def parameter_keys(self) -> list[str]:
        return [key for kind, _, key in self.inputs if kind == "parameter" and key is not None]

    @property
    def state_keys(self) -> list[str]:
        """The state-dict keys the program takes (parameters and persistent buffers)."""
        return [key for kind, _, key in self.inputs if kind in ("parameter", "buffer")
                and key is not None]

    def __call__(self, state: Mapping[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
        """The graph's output for ``tokens`` with parameters and buffers from ``state`` (the
        judge's tensors; autograd flows through them), constants from the archive."""
        env: dict[str, Any] = {}
        for kind, name, key in self.inputs:
            if kind == "user_input":
                env[name] = tokens
            elif kind in ("parameter", "buffer"):
                assert key is not None
                if key not in state:
                    raise GraphRefused(f"no value for the program's {kind} {key!r}")
                env[name] = state[key]
            else:  # a non-persistent buffer (the caller's or the archive's) or a constant
                assert key is not None
                value = state.get(key) if kind == "buffer_np" else None
                env[name] = self.weights[key] if value is None else value
        for node, op in zip(self.nodes, self.ops, strict=True):
            args, kwargs = [], {}
            for item in node["inputs"]:
                value = _argument(item["arg"], env)
                if item.get("kind", 1) == 2:
                    kwargs[item["name"]] = value
                else:
                    args.append(value)
            result = DIFFERENTIABLE.get(op.name(), op)(*args, **kwargs)
            allowed = node["target"].removeprefix("torch.ops.") in self.contract_ops
            _bind(node["outputs"], _guard_derivatives(result, op.name(), allowed), env)
        out = env[self.output]
        if type(out) is not torch.Tensor:
            raise GraphRefused("the program's output is not a tensor")
        return out


def _argument(arg: Mapping[str, Any], env: Mapping[str, Any]) -> Any:
    if len(arg) != 1:
        raise GraphRefused(f"malformed argument {arg!r}")
    (kind, value), = arg.items()

    def tensor(ref: Any) -> torch.Tensor:
        if not isinstance(ref, dict) or ref.get("name") not in env:
            raise GraphRefused(f"argument refers to an unknown value {ref!r}")
        return env[ref["name"]]

    if kind == "as_none":
        return None
    if kind == "as_tensor":
        return tensor(value)
    if kind == "as_tensors":
        return [tensor(v) for v in value]
    if kind == "as_optional_tensors":
        return [None if "as_none" in v else tensor(v["as_tensor"]) for v in value]
    if kind == "as_optional_tensor":
        return None if "as_none" in value else tensor(value["as_tensor"])
    if kind in ("as_int", "as_bool") and type(value) in (int, bool):
        return value
    if kind in ("as_ints", "as_bools") and all(type(v) in (int, bool) for v in value):
        return list(value)
    if kind == "as_float" and isinstance(value, int | float):
        return float(value)
    if kind == "as_floats" and all(isinstance(v, int | float) for v in value):
        return [float(v) for v in value]
    if kind == "as_string" and isinstance(value, str):
        return value
    if kind == "as_scalar_type" and value in _SERIALIZE_TO_TORCH_DTYPE:
        return _SERIALIZE_TO_TORCH_DTYPE[value]
    if kind == "as_memory_format" and value in _SERIALIZE_TO_TORCH_MEMORY_FORMAT:
        return _SERIALIZE_TO_TORCH_MEMORY_FORMAT[value]
    if kind == "as_layout" and value in _SERIALIZE_TO_TORCH_LAYOUT:
        return _SERIALIZE_TO_TORCH_LAYOUT[value]
    if kind == "as_device" and isinstance(value, dict) and value.get("type") == "cpu":
        return torch.device("cpu")
    raise GraphRefused(f"argument kind {kind} ({value!r:.80}) is not accepted")


def _bind(outputs: list[Any], result: Any, env: dict[str, Any]) -> None:
    if len(outputs) == 1 and "as_tensor" in outputs[0]:
        env[outputs[0]["as_tensor"]["name"]] = result
        return
    if len(outputs) == 1 and "as_tensors" in outputs[0]:
        for ref, value in zip(outputs[0]["as_tensors"], result, strict=True):
            env[ref["name"]] = value
        return
    if not isinstance(result, tuple | list) or len(result) != len(outputs):
        raise GraphRefused(f"cannot bind outputs {outputs!r:.120}")
    for ref, value in zip(outputs, result, strict=True):
        if "as_tensor" in ref:
            env[ref["as_tensor"]["name"]] = value
        elif "as_none" not in ref:
            raise GraphRefused(f"output kind {list(ref)} is not accepted")


def _raw_weights(zf: zipfile.ZipFile, config_suffix: str, folder: str) -> dict[str, torch.Tensor]:
    config = json.loads(_member(zf, config_suffix, MAX_JSON_BYTES))["config"]
    out = {}
    for key, entry in config.items():
        if entry.get("use_pickle", False):
            raise GraphRefused(f"{key!r} is stored as a pickle")
        dtype, sizes, strides, offset = _tensor_meta(entry["tensor_meta"])
        raw = _member(zf, f"/{folder}/{entry['path_name']}", MAX_WEIGHT_BYTES)
        flat = torch.frombuffer(bytearray(raw), dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        out[key] = flat.as_strided(sizes, strides, offset).clone()
    return out


def load(path: Path, contract_ops: frozenset[str]) -> Program:
    """The program in a ``torch.export.save`` archive, checked and ready for the judge to run.

    ``contract_ops`` is the task's operator allow-list: it decides whose gap an operator
    without a derivative is (see ``_Undifferentiable``); the judge still runs the others, so
    a training check can judge training apart from the export's own contract."""
    with zipfile.ZipFile(path) as zf:
        model = json.loads(_member(zf, "/models/model.json", MAX_JSON_BYTES))
        weights = _raw_weights(zf, "/data/weights/model_weights_config.json", "data/weights")
        constants = _raw_weights(zf, "/data/constants/model_constants_config.json",
                                 "data/constants")
    gm = model["graph_module"]
    graph, signature = gm["graph"], gm["signature"]
    inputs: list[tuple[str, str, str | None]] = []
    for spec in signature["input_specs"]:
        (kind, body), = spec.items()
        name = body["arg"].get("name")
        if kind == "user_input":
            name = body["arg"].get("as_tensor", {}).get("name")
            inputs.append((kind, name, None))
        elif kind == "parameter":
            inputs.append((kind, name, body["parameter_name"]))
        elif kind == "buffer":
            key = body["buffer_name"]
            persistent = body.get("persistent", True)
            if not persistent and key not in constants and key not in weights:
                raise GraphRefused(f"non-persistent buffer {key!r} is not in the archive")
            inputs.append(("buffer" if persistent else "buffer_np", name, key))
        elif kind == "tensor_constant":
            key = body["tensor_constant_name"]
            if key not in constants:
                raise GraphRefused(f"tensor constant {key!r} is not in the archive")
            inputs.append((kind, name, key))
        else:
            raise GraphRefused(f"input kind {kind} is not accepted")
    if [k for k, _, _ in inputs].count("user_input") != 1:
        raise GraphRefused("the program does not take exactly one input (the tokens)")
    outputs = signature["output_specs"]
    if len(outputs) != 1 or "user_output" not in outputs[0]:
        raise GraphRefused(f"the program's outputs are {[list(o) for o in outputs]}")
    out_name = outputs[0]["user_output"]["arg"].get("as_tensor", {}).get("name")
    nodes = graph["nodes"]
    if len(nodes) > MAX_NODES:
        raise GraphRefused(f"{len(nodes)} nodes")
    ops = [_resolve(node["target"]) for node in nodes]
    for node, op in zip(nodes, ops, strict=True):
        _check_node(node, op)
    program = Program(nodes=nodes, inputs=inputs, output=out_name, ops=ops,
                      contract_ops=contract_ops)
    program.weights = {**weights, **constants}
    return program


def archive_state(program: Program) -> dict[str, torch.Tensor]:
    """The archive's own parameters and buffers, by state-dict key."""
    return {k: program.weights[k] for k in program.state_keys}
