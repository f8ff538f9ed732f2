"""Candidate side of the moe-router checks: drive ``tinylm``'s API, return raw observations.

Runs as the candidate uid through ``grading.probe`` (and, for ``load_candidate_model``, inside
the 2-rank ``probe_balance.py``), and is readable by it, so it holds no expected value and no
canary: the checks (judge side) compute the references and decide. Fixed parameters and
tokens come in from the checks as tensors.
"""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _no_exit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A candidate that calls ``sys.exit`` (argparse on an unknown flag) raised, as it did when
    the checks called it in-process (pytest reports SystemExit as a failure, not a crash)."""

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except SystemExit as exc:
            raise RuntimeError(f"SystemExit: {exc.code!r}") from exc

    return wrapper


def _value(x: Any) -> Any:
    """A returned object as data: a plain tensor (subclasses unwrapped), a number, or repr."""
    if isinstance(x, torch.Tensor):
        return x.detach().as_subclass(torch.Tensor).clone()
    if isinstance(x, bool):
        return bool(x)
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return float(x)
    if isinstance(x, str):
        return str(x)
    return repr(x)


def _type_name(x: Any) -> str:
    return type(x).__name__


def _is_tensor(x: Any) -> bool:
    return type(x) is torch.Tensor


def _mro(exc: BaseException) -> list[str]:
    return [c.__name__ for c in type(exc).__mro__]


def load_candidate_model(model_config: dict[str, Any], params: dict[str, torch.Tensor],
                         dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    """The candidate's TinyLM for ``ModelConfig(**model_config)`` holding ``params``
    (export-schema keys)."""
    from tinylm.config import ModelConfig

    return model_holding(ModelConfig(**model_config), params, dtype)


def model_holding(mcfg: Any, params: dict[str, torch.Tensor],
                  dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    """The candidate's TinyLM for the candidate's ModelConfig ``mcfg`` holding ``params``.

    The state dict is expected to use the export schema's names (the export is the full state
    dict); a candidate that names its modules differently is given the parameters through its
    own ``load_export`` instead, so only the documented interface is relied on.
    """
    from tinylm.model import TinyLM

    torch.manual_seed(0)
    model = TinyLM(mcfg).to(dtype)
    if set(model.state_dict()) == set(params):
        model.load_state_dict({k: v.to(dtype) for k, v in params.items()}, strict=True)
        return model
    from tinylm.export import load_export

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "params.pt"
        torch.save({"format": "tinylm-export-v1", "model_config": dataclasses.asdict(mcfg),
                    "state_dict": {k: v.to(torch.float32).contiguous()
                                   for k, v in params.items()}}, path)
        model = load_export(path)
    # The checks' parameters are float32-representable, so the detour loses no bit.
    model = model.to(dtype)
    return model


def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The loss the forward check differentiates (mean token cross-entropy, in fp64)."""
    logp = torch.log_softmax(logits.reshape(-1, logits.shape[-1]).to(torch.float64), dim=-1)
    return -logp.gather(1, targets.reshape(-1, 1)).mean()


def _eval_outputs(model: torch.nn.Module, tokens: torch.Tensor) -> list[Any]:
    """``[logits, aux]`` of an eval-mode forward without grad."""
    model.eval()
    with torch.no_grad():
        logits, aux = model(tokens)
    return [_value(logits), _value(aux)]


