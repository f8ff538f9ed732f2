"""Candidate side of the hybrid-arch checks: drive ``hybridlm``'s API, return raw observations.

Each function runs in a fresh process as the candidate uid, on the graded tree, through
``grading.probe``; its result (numbers, strings, lists, tensors) goes back to the checks as
data. This file is readable by candidate code at grading time, so it holds no expected value,
no tolerance and no canary: every comparison is made by the checks (the judge).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F


def _model_module() -> ModuleType:
    torch.set_num_threads(1)
    return importlib.import_module("hybridlm.model")


def _tensor(value: Any) -> torch.Tensor:
    """A plain, detached copy of a tensor the candidate returned (raises on anything else)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"the model returned {type(value).__name__}, not a tensor")
    return value.detach().as_subclass(torch.Tensor).clone()


def _scaled_model(m: ModuleType, pattern: str, dtype: str, std: float, seed: int,
                  sizes: dict[str, int] | None = None) -> Any:
    """The candidate's model for ``pattern`` in ``dtype``, in eval mode, every parameter redrawn
    from N(0, std) after ``torch.manual_seed(seed)``; ``sizes``: other ``ModelArgs`` fields
    (``dim``, ``n_heads``, ``vocab_size``, ...)."""
    torch.manual_seed(seed)
    model = m.Transformer(m.ModelArgs(n_layers=len(pattern), layer_pattern=pattern,
                                      **(sizes or {})))
    model = model.to(getattr(torch, dtype)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=std)
    return model


def _keys(model: Any) -> list[str]:
    """A model's state-dict keys (``repr`` of any that is not a string)."""
    return [k if type(k) is str else repr(k) for k in model.state_dict()]


def _raised(fn: Any) -> list[str] | None:
    """The qualified class names (MRO, ``module.QualName``) of what ``fn()`` raises; None when
    it returns."""
    try:
        fn()
    except Exception as exc:  # the judge decides which exception is right
        return [f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__]
    return None


def _describe(value: Any) -> dict[str, Any]:
    """A value the candidate chose, as data: None-ness, its string value, its repr."""
    return {"is_none": value is None,
            "str": str.__str__(value) if isinstance(value, str) else None,
            "repr": repr(value)[:200]}


def pattern_parsing(good: list[str], short: str, bad: list[str], all_a: str,
                    schema: list[str], seed: int) -> dict[str, Any]:
    """What ``ModelArgs``/``Transformer`` do with layer patterns.

    - ``n_layers[p]``: ``ModelArgs(n_layers=4, layer_pattern=p).n_layers`` for ``good``;
    - ``short_n_layers``: the same for ``ModelArgs(n_layers=len(short), layer_pattern=short)``;
    - ``default_pattern``: ``ModelArgs().layer_pattern``;
    - ``bad[p]``: what ``ModelArgs(n_layers=4, layer_pattern=p)`` raises (MRO names) or None;
    - ``none_state``/``all_a_state``: the state dicts of ``Transformer(ModelArgs())`` and of
      ``Transformer(ModelArgs(layer_pattern=all_a))``, each after manual_seed(seed);
    - ``schema[p]``: for 4-layer models of ``schema`` patterns (after manual_seed(seed)), the
      state-dict keys and, for ``init_cache(2)``, its length and whether each entry is a
      ``KVCache``.
    """
    m = _model_module()
    out: dict[str, Any] = {
        "n_layers": {p: m.ModelArgs(n_layers=4, layer_pattern=p).n_layers for p in good},
        "short_n_layers": m.ModelArgs(n_layers=len(short), layer_pattern=short).n_layers,
    }
    default = m.ModelArgs()
    out["default_pattern"] = _describe(default.layer_pattern)
    out["bad"] = {p: _raised(lambda p=p: m.ModelArgs(n_layers=4, layer_pattern=p)) for p in bad}

    torch.manual_seed(seed)
    none_sd = m.Transformer(m.ModelArgs()).state_dict()
    torch.manual_seed(seed)
    all_a_sd = m.Transformer(m.ModelArgs(layer_pattern=all_a)).state_dict()
    out["none_state"] = {k: _tensor(v) for k, v in none_sd.items()}
    out["all_a_state"] = {k: _tensor(v) for k, v in all_a_sd.items()}

    out["schema"] = {}
    for pattern in schema:
        torch.manual_seed(seed)
        model = m.Transformer(m.ModelArgs(n_layers=4, layer_pattern=pattern))
        cache = model.init_cache(2)
        entries = list(cache)
        out["schema"][pattern] = {
            "keys": list(model.state_dict()),
            "cache_len": len(cache),
            "cache_is_kv": [isinstance(e, m.KVCache) for e in entries],
            "cache_types": [type(e).__name__ for e in entries],
        }
    return out


