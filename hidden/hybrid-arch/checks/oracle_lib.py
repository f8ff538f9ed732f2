# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""Helpers shared by the hybrid-arch checks (judge side): comparisons, the allow-list, probes.

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061

Nothing here imports candidate code: the candidate's API is called through
``probes/hybrid_probe.py`` in a sealed candidate process (``grading.probe``), and what comes
back (tensors, numbers, key lists, files in a sealed job folder) is read as data.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
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
    """Environment of a train.py process (run as the candidate uid): the grader's, importing
    ``root``'s package."""
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith("PYTEST_")}
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


PROBE = "hybrid_probe"  # probes/hybrid_probe.py
# Candidate models in the mixer checks get N(0, 0.3) weights, so logits are O(1) and
# comparisons mean something (at the 0.02 init scale every comparison passes trivially).
SCALED_STD = 0.3
# A torch.export archive's JSON parts are a few hundred KB for these models.
MAX_ARCHIVE_JSON_BYTES = 64 * 1024 * 1024


def _archive_json(zf: zipfile.ZipFile, suffix: str) -> Any:
    hits = [info for info in zf.infolist() if info.filename.endswith(suffix)]
    assert len(hits) == 1, f"{len(hits)} members named *{suffix} in the archive (want 1)"
    assert hits[0].file_size <= MAX_ARCHIVE_JSON_BYTES, f"{hits[0].filename} is too large"
    return json.loads(zf.read(hits[0]))


def exported_graph(path: Path) -> tuple[set[str], set[str]]:
    """Operator names and state-dict keys of a ``torch.export.save`` archive, walked here.

    ``torch.export.load`` unpickles parts of an archive (falling back to ``weights_only=False``),
    so the judge never calls it on a file candidate code wrote. It reads the archive's JSON
    instead (the serialised graph ``models/model.json`` and the weights' index
    ``data/weights/model_weights_config.json``) with ``zipfile`` and ``json``, which run nothing
    from the file. Names are those of the in-memory graph (``str(OpOverload)``, e.g.
    ``aten.linear.default``; Python operators by bare name): the serialised target drops its
    ``torch.ops.``/``_operator.`` prefix, and since serialisation folds FX's ``getitem`` nodes
    (which unpack a multi-output op) into that op's outputs, ``getitem`` is counted wherever a
    node has several outputs or a list output. The keys are those of ``program.state_dict``.
    """
    with zipfile.ZipFile(path) as zf:
        model = _archive_json(zf, "/models/model.json")
        weights = _archive_json(zf, "/data/weights/model_weights_config.json")
    ops = set()
    for node in model["graph_module"]["graph"]["nodes"]:
        target = node["target"]
        assert isinstance(target, str), f"a graph node's target is {target!r}"
        ops.add(target.removeprefix("torch.ops.").removeprefix("_operator."))
        outputs = node.get("outputs") or []
        if len(outputs) > 1 or any(isinstance(o, dict) and "as_tensors" in o for o in outputs):
            ops.add("getitem")
    return ops, set(weights["config"])


def tokens(batch: int = 3, seqlen: int = 32, seed: int = 1) -> torch.Tensor:
    """Token batches the checks feed the candidate's models (generated here, on the judge)."""
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

