# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""Helpers shared by the hybrid-arch checks (judge side): comparisons, the allow-list, probes.

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061

Nothing here imports candidate code: the candidate's API is called through
``probes/hybrid_probe.py`` in a sealed candidate process (``grading.probe``), and what comes
back (tensors, numbers, key lists, files in a sealed job folder) is read as data.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from grading import probe, sealed
from grading.compare import INF, as_tensor, max_abs_diff, worst
from grading.probe import CandidateRunFailed
from grading.run import run_command

PATTERN = "AMAM"  # the hybrid pattern of every training run (TASK.md's quality command)
EQ_STEPS = 20  # equivalence and resume runs (TASK.md: fixed settings)
RESUME_AT = 10


# The declared CUDA configurations; the grader reports them not_run on a host without two GPUs
# (grading.grade.unavailable_configurations), and the checks that name them run their CUDA part
# only where they can run.
CUDA_CONFIGURATIONS = ("cuda-ddp-2", "cuda-fsdp-2")


def gpus() -> int:
    """GPUs the judge sees (the CUDA configurations need two)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def workdir() -> Path:
    return Path(os.environ["GRADING_WORKDIR"])


def baseline_dir() -> Path | None:
    value = os.environ.get("GRADING_BASELINE")
    return Path(value) if value else None


@contextlib.contextmanager
def kept_environment() -> Iterator[None]:
    """Undo what torch writes into the judge's ``os.environ``.

    The first import of ``torch._dynamo`` (which the judge's AdamW, the export serialiser and
    DCP pull in) sets ``TORCHINDUCTOR_CACHE_DIR`` to a folder in the judge's temp folder, and
    every later candidate process (runs, probes) inherits the judge's environment: torch there
    would try to create that folder, which the candidate cannot reach, and crash.
    """
    saved = dict(os.environ)
    try:
        yield
    finally:
        if dict(os.environ) != saved:
            os.environ.clear()
            os.environ.update(saved)


def run_env(root: Path) -> dict[str, str]:
    """Environment of a train.py process (run as the candidate uid): the grader's, importing
    ``root``'s package."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TORCHINDUCTOR_CACHE_DIR") and not k.startswith("PYTEST_")}
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


# A one-step run refused at its start ends in seconds; a hang is one.
BAD_PATTERN_TIMEOUT_S = 120


def cli_exit_code(flags: list[str], name: str) -> int:
    """The exit status of a one-step cpu-1 ``train.py`` with ``flags`` (as subprocess reports it:
    the exit code, or minus the signal that killed it); a hang fails the check as one."""
    root = workdir()
    log = Path(tempfile.mkdtemp(prefix=f"{name.replace('_', '-')}-")) / "run.log"
    res = run_command([sys.executable, "train.py", "--config", "cpu-1", *flags, "--steps", "1"],
                      cwd=root, env=run_env(root), timeout_s=BAD_PATTERN_TIMEOUT_S, log_path=log)
    if res.timed_out:
        raise CandidateRunFailed("hang", f"train.py {' '.join(flags)} still running after "
                                 f"{BAD_PATTERN_TIMEOUT_S} s\n{log.read_text()[-2000:]}")
    return res.exit_code if res.exit_code is not None else -(res.signal or 0)


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


# A checkpoint of these models, as one torch.save file, is about a megabyte.
MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024


def read_checkpoint(ckpt: Path, root: Path | None = None) -> dict[str, Any]:
    """A sealed DCP checkpoint's contents (nested state: model, optim, scheduler, train, rng_*),
    as data. The probe that converts it (its metadata is a pickle) gets a copy in its own job
    folder (``sealed.give``) and writes one ``torch.save`` file, which the judge loads with
    ``weights_only=True``. ``root``: the tree the probe runs on (default: the graded tree)."""
    given = sealed.give(ckpt, "ckpt-copy")
    job = sealed.job_dir("ckpt-contents")
    probe.call(PROBE, "checkpoint_contents", root=root, path=str(given),
               out=str(job / "contents.pt"))
    sealed.seal(job)
    out = job / "contents.pt"
    assert out.is_file() and not out.is_symlink(), "the checkpoint could not be read"
    size = out.stat().st_size
    assert size <= MAX_CHECKPOINT_BYTES, f"checkpoint contents of {size} bytes"
    contents = torch.load(out, map_location="cpu", weights_only=True)
    assert isinstance(contents, dict), f"checkpoint contents are a {type(contents).__name__}"
    return contents