def prefix_logits(pattern: str, dtype: str, std: float, seed: int,
                  tokens: torch.Tensor, sizes: dict[str, int] | None = None) -> dict[str, Any]:
    """Under no_grad: the full forward's logits, and for every position t the logits at t of a
    forward over the prefix ``tokens[:, :t + 1]`` alone; the model's state-dict keys.
    ``sizes``: other ``ModelArgs`` fields."""
    m = _model_module()
    model = _scaled_model(m, pattern, dtype, std, seed, sizes)
    with torch.no_grad():
        full = _tensor(model(tokens))
        prefix = [_tensor(model(tokens[:, :t + 1])[:, t]) for t in range(tokens.shape[1])]
    return {"full": full, "prefix": prefix, "keys": _keys(model)}


def perturbed_logits(pattern: str, dtype: str, std: float, seed: int, x: torch.Tensor,
                     y: torch.Tensor) -> dict[str, Any]:
    """Under no_grad: the logits of the same model for two token batches; its state-dict
    keys."""
    m = _model_module()
    model = _scaled_model(m, pattern, dtype, std, seed)
    with torch.no_grad():
        return {"x": _tensor(model(x)), "y": _tensor(model(y)), "keys": _keys(model)}


def lm_gradients(pattern: str, std: float, seed: int, batch: torch.Tensor) -> dict[str, Any]:
    """Gradients of the next-token cross-entropy of ``batch`` for a train-mode fp64 model
    (built after manual_seed(seed), parameters redrawn from N(0, std)): per parameter name,
    whether it requires grad and its ``.grad`` (None when it has none); the state-dict keys."""
    m = _model_module()
    torch.manual_seed(seed)
    model = m.Transformer(m.ModelArgs(n_layers=len(pattern), layer_pattern=pattern)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=std)
    logits = model(batch[:, :-1])
    F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).backward()
    params = dict(model.named_parameters())
    return {"requires_grad": {n: bool(p.requires_grad) for n, p in params.items()},
            "grad": {n: None if p.grad is None else _tensor(p.grad) for n, p in params.items()},
            "keys": _keys(model)}


def cached_decoding(patterns: list[str], dtypes: list[str], std: float, seed: int,
                    tokens: torch.Tensor, chunks: list[int], schedule: list[int],
                    sizes: dict[str, int] | None = None) -> dict[str, Any]:
    """Under no_grad, per ``pattern-dtype``: the full forward's logits; ``decode_logits`` with
    each chunk size (``chunk<c>``); and ``irregular``, the outputs of forwards over the
    consecutive slices of ``schedule`` through one ``init_cache`` (``start_pos`` set),
    concatenated along the sequence. ``keys[pattern]``: the model's state-dict keys.
    ``sizes``: other ``ModelArgs`` fields."""
    m = _model_module()
    out: dict[str, Any] = {"keys": {}}
    for pattern in patterns:
        for dtype in dtypes:
            model = _scaled_model(m, pattern, dtype, std, seed, sizes)
            out["keys"][pattern] = _keys(model)
            with torch.no_grad():
                got = {"full": _tensor(model(tokens))}
                for c in chunks:
                    got[f"chunk{c}"] = _tensor(m.decode_logits(model, tokens, chunk=c))
                cache = model.init_cache(tokens.shape[0])
                outs, start = [], 0
                for size in schedule:
                    outs.append(model(tokens[:, start:start + size], cache=cache,
                                      start_pos=start))
                    start += size
                got["irregular"] = _tensor(torch.cat(outs, dim=1))
            out[f"{pattern}-{dtype}"] = got
    return out


