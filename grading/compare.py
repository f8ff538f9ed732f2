"""Comparisons for hidden checks that a hostile value cannot slip through.

Every number a check compares may come from candidate code. NaN makes ``err > tol`` False,
Python's ``max`` drops a NaN that is not first, an empty tensor equals anything under
``pytest.approx``, a bf16 scalar turns a 1e-12 tolerance into bf16 precision, and a tensor
subclass can override its arithmetic. So: convert to plain fp64 tensors first (refusing what is
not a plain tensor of the expected shape), reduce with torch (which propagates NaN), and decide
in the positive form, ``within(err, tol)``, which is False for NaN and infinity.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch

INF = float("inf")


def as_float(value: Any) -> float:
    """A candidate's scalar as a Python float (NaN when it is not a real number)."""
    if isinstance(value, bool):
        return math.nan
    if isinstance(value, int | float):
        return float(value)
    if type(value) is torch.Tensor and value.numel() == 1 and not value.is_complex():
        return float(value.detach().to("cpu", torch.float64).reshape(()))
    return math.nan


def within(err: float, tol: float) -> bool:
    """``err <= tol`` for a real, finite ``err``; False for NaN, infinity or a non-number."""
    value = as_float(err)
    return math.isfinite(value) and value <= tol


def as_tensor(value: Any, shape: tuple[int, ...] | None = None) -> torch.Tensor | None:
    """A plain fp64 CPU tensor, or None when ``value`` is not a plain, non-empty real tensor
    (of ``shape``, when given)."""
    if type(value) is not torch.Tensor or value.is_complex() or value.is_sparse:
        return None
    if value.numel() == 0 or (shape is not None and tuple(value.shape) != tuple(shape)):
        return None
    return value.detach().to("cpu", torch.float64)


def max_abs_diff(got: Any, want: Any) -> float:
    """Largest ``|got - want|`` in fp64; infinity when ``got`` is not a plain tensor of
    ``want``'s shape, NaN when any element is not finite (so ``within`` says no)."""
    expected = as_tensor(want)
    if expected is None:
        raise ValueError("the judge's own value must be a plain non-empty tensor")
    actual = as_tensor(got, tuple(expected.shape))
    if actual is None:
        return INF
    if not bool(torch.isfinite(actual).all()):
        return math.nan
    return float((actual - expected).abs().max())


def worst(errors: Iterable[float]) -> float:
    """The largest of several errors, NaN if any is NaN (Python's ``max`` may drop it)."""
    result = 0.0
    for err in errors:
        value = as_float(err)
        if math.isnan(value):
            return math.nan
        result = max(result, value)
    return result


def max_abs_diff_states(got: Mapping[str, Any], want: Mapping[str, Any]) -> float:
    """Worst difference over a state dict; infinity when the keys differ."""
    if not isinstance(got, Mapping) or set(got) != set(want):
        return INF
    return worst(max_abs_diff(got[k], want[k]) for k in want)


def bitwise_equal(got: Any, want: Any) -> bool:
    """Same dtype, shape and bits; both must be plain tensors."""
    return (type(got) is torch.Tensor and type(want) is torch.Tensor
            and got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want))