@_no_exit
def forward_cases(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case (``model_config``, ``params``, ``tokens`` [B, T + 1]): the candidate's fp64
    TinyLM holding ``params``, in training mode: its forward on ``tokens[:, :-1]`` (output
    types, logits, aux), the gradients of cross-entropy + aux, then an eval-mode forward.

    Stops after the first case whose outputs are not two plain tensors with a 0-dim aux.
    """
    out: list[dict[str, Any]] = []
    for case in cases:
        params = case["params"]
        tokens = case["tokens"]
        model = load_candidate_model(case["model_config"], params).train()
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        logits, aux = model(inputs)
        seen: dict[str, Any] = {
            "logits_type": _type_name(logits), "aux_type": _type_name(aux),
            "plain_tensors": _is_tensor(logits) and _is_tensor(aux),
        }
        out.append(seen)
        if not seen["plain_tensors"]:
            return out
        seen["aux_shape"] = list(aux.shape)
        if aux.dim() != 0:
            return out
        (_cross_entropy(logits, targets) + aux).backward()
        named = dict(model.named_parameters())
        seen["logits"] = _value(logits)
        seen["aux"] = _value(aux)
        seen["param_names"] = sorted(named)
        seen["grads"] = ({k: None if p.grad is None else _value(p.grad) for k, p in named.items()}
                         if set(named) == set(params) else {})
        model.eval()
        with torch.no_grad():
            e_logits, e_aux = model(inputs)
        seen["eval_logits"] = _value(e_logits)
        seen["eval_aux"] = _value(e_aux)
    return out


def _plain(x: Any) -> Any:
    if isinstance(x, bool):
        return bool(x)
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return float(x)
    if isinstance(x, str):
        return str(x)
    return repr(x)


def _validate_raises(settings: list[dict[str, Any]]) -> list[list[str] | None]:
    """For each setting: None when ``ModelConfig(**s).validate()`` passes, else the class names
    (MRO) of what it raised."""
    from tinylm.config import ModelConfig

    found: list[list[str] | None] = []
    for kwargs in settings:
        try:
            ModelConfig(**kwargs).validate()
        except Exception as exc:  # reported as data, the check decides
            found.append(_mro(exc))
            continue
        found.append(None)
    return found


@_no_exit
def config_fields(valid: list[dict[str, Any]], invalid: list[dict[str, Any]],
                  flags: list[str], anchor: dict[str, Any],
                  invalid_flags: list[list[str]] | None = None) -> dict[str, Any]:
    """``ModelConfig()``'s four MoE fields; what ``validate()`` raises for each setting;
    ``train.parse_args(flags)``'s MoE fields, ``parse_args([])``'s expert count and
    ``parse_args(["--moe-experts", "4"])``'s MoE fields (the other three flags' defaults), and
    for each of ``invalid_flags`` how ``parse_args`` and ``validate()`` reject it
    (``has_parse`` False when train.py has no ``parse_args``). A stage that raised is reported
    as its exception.

    ``anchor`` (``flags``, ``model_config``, ``params``, ``tokens``): the candidate's TinyLM
    under ``parse_args(anchor["flags"]).model`` (``ModelConfig(**anchor["model_config"])``
    without a ``parse_args``), holding ``params`` in fp64: its eval outputs on ``tokens``."""
    from tinylm.config import ModelConfig

    out = _config_fields(valid, invalid, flags, list(invalid_flags or []))
    try:
        if out.get("has_parse") and "parse_error" not in out:
            import importlib

            mcfg = importlib.import_module("train").parse_args(list(anchor["flags"])).model
            out["anchor_source"] = "train.parse_args"
        else:
            mcfg = ModelConfig(**anchor["model_config"])
            out["anchor_source"] = "ModelConfig"
        out["anchor"] = _eval_outputs(model_holding(mcfg, anchor["params"]), anchor["tokens"])
    except (Exception, SystemExit) as exc:  # the check fails with it
        out["anchor_error"] = f"{type(exc).__name__}: {exc}"
    return out


def _flags_rejected(parse: Any, flags: list[str]) -> str | None:
    """How ``parse_args(flags)`` and the ``validate()`` of its model config reject ``flags``
    (the exception's class, ``SystemExit`` with its code), or None when both accept them."""
    try:
        parse(list(flags)).model.validate()
    except SystemExit as exc:
        return f"SystemExit({exc.code!r})"
    except Exception as exc:  # the judge decides which rejections count
        return type(exc).__name__
    return None


def _config_fields(valid: list[dict[str, Any]], invalid: list[dict[str, Any]],
                   flags: list[str], invalid_flags: list[list[str]]) -> dict[str, Any]:
    from tinylm.config import ModelConfig

    cfg = ModelConfig()
    got = (cfg.moe_experts, cfg.moe_top_k, cfg.moe_capacity_factor, cfg.moe_aux_weight)
    out: dict[str, Any] = {"defaults": [_plain(v) for v in got], "defaults_repr": repr(got),
                           "valid": _validate_raises(valid),
                           "invalid": _validate_raises(invalid)}
    try:
        import importlib

        train_mod = importlib.import_module("train")
        parse = getattr(train_mod, "parse_args", None)
        out["has_parse"] = parse is not None
        if parse is None:
            return out
        m = parse(flags).model
        out["flags"] = [_plain(v) for v in (m.moe_experts, m.moe_top_k, m.moe_capacity_factor,
                                            m.moe_aux_weight)]
        out["default_experts"] = _plain(parse([]).model.moe_experts)
        m = parse(["--moe-experts", "4"]).model
        out["flag_defaults"] = [_plain(v) for v in (m.moe_experts, m.moe_top_k,
                                                    m.moe_capacity_factor, m.moe_aux_weight)]
        out["invalid_flags"] = [_flags_rejected(parse, f) for f in invalid_flags]
    except (Exception, SystemExit) as exc:  # the check fails with it
        code = f"SystemExit: {exc.code!r}" if isinstance(exc, SystemExit) else None
        out["parse_error"] = code or f"{type(exc).__name__}: {exc}"
    return out


def _python_state(model: torch.nn.Module) -> dict[str, dict[str, Any]]:
    """Every module's attributes outside parameters/buffers/submodules, by module name."""
    skip = {"_parameters", "_buffers", "_modules"}
    return {name: {k: v for k, v in vars(m).items() if k not in skip}
            for name, m in model.named_modules()}


def _attr_changes(before: dict[str, dict[str, Any]],
                  after: dict[str, dict[str, Any]]) -> list[str]:
    """Which module attributes were added, removed or rebound to a different value."""
    changes = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name, {}), after.get(name, {})
        for key in sorted(set(a) | set(b)):
            where = f"{name or '<model>'}.{key}"
            if key not in a or key not in b:
                changes.append(f"{where} {'added' if key not in a else 'removed'}")
                continue
            x, y = a[key], b[key]
            if x is y:
                continue
            if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
                same = (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
                        and x.shape == y.shape and torch.equal(x, y))
            else:
                try:
                    same = bool(x == y)
                except Exception:  # an incomparable new object is a change
                    same = False
            if not same:
                changes.append(f"{where} changed")
    return changes