def export_programs(patterns: list[str], dtype: str, std: float, seed: int,
                    tokens: torch.Tensor, out_dir: str) -> dict[str, Any]:
    """Per pattern: ``hybridlm.export.export_model`` of the scaled model, saved with
    ``torch.export.save`` to ``out_dir/program-<pattern>.pt2`` (the judge reads the file);
    what the candidate's ``exported_ops`` says; under no_grad, the exported program's and the
    eager model's logits for ``tokens``; the eager model's state-dict keys."""
    m = _model_module()
    ex = importlib.import_module("hybridlm.export")
    out: dict[str, Any] = {}
    for pattern in patterns:
        model = _scaled_model(m, pattern, dtype, std, seed)
        program = ex.export_model(model)
        ops = [o if type(o) is str else repr(o) for o in ex.exported_ops(program)]
        path = Path(out_dir) / f"program-{pattern}.pt2"
        torch.export.save(program, str(path))
        with torch.no_grad():
            exported = _tensor(program.module()(tokens))
            eager = _tensor(model(tokens))
        out[pattern] = {"ops": ops, "exported": exported, "eager": eager,
                        "model_keys": list(model.state_dict())}
    return out


def seeded_programs(models: list[dict[str, Any]], seed: int, out_dir: str) -> list[str]:
    """Per entry ``{"pattern", "dtype", "batch", "name"}`` (and optionally ``"sizes"``, more
    ``ModelArgs`` fields): the model ``train`` starts from (``torch.manual_seed(seed)``,
    ``Transformer(ModelArgs(n_layers=len(pattern), layer_pattern=pattern, **sizes))``, cast to
    ``dtype``, train mode), exported with
    ``torch.export.export`` (functionalized when it keeps in-place operators) for token
    batches of ``batch`` x ``max_seq_len`` and saved with
    ``torch.export.save`` to ``out_dir/<name>.pt2`` (the judge reads the graph and the weights
    from the file). Returns the names written."""
    m = _model_module()
    written = []
    for entry in models:
        pattern = entry["pattern"]
        torch.manual_seed(seed)
        sizes = entry.get("sizes", {})
        model = m.Transformer(m.ModelArgs(n_layers=len(pattern), layer_pattern=pattern, **sizes))
        model = model.to(getattr(torch, entry["dtype"])).train()
        example = torch.zeros(entry["batch"], model.args.max_seq_len, dtype=torch.long)
        program = torch.export.export(model, (example,))
        if any(isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
               for n in program.graph.nodes if n.op == "call_function"):
            # In-place operators stay in export's training IR; the judge runs functional
            # graphs only, so such a model is handed over functionalized (nothing decomposed).
            program = program.run_decompositions({})
        torch.export.save(program, str(Path(out_dir) / f"{entry['name']}.pt2"))
        written.append(entry["name"])
    return written


def checkpoint_contents(path: str, out: str) -> None:
    """A DCP checkpoint as one ``torch.save`` file at ``out`` (``dcp_to_torch_save``): its
    metadata is a pickle the candidate's run wrote, so it is read here, in the candidate's
    process; the judge loads the result with ``weights_only=True``."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(path, out)


def load_default_model_state(state: dict[str, torch.Tensor]) -> None:
    """``Transformer(ModelArgs()).load_state_dict(state, strict=True)``; whatever it raises
    goes back to the judge."""
    m = _model_module()
    model = m.Transformer(m.ModelArgs())
    model.load_state_dict(state, strict=True)


def _tensors_in(value: Any, depth: int = 0) -> list[torch.Tensor]:
    """Every tensor a decoding-state entry holds (itself, or its fields, items or elements, a
    few levels deep), in a fixed order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if depth > 3:
        return []
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, list | tuple):
        items = list(value)
    elif hasattr(value, "__dict__"):
        items = list(vars(value).values())
    else:
        return []
    return [t for item in items for t in _tensors_in(item, depth + 1)]


def _placed(value: Any) -> dict[str, Any]:
    """A tensor the candidate's code produced: its device and dtype, and (only when it is a CPU
    tensor) a plain copy of its values."""
    if not isinstance(value, torch.Tensor):
        return {"device": None, "dtype": None, "value": None, "type": type(value).__name__}
    cpu = value.device.type == "cpu"
    return {"device": str(value.device), "dtype": str(value.dtype).removeprefix("torch."),
            "value": _tensor(value) if cpu else None, "type": "Tensor"}


