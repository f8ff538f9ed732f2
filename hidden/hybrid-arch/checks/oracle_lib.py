# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""Helpers shared by the hybrid-arch checks: candidate import, comparisons, the allow-list.

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

PATTERN = "AMAM"  # the hybrid pattern of every training run (TASK.md's quality command)
EQ_STEPS = 20  # equivalence and resume runs (TASK.md: fixed settings)
RESUME_AT = 10


def workdir() -> Path:
    return Path(os.environ["GRADING_WORKDIR"])


def baseline_dir() -> Path | None:
    value = os.environ.get("GRADING_BASELINE")
    return Path(value) if value else None


def run_env(root: Path) -> dict[str, str]:
    """Environment of a train.py process: the grader's, importing ``root``'s package."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({
        "PYTHONPATH": str(root),
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    return env


# TASK.md's allow-list, copied here (not read from the candidate's tests or code).
ALLOWED_EXPORT_OPS = frozenset({
    "getitem",
    "aten.add.Tensor", "aten.sub.Tensor", "aten.mul.Tensor", "aten.div.Tensor",
    "aten.neg.default", "aten.pow.Tensor_Scalar", "aten.rsqrt.default", "aten.exp.default",
    "aten.log.default", "aten.mean.dim", "aten.sum.dim_IntList", "aten.cumsum.default",
    "aten.gelu.default", "aten.silu.default", "aten.sigmoid.default", "aten.tanh.default",
    "aten.softplus.default", "aten.softmax.int",
    "aten.linear.default", "aten.matmul.default", "aten.embedding.default",
    "aten.scaled_dot_product_attention.default", "aten.conv1d.default",
    "aten.arange.default", "aten.arange.start", "aten.le.Tensor", "aten.tril.default",
    "aten.zeros.default", "aten.ones.default", "aten.full.default",
    "aten.view.default", "aten.reshape.default", "aten.transpose.int", "aten.permute.default",
    "aten.unsqueeze.default", "aten.squeeze.dim", "aten.expand.default",
    "aten.split.Tensor", "aten.chunk.default", "aten.slice.Tensor", "aten.select.int",
    "aten.cat.default", "aten.stack.default", "aten.pad.default",
    "aten.constant_pad_nd.default", "aten.clone.default", "aten.contiguous.default",
    "aten.to.dtype",
})

# The baseline's attention-block keys (TASK.md: attention blocks keep today's keys).
ATTENTION_BLOCK_KEYS = frozenset({
    "attention_norm.weight", "attention.wqkv.weight", "attention.wo.weight",
    "ffn_norm.weight", "feed_forward.w1.weight", "feed_forward.w2.weight",
})
GLOBAL_KEYS = frozenset({"tok_embeddings.weight", "pos_embeddings.weight", "norm.weight",
                         "output.weight"})


def candidate(module: str = "hybridlm.model") -> ModuleType:
    """A module of the candidate's package, imported from GRADING_WORKDIR."""
    torch.set_num_threads(1)
    root = os.environ["GRADING_WORKDIR"]
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(module)


def graph_ops(program: Any) -> set[str]:
    """Operator names of an exported program, walked here (not by the candidate's code)."""
    ops = set()
    for node in program.graph.nodes:
        if node.op == "call_function":
            t = node.target
            ops.add(t.__name__ if getattr(t, "__module__", None) == "_operator" else str(t))
    return ops


def scaled_model(pattern: str, dtype: torch.dtype = torch.float64, seed: int = 0) -> Any:
    """A candidate model with N(0, 0.3) weights, so logits are O(1) and comparisons mean
    something (at the 0.02 init scale every comparison passes trivially)."""
    m = candidate()
    torch.manual_seed(seed)
    model = m.Transformer(m.ModelArgs(n_layers=len(pattern), layer_pattern=pattern))
    model = model.to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.3)
    return model


def tokens(batch: int = 3, seqlen: int = 32, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 64, (batch, seqlen), generator=torch.Generator().manual_seed(seed))


def layer_keys(state_dict: dict[str, Any], i: int) -> set[str]:
    prefix = f"layers.{i}."
    return {k[len(prefix):] for k in state_dict if k.startswith(prefix)}


def check_key_schema(state_dict: dict[str, Any], pattern: str) -> list[str]:
    """Problems with a state dict's keys for ``pattern`` (empty when it follows the schema)."""
    problems = []
    keys = set(state_dict)
    layered = {k for k in keys if k.startswith("layers.")}
    if keys - layered != GLOBAL_KEYS:
        problems.append(f"non-layer keys {sorted(keys - layered)} != {sorted(GLOBAL_KEYS)}")
    valid_prefixes = tuple(f"layers.{i}." for i in range(len(pattern)))
    stray = sorted(k for k in layered if not k.startswith(valid_prefixes))
    if stray:
        problems.append(f"keys outside layers.0..{len(pattern) - 1}: {stray[:5]}")
    for i, kind in enumerate(pattern):
        own = layer_keys(state_dict, i)
        if kind == "A" and own != ATTENTION_BLOCK_KEYS:
            problems.append(f"attention layer {i} keys {sorted(own)} != the baseline's "
                            f"{sorted(ATTENTION_BLOCK_KEYS)}")
        if kind == "M":
            if not own:
                problems.append(f"mixer layer {i} has no keys under layers.{i}.")
            attn = sorted(k for k in own if k.startswith(("attention.", "attention_norm.")))
            if attn:
                problems.append(f"mixer layer {i} still holds attention keys {attn}")
    return problems


def tree_max_diff(a: Any, b: Any, path: str = "") -> float:
    """Largest absolute difference over two nested structures; raises on a structure mismatch
    (different keys, shapes or non-tensor values)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            raise AssertionError(f"{path}: tensor vs {type(b).__name__}")
        if a.shape != b.shape:
            raise AssertionError(f"{path}: shape {tuple(a.shape)} vs {tuple(b.shape)}")
        if a.numel() == 0:
            return 0.0
        if a.is_floating_point() or b.is_floating_point():
            return (a.double() - b.double()).abs().max().item()
        return 0.0 if torch.equal(a, b) else float("inf")
    if isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            extra = sorted(map(str, set(a) ^ set(b if isinstance(b, dict) else {})))[:6]
            raise AssertionError(f"{path}: different keys {extra}")
        return max((tree_max_diff(a[k], b[k], f"{path}/{k}") for k in a), default=0.0)
    if isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            raise AssertionError(f"{path}: different lengths")
        return max((tree_max_diff(x, y, f"{path}[{i}]") for i, (x, y) in
                    enumerate(zip(a, b, strict=True))), default=0.0)
    if a != b:
        raise AssertionError(f"{path}: {a!r} != {b!r}")
    return 0.0


def worst_key(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[str, float]:
    diffs = {k: tree_max_diff(a[k], b[k], k) for k in a if k in b}
    key = max(diffs, key=diffs.get) if diffs else ""
    return key, diffs.get(key, 0.0)