def tokens(batch: int = 3, seqlen: int = 32, seed: int = 1) -> torch.Tensor:
    """Token batches the checks feed the candidate's models (generated here, on the judge)."""
    return torch.randint(0, 64, (batch, seqlen), generator=torch.Generator().manual_seed(seed))


def layer_keys(state_dict: dict[str, Any], i: int) -> set[str]:
    prefix = f"layers.{i}."
    return {k[len(prefix):] for k in state_dict if k.startswith(prefix)}


def check_key_schema(state_dict: Iterable[Any], pattern: str, *,
                     stack_only: bool = False) -> list[str]:
    """Problems with a state dict's keys (or any collection of keys) for ``pattern`` (empty
    when it follows the schema).

    ``stack_only``: judge only whether the keys are ``pattern``'s stack, i.e. a mixer layer is
    not an attention block (its keys are not exactly an attention block's). The checks of other
    contracts use it to see that the pattern was used without failing a working mixer that
    merely names a submodule ``attention``: the naming rule is the schema contracts' to judge.
    """
    keys = set(state_dict)
    odd = [k for k in keys if type(k) is not str]
    if odd:
        return [f"keys that are not strings: {[repr(k)[:40] for k in odd[:3]]}"]
    problems = []
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
            elif stack_only and own == ATTENTION_BLOCK_KEYS:
                problems.append(f"mixer layer {i} is an attention block (keys {sorted(own)})")
            attn = sorted(k for k in own if k.startswith(("attention.", "attention_norm.")))
            if attn and not stack_only:
                problems.append(f"mixer layer {i} still holds attention keys {attn}")
    return problems


def _leaf_diff(got: Any, want: Any) -> float:
    """|got - want| of two leaves either of which may be the candidate's (``grading.compare``:
    plain fp64 tensors of one shape; NaN when a value is not finite, infinity when the kinds,
    shapes or non-tensor values differ)."""
    if type(want) is torch.Tensor or type(got) is torch.Tensor:
        if type(want) is not torch.Tensor or type(got) is not torch.Tensor:
            return INF
        if want.numel() == 0 or got.numel() == 0:
            return 0.0 if (got.shape == want.shape and got.dtype == want.dtype) else INF
        expected = as_tensor(want)
        if expected is None:
            return INF
        if not bool(torch.isfinite(expected).all()):
            return math.nan
        return max_abs_diff(got, expected)
    if type(got) is not type(want) or got != want:
        return INF
    return 0.0


def tree_max_diff(got: Any, want: Any) -> float:
    """Largest absolute difference over two nested structures (state dicts, optimizer states),
    NaN-safe: infinity on a structure mismatch (keys, lengths, shapes, non-tensor values), NaN
    when any value is not finite; reduced with ``grading.compare.worst``."""
    if isinstance(want, dict) or isinstance(got, dict):
        if not (isinstance(want, dict) and isinstance(got, dict)) or set(got) != set(want):
            return INF
        return worst(tree_max_diff(got[k], want[k]) for k in want)
    if isinstance(want, list | tuple) or isinstance(got, list | tuple):
        if (not (isinstance(want, list | tuple) and isinstance(got, list | tuple))
                or len(got) != len(want)):
            return INF
        return worst(tree_max_diff(g, w) for g, w in zip(got, want, strict=True))
    return _leaf_diff(got, want)


def worst_key(got: Any, want: dict[str, Any]) -> str:
    """For messages only: the key of ``want`` where ``got`` differs most (a NaN first)."""
    found, largest = "", -1.0
    for key in want:
        diff = tree_max_diff(got.get(key) if isinstance(got, dict) else None, want[key])
        if math.isnan(diff):
            return key
        if diff > largest:
            found, largest = key, diff
    return found


def moments(optim: Any) -> dict[str, Any]:
    """The per-parameter AdamW state of a run's ``final_state.pt`` ``optim`` entry, keyed by
    parameter name (``{}`` when it is not shaped like one)."""
    state = optim.get("state") if isinstance(optim, dict) else None
    return state if isinstance(state, dict) else {}