class _UnplacedToMeta(torch.overrides.TorchFunctionMode):
    """Every tensor factory called without ``device=`` (``torch.zeros``, ``torch.arange``,
    ``torch.ones``, ``torch.tensor``, ...) builds its tensor on the ``meta`` device instead of
    the CPU, as a device-less factory builds it on the CPU while the model lives on a GPU. A
    0-dim result stays on the CPU (a CPU scalar tensor mixes with GPU tensors, so it is no
    placement error there either), and so does a tensor made from another tensor
    (``torch.tensor(t)`` keeps ``t``'s device). Everything else (``*_like``, ``new_*``, the
    parameters, the inputs) keeps its device, so an operation mixing a redirected tensor with
    the model's raises, as it would on a GPU."""

    def __init__(self) -> None:
        super().__init__()
        from torch.utils._device import _device_constructors

        self.factories = _device_constructors()

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        takes_data = name in ("tensor", "as_tensor", "asarray") or name.startswith("sparse_")
        from_tensor = takes_data and (any(isinstance(a, torch.Tensor) for a in args)
                                      or isinstance(kwargs.get("data"), torch.Tensor))
        if func in self.factories and kwargs.get("device") is None and not from_tensor:
            result = func(*args, **kwargs)
            if isinstance(result, torch.Tensor) and result.dim() > 0:
                return result.to("meta")
            return result
        return func(*args, **kwargs)


def _placement_run(m: ModuleType, model: Any, tokens: torch.Tensor, batch: torch.Tensor,
                   chunk: int, meta: bool) -> dict[str, Any]:
    mode = _UnplacedToMeta() if meta else contextlib.nullcontext()
    with mode:
        return _placement_observations(m, model, tokens, batch, chunk)