@_no_exit
def eval_purity(model_config: dict[str, Any], tokens: torch.Tensor,
                anchor: dict[str, Any]) -> dict[str, Any]:
    """The candidate's ``TinyLM(ModelConfig(**model_config))`` (seed 0): a training
    forward+backward on ``tokens`` (module attributes it changed, output types), then in eval
    mode two forwards (grad on, then off) with the state dict, module attributes and global RNG
    state around them. Stops after the training step if its outputs are not two plain tensors
    with a 0-dim aux.

    ``anchor`` (``model_config``, ``params``, ``tokens``): the candidate's model holding
    ``params`` (fp64), in eval mode: two forwards (grad on, then off), as ``anchor.first`` and
    ``anchor.second``."""
    out = _eval_purity(model_config, tokens)
    if out.get("train_outputs_ok"):
        model = load_candidate_model(anchor["model_config"], anchor["params"]).eval()
        first = model(anchor["tokens"])
        with torch.no_grad():
            second = model(anchor["tokens"])
        out["anchor"] = {"first": [_value(t) for t in first[:2]],
                         "second": [_value(t) for t in second[:2]]}
    return out


def _eval_purity(model_config: dict[str, Any], tokens: torch.Tensor) -> dict[str, Any]:
    from tinylm.config import ModelConfig
    from tinylm.model import TinyLM

    torch.manual_seed(0)
    model = TinyLM(ModelConfig(**model_config))

    # A training step first, so any state that training would stash exists before eval.
    model.train()
    before_train = _python_state(model)
    logits, aux = model(tokens)
    (logits.mean() + aux).backward()
    out: dict[str, Any] = {"train_changes": _attr_changes(before_train, _python_state(model))}
    out["train_outputs_ok"] = _is_tensor(logits) and _is_tensor(aux) and aux.dim() == 0
    if not out["train_outputs_ok"]:
        return out
    model.zero_grad(set_to_none=True)

    model.eval()
    out["state_before"] = {k: _value(v) for k, v in model.state_dict().items()}
    py_before = _python_state(model)
    out["rng_before"] = torch.get_rng_state()
    out1 = model(tokens)
    with torch.no_grad():
        out2 = model(tokens)
    out["rng_after"] = torch.get_rng_state()
    out["eval_changes"] = _attr_changes(py_before, _python_state(model))
    out["state_after"] = {k: _value(v) for k, v in model.state_dict().items()}
    out["output_types"] = [_type_name(t) for t in (*out1, *out2)]
    out["outputs_plain"] = all(_is_tensor(t) for t in (*out1, *out2))
    out["first"] = [_value(t) for t in out1[:2]]
    out["second"] = [_value(t) for t in out2[:2]]
    return out


