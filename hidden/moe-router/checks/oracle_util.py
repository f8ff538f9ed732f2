# HARNESS-CANARY-8a0e5fe7-3b11-4c19-b138-53348751b84e
"""Judge-side helpers of the moe-router checks: comparing the runs' saved states, and the
judge's own measurements of the weights a run left.

Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

No candidate import here. Building the candidate's model from fixed parameters is candidate
code and lives with the probes (``probes/moe_probe.py: load_candidate_model``). Every value read
from a run is hostile by assumption: comparisons go through ``grading.compare`` (plain fp64
tensors of the expected shape first, NaN-propagating reductions, the positive ``within``).

The anchors: a run's weights are measured by the judge alone, with ``moe_reference.py`` (the
independent re-implementation from TASK.md) on data from the pristine baseline's own
``tinylm/data.py`` (``GRADING_BASELINE``, root-owned, never the graded tree): the held-out set
the quality objective is defined on, and the training stream's global batches, on which the judge
can also replay a short run itself (the reference forward under the trainer's optimiser).
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import moe_reference as R
import torch

from grading.compare import INF, as_float, as_tensor, bitwise_equal, max_abs_diff, within, worst

# ln(64): the cross-entropy of predicting the 64-token vocabulary uniformly. A randomly
# initialised TinyLM sits above it (the trainer's initial MoE model measured 4.30 held-out), so
# a held-out loss clearly below it means the weights learned from the data.
UNIFORM_LOSS = math.log(R.VOCAB)


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items()
                for k, v in flatten(val, f"{prefix}/{key}").items()}
    if isinstance(obj, (list, tuple)):
        return {k: v for i, val in enumerate(obj)
                for k, v in flatten(val, f"{prefix}/{i}").items()}
    return {prefix: obj}


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def tensor_diff(x: Any, y: Any) -> float:
    """Largest ``|x - y|`` in fp64 of two candidate tensors: infinity unless both are plain
    non-empty tensors of one shape, NaN when either holds a non-finite value."""
    a = as_tensor(x)
    b = as_tensor(y, tuple(a.shape)) if a is not None else None
    if a is None or b is None:
        return INF
    if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())):
        return math.nan
    return float((a - b).abs().max())


def compare_states(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Max abs difference (fp64) of model and optimizer states, and whether all bits agree.

    NaN-safe: a non-finite value anywhere makes the difference NaN (never dropped by a max),
    anything that is not a plain tensor or number where the other side has one is infinitely
    far, and bitwise equality needs plain tensors of one dtype, shape and bits."""
    out: dict[str, Any] = {"bitwise_equal": True}
    for part in ("model", "optim"):
        fa = flatten(a.get(part, {})) if isinstance(a, dict) else {}
        fb = flatten(b.get(part, {})) if isinstance(b, dict) else {}
        if fa.keys() != fb.keys():
            out[f"{part}_key_mismatch"] = sorted(set(fa) ^ set(fb))[:8]
            out["bitwise_equal"] = False
            out[f"{part}_max_abs_diff"] = INF
            continue
        if not fa:
            out[f"{part}_key_mismatch"] = ["(empty)"]
            out["bitwise_equal"] = False
            out[f"{part}_max_abs_diff"] = INF
            continue
        diffs = []
        for key, x in fa.items():
            y = fb[key]
            if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
                diffs.append(tensor_diff(x, y))
                out["bitwise_equal"] &= bitwise_equal(x, y)
            elif _number(x) and _number(y):
                diffs.append(abs(float(x) - float(y)))
                out["bitwise_equal"] &= float(x) == float(y)
            else:
                same = type(x) is type(y) and isinstance(x, str | bool | type(None)) and x == y
                if not same:
                    diffs.append(INF)
                out["bitwise_equal"] &= same
        out[f"{part}_max_abs_diff"] = worst(diffs)
    out["max_abs_diff"] = worst([out["model_max_abs_diff"], out["optim_max_abs_diff"]])
    out["bitwise_equal"] = bool(out["bitwise_equal"])
    return out


# ---------------------------------------------------------------------------------------------
# The pristine baseline's data (trusted: root-owned, never the graded tree)

_BASELINE_DATA: list[ModuleType] = []