def _placement_observations(m: ModuleType, model: Any, tokens: torch.Tensor,
                            batch: torch.Tensor, chunk: int) -> dict[str, Any]:
    try:
        model.eval()
        with torch.no_grad():
            full = model(tokens)
            decoded = m.decode_logits(model, tokens, chunk=chunk)
            cache = model.init_cache(tokens.shape[0])
            cache_tensors = [_placed(t) for entry in cache for t in _tensors_in(entry)]
        model.train()
        model.zero_grad(set_to_none=True)
        logits = model(batch[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).backward()
        grads = {n: _placed(p.grad) for n, p in model.named_parameters()}
    finally:
        model.eval()
    out = {"full": _placed(full), "decoded": _placed(decoded), "logits": _placed(logits),
           "grads": grads, "cache": [{k: v for k, v in c.items() if k != "value"}
                                     for c in cache_tensors]}
    model.zero_grad(set_to_none=True)
    return out


def placement_runs(patterns: list[str], std: float, seed: int, tokens: torch.Tensor,
                   batch: torch.Tensor, chunk: int) -> dict[str, Any]:
    """Per pattern, the fp64 scaled model (CPU parameters; the token inputs are CPU tensors) run
    twice with the same weights: as is (``plain``), and under :class:`_UnplacedToMeta`
    (``meta``), where every tensor the model creates with a factory and no ``device=`` (0-dim
    ones excepted) lands on the meta device; then a copy moved as a whole with
    ``.to("meta")`` and run on meta inputs (``moved``), as ``.to("cuda")`` and CUDA inputs
    would run it: whatever the module keeps outside its parameters and buffers stays behind on
    the CPU. Each run: the full forward of ``tokens`` and
    ``decode_logits(chunk)`` (eval mode, no_grad), the placement of every tensor of
    ``init_cache(batch)``, and the next-token cross-entropy gradients of a train-mode forward
    over ``batch``; every tensor as its device, dtype and (CPU tensors only) values. A run
    that raises gives ``error``. ``keys[pattern]``: the model's state-dict keys."""
    m = _model_module()
    out: dict[str, Any] = {"keys": {}}
    for pattern in patterns:
        model = _scaled_model(m, pattern, "float64", std, seed)
        out["keys"][pattern] = _keys(model)
        for mode in ("plain", "meta", "moved"):
            try:
                if mode == "moved":
                    moved = copy.deepcopy(model).to("meta")
                    out[f"{pattern}-{mode}"] = _placement_observations(
                        m, moved, tokens.to("meta"), batch.to("meta"), chunk)
                else:
                    out[f"{pattern}-{mode}"] = _placement_run(m, model, tokens, batch, chunk,
                                                              meta=mode == "meta")
            except Exception as exc:  # the judge fails the check with this text
                out[f"{pattern}-{mode}"] = {"error": f"{type(exc).__name__}: {exc}"[:1500]}
    return out


def _decode_chunks(model: Any, tokens: torch.Tensor, chunk: int, cache: Any) -> torch.Tensor:
    outs = []
    for start in range(0, tokens.shape[1], chunk):
        outs.append(model(tokens[:, start:start + chunk], cache=cache, start_pos=start))
    return torch.cat(outs, dim=1)


def cache_dtype_decoding(patterns: list[str], pairs: list[list[str]], std: float, seed: int,
                         tokens: torch.Tensor, chunk: int) -> dict[str, Any]:
    """Under no_grad, per pattern and ``[model dtype, cache dtype]`` pair: the scaled model in
    the model dtype decoded in chunks of ``chunk`` (forwards with ``start_pos``) through its
    default ``init_cache(batch)`` (``default``) and through ``init_cache(batch,
    dtype=cache dtype)`` (``explicit``); the logits of both, and the dtype of every tensor of the
    explicit cache right after ``init_cache`` (``before``) and after decoding (``after``).
    A decoding that raises gives ``error``. ``keys[pattern]``: the model's state-dict keys."""
    m = _model_module()
    out: dict[str, Any] = {"keys": {}}
    for pattern in patterns:
        for model_dtype, cache_dtype in pairs:
            model = _scaled_model(m, pattern, model_dtype, std, seed)
            out["keys"][pattern] = _keys(model)
            label = f"{pattern}-{model_dtype}-{cache_dtype}"
            try:
                with torch.no_grad():
                    default = _decode_chunks(model, tokens, chunk,
                                             model.init_cache(tokens.shape[0]))
                    cache = model.init_cache(tokens.shape[0],
                                             dtype=getattr(torch, cache_dtype))
                    before = [str(t.dtype).removeprefix("torch.")
                              for e in cache for t in _tensors_in(e)]
                    explicit = _decode_chunks(model, tokens, chunk, cache)
                    after = [str(t.dtype).removeprefix("torch.")
                             for e in cache for t in _tensors_in(e)]
                out[label] = {"default": _tensor(default), "explicit": _tensor(explicit),
                              "before": before, "after": after}
            except Exception as exc:  # the judge fails the check with this text
                out[label] = {"error": f"{type(exc).__name__}: {exc}"[:1500]}
    return out


def block_io(pattern: str, layer: int, std: float, seed: int,
             tokens: torch.Tensor) -> dict[str, Any]:
    """The fp64 scaled model of ``pattern`` (eval, no_grad), its block ``model.layers[layer]``
    in a full forward of ``tokens``: the block's input and output, then its output again with
    ``layers.{layer}.feed_forward.w2.weight`` zeroed (``output_without_ffn``; ``no_ffn`` when the
    block has no such parameter), and the block's state before the zeroing."""
    m = _model_module()
    model = _scaled_model(m, pattern, "float64", std, seed)
    block = model.layers[layer]
    seen: dict[str, Any] = {}

    def hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        seen.setdefault("input", args[0] if args else kwargs.get("x"))
        seen["output"] = output[0] if isinstance(output, tuple) else output

    handle = block.register_forward_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            model(tokens)
            out: dict[str, Any] = {"keys": _keys(model), "input": _tensor(seen.get("input")),
                                   "output": _tensor(seen.get("output"))}
            prefix = f"layers.{layer}."
            out["state"] = {k: _tensor(v) for k, v in model.state_dict().items()
                            if k.startswith(prefix)}
            w2 = dict(model.named_parameters()).get(f"{prefix}feed_forward.w2.weight")
            if w2 is None:
                out["no_ffn"] = True
                return out
            w2.zero_()
            model(tokens)
            out["output_without_ffn"] = _tensor(seen.get("output"))
    finally:
        handle.remove()
    return out


def zeroed_layers_cases(cases: list[dict[str, Any]], std: float, seed: int,
                        tokens: torch.Tensor) -> list[dict[str, Any]]:
    """Per case ``{"pattern", "zero_layers", "keep"}``: the fp64 scaled model of ``pattern``
    after every parameter under ``layers.{i}.`` (``i`` in ``zero_layers``) was set to zero,
    except those named ``layers.{i}.<k>`` with ``k`` in ``keep``: its full-forward logits for
    ``tokens`` (eval, no_grad), its state dict and its keys."""
    m = _model_module()
    out = []
    for case in cases:
        model = _scaled_model(m, case["pattern"], "float64", std, seed)
        prefixes = tuple(f"layers.{i}." for i in case["zero_layers"])
        kept = {f"{prefix}{k}" for prefix in prefixes for k in case["keep"]}
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.startswith(prefixes) and name not in kept:
                    p.zero_()
            logits = _tensor(model(tokens))
        out.append({"logits": logits,
                    "state": {k: _tensor(v) for k, v in model.state_dict().items()},
                    "keys": _keys(model)})
    return out


def seeded_init_repeats(patterns: list[str], seed: int, poison: list[float]
                        ) -> dict[str, list[dict[str, Any]]]:
    """Per pattern, state dicts of ``Transformer(ModelArgs(n_layers=len(pattern),
    layer_pattern=pattern))`` built after ``torch.manual_seed(seed)``: first, then once after
    each value of ``poison`` was written into memory that is then freed (tensors of every
    parameter's size filled with it), so a parameter the constructor leaves uninitialised shows
    what the allocator hands back."""
    m = _model_module()
    out: dict[str, list[dict[str, Any]]] = {}
    for pattern in patterns:
        args = m.ModelArgs(n_layers=len(pattern), layer_pattern=pattern)
        torch.manual_seed(seed)
        model = m.Transformer(args)
        states = [{k: _tensor(v) for k, v in model.state_dict().items()}]
        shapes = [tuple(v.shape) for v in model.state_dict().values()]
        del model
        for value in poison:
            junk = [torch.full(shape, value, dtype=torch.float32) for shape in shapes
                    for _ in range(2)]
            del junk
            torch.manual_seed(seed)
            model = m.Transformer(args)
            states.append({k: _tensor(v) for k, v in model.state_dict().items()})
            del model
        out[pattern] = states
    return out


def other_sizes(pattern: str, sizes: dict[str, int], std: float, seed: int,
                tokens: torch.Tensor, dtypes: list[str], chunks: list[int],
                schedule: list[int]) -> dict[str, Any]:
    """``prefix_logits`` (fp64) and ``cached_decoding`` of ``pattern`` with the ``ModelArgs``
    fields ``sizes``, in one process: ``{"prefix": ..., "decoding": ...}``."""
    return {"prefix": prefix_logits(pattern, "float64", std, seed, tokens, sizes),
            "decoding": cached_decoding([pattern], dtypes, std, seed, tokens, chunks, schedule,
                                        sizes)}


def cuda_runs(patterns: list[str], std: float, seed: int, tokens: torch.Tensor,
              batch: torch.Tensor, chunk: int) -> dict[str, Any]:
    """Per pattern, the fp32 scaled model moved to ``cuda:0`` with its inputs: the full forward
    and ``decode_logits(chunk)`` (eval, no_grad), both again under bf16 autocast (as the CUDA
    configurations train) with the dtypes of the decoding state after it, the placement of
    ``init_cache(batch)``'s tensors, the LM-loss gradients of a train-mode forward; and the
    same weights' full forward on the CPU (``cpu_full``). Every tensor as its device, dtype
    and values (copied to the CPU here)."""
    m = _model_module()
    dev = torch.device("cuda", 0)

    def seen(value: Any) -> dict[str, Any]:
        if not isinstance(value, torch.Tensor):
            return {"device": None, "dtype": None, "value": None, "type": type(value).__name__}
        return {"device": value.device.type, "dtype": str(value.dtype).removeprefix("torch."),
                "value": _tensor(value.detach().cpu()), "type": "Tensor"}

    out: dict[str, Any] = {"keys": {}}
    for pattern in patterns:
        model = _scaled_model(m, pattern, "float32", std, seed)
        out["keys"][pattern] = _keys(model)
        with torch.no_grad():
            cpu_full = model(tokens)
        model = model.to(dev)
        x, b = tokens.to(dev), batch.to(dev)
        with torch.no_grad():
            full, decoded = model(x), m.decode_logits(model, x, chunk=chunk)
            cache = model.init_cache(x.shape[0])
            placed = [seen(t) for e in cache for t in _tensors_in(e)]
            with torch.autocast("cuda", dtype=torch.bfloat16):
                amp_full = model(x)
                amp_cache = model.init_cache(x.shape[0])
                amp_decoded = _decode_chunks(model, x, chunk, amp_cache)
            amp_state = [str(t.dtype).removeprefix("torch.")
                         for e in amp_cache for t in _tensors_in(e)]
        model.train()
        logits = model(b[:, :-1])
        F.cross_entropy(logits.flatten(0, 1).float(), b[:, 1:].flatten()).backward()
        out[pattern] = {
            "cpu_full": _tensor(cpu_full), "full": seen(full), "decoded": seen(decoded),
            "amp_full": seen(amp_full), "amp_decoded": seen(amp_decoded),
            "amp_state_dtypes": amp_state, "cache": [{k: v for k, v in c.items() if k != "value"}
                                                     for c in placed],
            "grads": {n: seen(p.grad) for n, p in model.named_parameters()},
        }
    return out