@_no_exit
def export_schema(model_config: dict[str, Any]) -> list[list[Any]]:
    """``tinylm.export.export_schema(ModelConfig(**model_config))`` as [key, shape] pairs."""
    from tinylm.config import ModelConfig
    from tinylm.export import export_schema as schema

    return [[_plain(k), [_plain(x) for x in tuple(v)]]
            for k, v in schema(ModelConfig(**model_config)).items()]


@_no_exit
def reload_export(path: str, model_config: dict[str, Any], params: dict[str, torch.Tensor],
                  tokens: torch.Tensor, anchor: dict[str, Any]) -> dict[str, Any]:
    """``load_export(path)`` and the candidate's ``TinyLM`` holding ``params`` (fp32), both in
    eval mode: their outputs on ``tokens`` (no grad).

    ``anchor`` (``model_config``, ``params``, ``tokens``): ``load_export`` of a file in the
    documented format (``tinylm-export-v1``, ``dataclasses.asdict`` of the candidate's
    ``ModelConfig(**model_config)``, ``params`` as float32) written here, cast to fp64: its eval
    outputs on ``tokens`` as ``anchor``."""
    from tinylm.config import ModelConfig
    from tinylm.export import load_export

    model = load_export(Path(path)).eval()
    direct = load_candidate_model(model_config, dict(params), dtype=torch.float32).eval()
    with torch.no_grad():
        logits, aux = model(tokens)
        want_logits, want_aux = direct(tokens)
    out = {"is_module": isinstance(model, torch.nn.Module),
           "logits": _value(logits), "aux": _value(aux),
           "direct_logits": _value(want_logits), "direct_aux": _value(want_aux)}
    with tempfile.TemporaryDirectory() as tmp:
        written = Path(tmp) / "anchor.pt"
        mcfg = ModelConfig(**anchor["model_config"])
        torch.save({"format": "tinylm-export-v1", "model_config": dataclasses.asdict(mcfg),
                    "state_dict": {k: v.to(torch.float32).contiguous()
                                   for k, v in anchor["params"].items()}}, written)
        reloaded = load_export(written)
    out["anchor"] = _eval_outputs(reloaded.to(torch.float64), anchor["tokens"])
    return out


class _UnplacedToMeta(torch.overrides.TorchFunctionMode):
    """Every tensor factory called without ``device=`` (``torch.zeros``, ``torch.arange``,
    ``torch.tensor``, ...) builds its tensor on the ``meta`` device instead of the CPU, as a
    device-less factory builds it on the CPU while the model lives on a GPU. A 0-dim result
    stays on the CPU: a CPU scalar tensor mixes with GPU tensors, so it is no placement error
    there either, and so does a tensor made from another tensor (``torch.as_tensor(t)``, which
    keeps ``t``'s device). Everything else (``*_like``, ``new_*``, module parameters, the inputs)
    keeps its device, so an operation that mixes a redirected tensor with the model's raises, as
    it would on a GPU. ``redirected`` names the factories it moved."""

    def __init__(self) -> None:
        super().__init__()
        from torch.utils._device import _device_constructors

        self.factories = _device_constructors()
        self.redirected: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        takes_data = name in ("tensor", "as_tensor", "asarray", "nested_tensor") or \
            name.startswith("sparse_")
        from_tensor = takes_data and (any(isinstance(a, torch.Tensor) for a in args)
                                      or isinstance(kwargs.get("data"), torch.Tensor))
        if func in self.factories and kwargs.get("device") is None and not from_tensor:
            result = func(*args, **kwargs)
            if isinstance(result, torch.Tensor) and result.dim() > 0:
                self.redirected.append(name or repr(func))
                return result.to("meta")
            return result
        return func(*args, **kwargs)


def _placement_of(x: Any) -> dict[str, Any]:
    """Type, device, dtype and shape of one output, as data."""
    if not isinstance(x, torch.Tensor):
        return {"type": _type_name(x)}
    return {"type": _type_name(x), "device": str(x.device), "dtype": str(x.dtype),
            "shape": list(x.shape)}