def baseline_data() -> ModuleType:
    """The pristine baseline's ``tinylm/data.py`` (MarkovLanguage, TokenStream, local_slice,
    heldout_tokens), loaded under a private name so no ``tinylm`` package is imported here."""
    if not _BASELINE_DATA:
        root = os.environ.get("GRADING_BASELINE")
        if not root:
            raise RuntimeError("GRADING_BASELINE is not set: the judge has no pristine baseline "
                               "to take the task's data from")
        path = Path(root) / "tinylm" / "data.py"
        spec = importlib.util.spec_from_file_location("moe_judge_baseline_data", path)
        if spec is None or spec.loader is None:
            raise RuntimeError(f"cannot load the baseline's {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _BASELINE_DATA.append(module)
    return _BASELINE_DATA[0]


_HELDOUT: list[torch.Tensor] = []


def heldout_tokens() -> torch.Tensor:
    """The fixed held-out set the quality objective is measured on ([256, T + 1])."""
    if not _HELDOUT:
        data = baseline_data()
        _HELDOUT.append(data.heldout_tokens(data.MarkovLanguage(R.VOCAB, R.SEQ)))
    return _HELDOUT[0]


def training_batches(global_batch: int, seed: int, steps: int) -> torch.Tensor:
    """The first ``steps`` global batches of the trainer's stream, stacked ([steps * B, T + 1])."""
    data = baseline_data()
    stream = data.TokenStream(data.MarkovLanguage(R.VOCAB, R.SEQ), global_batch, seed)
    return torch.cat([stream.next_global_batch() for _ in range(steps)])


# ---------------------------------------------------------------------------------------------
# The judge's measurements of a run's weights


def schema_params(state: Any, cfg: R.Cfg) -> tuple[dict[str, torch.Tensor] | None, str]:
    """A run's model weights as plain fp64 tensors keyed by the export schema, or None and why
    (keys other than the schema's, a value that is not a plain tensor of the schema's shape)."""
    want = R.schema(cfg)
    if not isinstance(state, Mapping):
        return None, f"not a state dict ({type(state).__name__})"
    if set(state) != set(want):
        odd = sorted(set(map(str, state)) ^ set(want))
        return None, f"keys differ from the export schema ({odd[:4]})"
    params = {}
    for key, shape in want.items():
        value = as_tensor(state[key], shape)
        if value is None:
            return None, f"{key} is not a plain tensor of shape {shape}"
        params[key] = value
    return params, "ok"


def reference_loss(params: dict[str, torch.Tensor] | None, tokens: torch.Tensor,
                   cfg: R.Cfg) -> float:
    """The judge's cross-entropy (no aux) of ``params`` on ``tokens`` [N, T + 1], fp64, eval
    semantics (local statistics, no collective): infinity without weights, NaN when they or
    the loss are not finite."""
    if params is None:
        return INF
    if not all(bool(torch.isfinite(v).all()) for v in params.values()):
        return math.nan
    with torch.no_grad():
        losses = []
        for chunk in tokens.split(64):
            ref = R.forward(params, chunk[:, :-1], cfg)
            losses.append(R.cross_entropy(ref.logits, chunk[:, 1:]) * chunk.shape[0])
        return as_float(torch.stack(losses).sum() / tokens.shape[0])


def heldout_loss(params: dict[str, torch.Tensor] | None, cfg: R.Cfg) -> float:
    """The quality objective measured by the judge: the held-out cross-entropy of ``params``."""
    return reference_loss(params, heldout_tokens(), cfg)


def learned(loss: float, margin: float) -> bool:
    """The judge's held-out loss is at least ``margin`` below a uniform predictor's."""
    return within(loss, UNIFORM_LOSS - margin)


# The trainer's optimisation as the pristine baseline defines it and the task keeps it:
# train.py's defaults (--lr 3e-3, --weight-decay 0.01, --warmup-steps 10), torch's AdamW with its
# default betas and eps, trainer.make_scheduler (linear warmup, then linear decay to 10% of lr at
# the last step), loss = cross-entropy + aux, one optimizer step per global batch.
TRAIN_LR, TRAIN_WEIGHT_DECAY, TRAIN_WARMUP = 3e-3, 0.01, 10
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8


def _lr_factor(step: int, total: int) -> float:
    if step < TRAIN_WARMUP:
        return (step + 1) / TRAIN_WARMUP
    return 1.0 - 0.9 * min(1.0, (step - TRAIN_WARMUP) / max(1, total - TRAIN_WARMUP))


class _AdamW:
    """torch's single-tensor AdamW update of ``params`` in place, at the trainer's learning rate
    and schedule (written out; see :func:`replay_training` for why not ``torch.optim``)."""

    def __init__(self, params: dict[str, torch.Tensor]) -> None:
        self.params = params
        self.exp_avg = {k: torch.zeros_like(v) for k, v in params.items()}
        self.exp_avg_sq = {k: torch.zeros_like(v) for k, v in params.items()}

    def step(self, leaves: dict[str, torch.Tensor], step: int, steps: int) -> None:
        beta1, beta2 = ADAM_BETAS
        lr = TRAIN_LR * _lr_factor(step, steps)
        n = step + 1
        for key, leaf in leaves.items():
            grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
            p = self.params[key]
            p.mul_(1 - lr * TRAIN_WEIGHT_DECAY)
            self.exp_avg[key].lerp_(grad, 1 - beta1)
            self.exp_avg_sq[key].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (self.exp_avg_sq[key].sqrt() / math.sqrt(1 - beta2 ** n)).add_(ADAM_EPS)
            p.addcdiv_(self.exp_avg[key], denom, value=-lr / (1 - beta1 ** n))


def replay_training(start: dict[str, torch.Tensor], batches: torch.Tensor, cfg: R.Cfg,
                    steps: int, losses: list[tuple[float, float]] | None = None,
                    ) -> dict[str, torch.Tensor]:
    """The judge's own one-process training from ``start`` (fp64, no dropout): ``steps`` AdamW
    steps of the reference forward on consecutive global batches of ``batches``
    ([steps * B, T + 1]), minimising cross-entropy + ``cfg.aux_weight`` * the mean balance loss.
    The parameters it ends with, as plain fp64 tensors; each step's (cross-entropy, aux loss)
    before its update is appended to ``losses`` when given.

    AdamW is written out (torch's single-tensor update) rather than taken from ``torch.optim``:
    constructing a torch optimizer imports torch._dynamo, which sets TORCHINDUCTOR_CACHE_DIR in
    this process's environment to a folder under the judge's closed temporary folder, and every
    candidate process started afterwards inherits it and dies on its first optimizer."""
    params = {k: v.detach().clone() for k, v in start.items()}
    adam = _AdamW(params)
    for step, batch in enumerate(batches.chunk(steps)):
        leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        ref = R.forward(leaves, batch[:, :-1], cfg)
        ce = R.cross_entropy(ref.logits, batch[:, 1:])
        (ce + ref.aux).backward()
        if losses is not None:
            losses.append((as_float(ce.detach()), as_float(ref.aux.detach())))
        adam.step(leaves, step, steps)
    return params


def replay_training_with_dropout(start: dict[str, torch.Tensor], batches: torch.Tensor,
                                 cfg: R.Cfg, steps: int, dropout: float, seed: int,
                                 world_size: int,
                                 losses: list[tuple[float, float]] | None = None,
                                 ) -> dict[str, torch.Tensor]:
    """:func:`replay_training` with dropout, as the trainer runs it on ``world_size`` ranks:
    rank r trains on its contiguous slice of each global batch, its dropout masks drawn from
    its own generator (the trainer's ``torch.manual_seed(seed + 1 + rank)`` after the model is
    built, which the baseline defines and TASK.md keeps); the balance loss's f_e counts are
    summed over the ranks (TASK.md), P_e stays local; the gradient is the ranks' mean (DDP and
    FSDP average). Each step's logged pair is the ranks' mean cross-entropy and aux loss.

    This process's own generator state is restored afterwards."""
    params = {k: v.detach().clone() for k, v in start.items()}
    adam = _AdamW(params)
    with torch.random.fork_rng(devices=[]):
        rank_rng = []
        for rank in range(world_size):
            torch.manual_seed(seed + 1 + rank)
            rank_rng.append(torch.get_rng_state())
        for step, batch in enumerate(batches.chunk(steps)):
            slices = batch.chunk(world_size)
            # The routing does not depend on the counts: a first pass (the same masks) gives
            # each rank's local counts, whose sum every rank's balance loss then uses.
            local = []
            with torch.no_grad():
                for rank, part in enumerate(slices):
                    torch.set_rng_state(rank_rng[rank])
                    fwd = R.forward(params, part[:, :-1], cfg, dropout=dropout)
                    local.append([st.counts for st in fwd.layers])
            global_counts = [torch.stack(c).sum(0) for c in zip(*local, strict=True)] \
                if cfg.experts > 0 else None
            leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
            total = torch.zeros((), dtype=torch.float64)
            ces, auxes = [], []
            for rank, part in enumerate(slices):
                torch.set_rng_state(rank_rng[rank])
                ref = R.forward(leaves, part[:, :-1], cfg, global_counts, dropout=dropout)
                rank_rng[rank] = torch.get_rng_state()
                ce = R.cross_entropy(ref.logits, part[:, 1:])
                total = total + (ce + ref.aux) / world_size
                ces.append(as_float(ce.detach()))
                auxes.append(as_float(ref.aux.detach()))
            total.backward()
            if losses is not None:
                losses.append((sum(ces) / world_size, sum(auxes) / world_size))
            adam.step(leaves, step, steps)
    return params


def update_error(start: dict[str, torch.Tensor] | None, end: dict[str, torch.Tensor] | None,
                 replayed: dict[str, torch.Tensor]) -> float:
    """How far a run's update (``end - start``, all parameters as one vector) is from the
    judge's replayed one, relative to the replayed update's norm: 0 when the run trained exactly
    as the replay, 1 when it did not move; infinity without weights, NaN when not finite."""
    if start is None or end is None:
        return INF
    keys = sorted(replayed)
    run = torch.cat([(end[k] - start[k]).reshape(-1) for k in keys])
    judge = torch.cat([(replayed[k] - start[k]).reshape(-1) for k in keys])
    if not bool(torch.isfinite(run).all()):
        return math.nan
    return as_float((run - judge).norm() / judge.norm())


def scalar_diff(x: Any, y: Any) -> float:
    """``|x - y|`` of two candidate scalars (a number or a one-element tensor); NaN when either
    is not a real number."""
    return abs(as_float(x) - as_float(y))


def series(metrics: Any, key: str) -> torch.Tensor | None:
    """One logged field over a run's metrics.jsonl records as an fp64 tensor (None when a
    record is not a JSON object with a number there)."""
    if not isinstance(metrics, list) or not metrics:
        return None
    values = []
    for record in metrics:
        value = record.get(key) if isinstance(record, dict) else None
        if not _number(value):
            return None
        values.append(float(value))
    return torch.tensor(values, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------
# The all-experts setting: K = E with capacity above what a sequence can ask for. Every token
# goes to every expert and nothing is dropped, so routing order, the capacity rule and gate
# renormalisation (which divides by a sum of 1) cannot move the output: a model that computes
# TASK.md's MoE at all matches the reference there, whatever the routing details that
# test_moe_forward_matches_independent_reference judges. The aux loss is W * E * sum_e (1/E) P_e
# = W. The checks that must know they hold an MoE (config fields, eval purity, load_export)
# anchor to it.
ALL_EXPERTS_CFG = R.Cfg(experts=4, top_k=4, capacity_factor=1.25, aux_weight=0.05)
ALL_EXPERTS_FLAGS = ["--moe-experts", "4", "--moe-top-k", "4", "--moe-capacity-factor", "1.25",
                     "--moe-aux-weight", "0.05"]
# The reference solution vs moe_reference.py on it (fp64) measured ~1e-15; a model that is not
# the MoE (a plain average of the experts, a dense MLP) is off by >= 1e-2.
ALL_EXPERTS_ATOL = 1e-6


def all_experts_case(seed: int) -> dict[str, Any]:
    """Fixed parameters and tokens of the all-experts setting, for a probe."""
    return {"model_config": ALL_EXPERTS_CFG.model_config_kwargs(),
            "params": R.make_params(ALL_EXPERTS_CFG, seed),
            "tokens": R.fixed_tokens(4, seed)[:, :-1].clone()}


def all_experts_error(case: dict[str, Any], outputs: Any) -> tuple[float, float]:
    """(logits, aux) max abs difference between a probe's ``[logits, aux]`` on ``case`` and the
    reference's; infinity when the outputs are not a pair of plain tensors of the right shape."""
    with torch.no_grad():
        ref = R.forward(case["params"], case["tokens"], ALL_EXPERTS_CFG)
    if not isinstance(outputs, list | tuple) or len(outputs) != 2:
        return INF, INF
    logits, aux = outputs
    if as_tensor(aux, ()) is None:
        return max_abs_diff(logits, ref.logits), INF
    return max_abs_diff(logits, ref.logits), max_abs_diff(aux, ref.aux)