def _meta_run(case: dict[str, Any]) -> dict[str, Any]:
    """The candidate's fp64 model holding the case's CPU parameters: a training forward and
    backward, then an eval forward, all under :class:`_UnplacedToMeta`. A raise is reported
    as data (the check fails with it)."""
    model = load_candidate_model(case["model_config"], case["params"]).train()
    tokens = case["tokens"]
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    mode = _UnplacedToMeta()
    out: dict[str, Any] = {}
    try:
        with mode:
            logits, aux = model(inputs)
            out["train"] = [_placement_of(logits), _placement_of(aux)]
            if _is_tensor(logits) and _is_tensor(aux) and logits.device.type == "cpu" \
                    and aux.device.type == "cpu" and aux.dim() == 0:
                out["train_logits"], out["train_aux"] = _value(logits), _value(aux)
                (_cross_entropy(logits, targets) + aux).backward()
                out["grad_devices"] = sorted({str(p.grad.device) for p in model.parameters()
                                              if p.grad is not None})
            model.eval()
            with torch.no_grad():
                e_logits, e_aux = model(inputs)
            out["eval"] = [_placement_of(e_logits), _placement_of(e_aux)]
            if _is_tensor(e_logits) and _is_tensor(e_aux) and e_logits.device.type == "cpu" \
                    and e_aux.device.type == "cpu":
                out["eval_logits"], out["eval_aux"] = _value(e_logits), _value(e_aux)
    except Exception as exc:  # reported as data: the check fails with it
        out["error"] = f"{type(exc).__name__}: {exc}"[:800]
    out["redirected"] = sorted(set(mode.redirected))
    return out


@_no_exit
def placement(fp64_case: dict[str, Any], meta_cases: list[dict[str, Any]],
              fp32_case: dict[str, Any]) -> dict[str, Any]:
    """Where the candidate's model puts its tensors and in which dtype.

    ``fp64_case`` (``model_config``, ``params``, ``tokens`` [B, T + 1]): the fp64 TinyLM holding
    ``params``, in training mode: its outputs' types/devices/dtypes, logits, aux, and every
    parameter's gradient (with its dtype) of cross-entropy + aux.
    ``meta_cases``: per case, :func:`_meta_run` (the same model under :class:`_UnplacedToMeta`).
    ``fp32_case``: the fp32 TinyLM holding ``params``: the types/devices/dtypes of a training
    and an eval forward's outputs, and :func:`_autocast_run` of it."""
    case = fp64_case
    model = load_candidate_model(case["model_config"], case["params"]).train()
    inputs, targets = case["tokens"][:, :-1], case["tokens"][:, 1:]
    logits, aux = model(inputs)
    out: dict[str, Any] = {"fp64": [_placement_of(logits), _placement_of(aux)]}
    if _is_tensor(logits) and _is_tensor(aux) and aux.dim() == 0:
        (_cross_entropy(logits, targets) + aux).backward()
        named = dict(model.named_parameters())
        out["fp64_logits"], out["fp64_aux"] = _value(logits), _value(aux)
        out["param_names"] = sorted(named)
        out["grads"] = {k: None if p.grad is None else _value(p.grad) for k, p in named.items()}
        out["grad_dtypes"] = sorted({str(p.grad.dtype) for p in named.values()
                                     if p.grad is not None})
    out["meta"] = [_meta_run(c) for c in meta_cases]
    model32 = load_candidate_model(fp32_case["model_config"], fp32_case["params"],
                                   dtype=torch.float32).train()
    inputs32 = fp32_case["tokens"][:, :-1]
    train_out = model32(inputs32)
    model32.eval()
    with torch.no_grad():
        eval_out = model32(inputs32)
    out["fp32"] = {"train": [_placement_of(t) for t in train_out[:2]],
                   "eval": [_placement_of(t) for t in eval_out[:2]]}
    out["autocast"] = _autocast_run(fp32_case)
    return out


def _autocast_run(case: dict[str, Any]) -> dict[str, Any]:
    """The fp32 TinyLM holding ``case["params"]``, a training forward under CPU bf16 autocast
    (the mixed precision of the cuda-* configurations) and the backward of cross-entropy + aux:
    its outputs' types/devices/dtypes, whether they and every gradient are finite, or what it
    raised."""
    model = load_candidate_model(case["model_config"], case["params"],
                                 dtype=torch.float32).train()
    inputs, targets = case["tokens"][:, :-1], case["tokens"][:, 1:]
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, aux = model(inputs)
        got: dict[str, Any] = {"train": [_placement_of(logits), _placement_of(aux)]}
        if _is_tensor(logits) and _is_tensor(aux) and aux.dim() == 0:
            (_cross_entropy(logits.float(), targets) + aux).backward()
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            got["finite"] = bool(torch.isfinite(logits.float()).all()
                                 and torch.isfinite(aux.float()).all()
                                 and all(bool(torch.isfinite(g).all()) for g in grads))
            got["grads"] = len(grads)
        return got
    except Exception as exc:  # the judge fails the check with it
        return {"error": f"{type(exc).__name__}: {exc}"[:1500]}
