# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""The judge's own training loop and held-out loss for hybrid models (TASK.md's fixed settings).

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

Everything here runs in the judge's process, from trusted pieces only:
- the model function is the candidate's *exported graph*, run by ``graph_exec`` (the graph is
  data; every operator is torch's own);
- data, held-out set, loss and LR schedule are the pristine baseline's (``GRADING_BASELINE``,
  root-owned, the task does not touch them): ``MarkovSource``, ``ShardedBatches``,
  ``heldout_batches``, ``lm_loss``, ``make_scheduler``;
- the optimizer is ``torch.optim.AdamW`` with TASK.md's settings (lr 3e-3, betas (0.9, 0.95),
  weight decay 0.01, 10 warmup steps then cosine decay), one global batch of 16 per step.

So a run's outputs can be checked against what the specified training actually reaches, not
only against another run of the same candidate.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import torch
from oracle_lib import baseline_dir, kept_environment, moments

from grading.compare import INF, as_float, max_abs_diff, max_abs_diff_states, worst

LR, BETAS, WEIGHT_DECAY, WARMUP, GLOBAL_BATCH = 3e-3, (0.9, 0.95), 0.01, 10, 16
HELDOUT_BATCHES = 8
# A perturbed checkpoint's weights: the step-10 state plus N(0, PERTURB_STD) noise drawn here.
PERTURB_SEED, PERTURB_STD = 20261130, 0.01


class Forward(Protocol):
    """A model as a function of its state: ``graph_exec.Program`` or :class:`PristineModel`."""

    parameter_keys: list[str]
    state_keys: list[str]

    def __call__(self, state: Mapping[str, torch.Tensor], tokens: torch.Tensor
                 ) -> torch.Tensor: ...


def pristine(module: str) -> ModuleType:
    """A module of the pristine baseline's ``hybridlm`` (the judge's read-only copy)."""
    root = baseline_dir()
    assert root is not None, "GRADING_BASELINE is not set"
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    # The baseline's trainer pulls in torch.distributed and torch.export, whose first import
    # writes into os.environ, which candidate processes inherit.
    with kept_environment():
        loaded = importlib.import_module(f"hybridlm.{module}")
    assert str(loaded.__file__).startswith(str(root)), f"{loaded.__file__} is not the baseline's"
    return loaded


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """One intra-op thread, as every run of the task uses (results must not depend on the
    grading machine's core count)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@functools.cache
def _source() -> Any:
    data = pristine("data")
    return data.MarkovSource(vocab_size=64, seq_len=32)


def global_batch(index: int, seed: int = 0) -> torch.Tensor:
    """Batch ``index`` of the training stream (every rank slices this same global batch)."""
    data = pristine("data")
    return data.ShardedBatches(_source(), GLOBAL_BATCH, seed, 0, 1).global_batch_at(index)


@functools.cache
def lr_factor(step: int, total_steps: int) -> float:
    trainer = pristine("trainer")
    dummy = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    return float(trainer.make_scheduler(dummy, WARMUP, total_steps).lr_lambdas[0](step))


class PristineModel:
    """The pristine baseline's all-attention ``Transformer`` as a function of its state (the
    default pattern must be exactly this model)."""

    def __init__(self) -> None:
        model = pristine("model")
        self.module = model.Transformer(model.ModelArgs())
        self.parameter_keys = [name for name, _ in self.module.named_parameters()]
        self.state_keys = list(self.module.state_dict())

    def __call__(self, state: Mapping[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(self.module, dict(state), (tokens,))

    @staticmethod
    def seeded(seed: int = 0) -> dict[str, torch.Tensor]:
        """The initial weights ``train`` starts from with ``seed`` (the global RNG restored)."""
        model = pristine("model")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return {k: v.detach().clone()
                    for k, v in model.Transformer(model.ModelArgs()).state_dict().items()}


class _Model:
    """The program as a callable module for the pristine ``lm_loss``, in chunks of its batch."""

    def __init__(self, program: Forward, state: Mapping[str, torch.Tensor], batch: int) -> None:
        self.program, self.state, self.batch = program, state, batch

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[0] == self.batch:
            return self.program(self.state, tokens)
        assert tokens.shape[0] % self.batch == 0, (tokens.shape, self.batch)
        return torch.cat([self.program(self.state, chunk)
                          for chunk in tokens.split(self.batch)], dim=0)


@dataclass
class Trajectory:
    state: dict[str, torch.Tensor]  # parameters and buffers after the last step
    optim: dict[str, dict[str, torch.Tensor]]  # AdamW state per parameter key
    losses: list[float]  # the global-batch training loss of each step
    lrs: list[float]


def replay(program: Forward, batch: int, init: Mapping[str, torch.Tensor], *, dtype: torch.dtype,
           total_steps: int, start: int = 0, stop: int | None = None,
           optim: Mapping[str, Mapping[str, torch.Tensor]] | None = None,
           seed: int = 0) -> Trajectory:
    """Steps ``start .. stop - 1`` of the specified training from ``init`` (and, when resuming,
    the AdamW state ``optim``), with ``program`` (exported for batch ``batch``) as the model."""
    with one_thread(), kept_environment():
        return _replay(program, batch, init, dtype=dtype, total_steps=total_steps, start=start,
                       stop=stop, optim=optim, seed=seed)


def _replay(program: Forward, batch: int, init: Mapping[str, torch.Tensor], *,
            dtype: torch.dtype, total_steps: int, start: int, stop: int | None,
            optim: Mapping[str, Mapping[str, torch.Tensor]] | None, seed: int) -> Trajectory:
    trainer = pristine("trainer")
    stop = total_steps if stop is None else stop
    params = {k: init[k].detach().to(dtype).clone().requires_grad_(True)
              for k in program.parameter_keys}
    buffers = {k: init[k].detach().clone() for k in program.state_keys if k not in params}
    state = {**params, **buffers}
    opt = torch.optim.AdamW(list(params.values()), lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)
    if optim is not None:
        for key, p in params.items():
            saved = optim[key]
            opt.state[p] = {"step": saved["step"].detach().clone().to(torch.float32),
                            "exp_avg": saved["exp_avg"].detach().to(dtype).clone(),
                            "exp_avg_sq": saved["exp_avg_sq"].detach().to(dtype).clone()}
    model = _Model(program, state, batch)
    losses, lrs = [], []
    for step in range(start, stop):
        lr = LR * lr_factor(step, total_steps)
        for group in opt.param_groups:
            group["lr"] = lr
        loss = trainer.lm_loss(model, global_batch(step, seed))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        lrs.append(lr)
    out_optim = {k: {name: t.detach().clone() for name, t in opt.state[p].items()}
                 for k, p in params.items() if p in opt.state}
    return Trajectory(state={k: v.detach().clone() for k, v in state.items()}, optim=out_optim,
                      losses=losses, lrs=lrs)


@torch.no_grad()
def heldout_loss(program: Forward, batch: int, state: Mapping[str, torch.Tensor]) -> float:
    """Mean cross-entropy over the fixed held-out set (the pristine ``evaluate``'s definition),
    of ``program`` with ``state`` cast to fp32."""
    trainer, data = pristine("trainer"), pristine("data")
    missing = sorted(set(program.state_keys) - set(state))
    assert not missing, f"the state lacks {missing[:5]}"
    weights = {k: state[k].detach().to(torch.float32) for k in program.state_keys}
    model = _Model(program, weights, batch)
    total = torch.zeros((), dtype=torch.float64)
    with one_thread(), kept_environment():
        for held in data.heldout_batches(_source(), n_batches=HELDOUT_BATCHES):
            chunks = [trainer.lm_loss(model, chunk).double() for chunk in held.split(batch)]
            total += torch.stack(chunks).mean()
    return float(total) / HELDOUT_BATCHES


def perturbed(state: Mapping[str, torch.Tensor], keys: list[str]) -> dict[str, torch.Tensor]:
    """``state`` (the judge's own) with N(0, PERTURB_STD) noise drawn by the judge added to the
    parameters ``keys``: a state no uninterrupted run passes through, so only a run that really
    loads it can end where the judge's replay from it ends."""
    gen = torch.Generator().manual_seed(PERTURB_SEED)
    out = {k: v.detach().clone() for k, v in state.items()}
    for key in sorted(keys):
        value = out[key]
        noise = torch.randn(value.shape, generator=gen, dtype=torch.float64) * PERTURB_STD
        out[key] = (value.double() + noise).to(value.dtype)
    return out


def write_checkpoint(contents: dict[str, Any], folder: Path) -> Path:
    """``contents`` (a checkpoint's nested state, as ``dcp_to_torch_save`` gives it) saved by
    the judge as a one-writer DCP checkpoint in ``folder``."""
    import torch.distributed.checkpoint as dcp

    with kept_environment():
        dcp.save(contents, checkpoint_id=str(folder), no_dist=True)
    return folder


# ---------------------------------------------------------------------------------------------
# A run's outputs against a trajectory of the judge's (``grading.compare``: NaN-safe, infinity
# when the structure differs)


def state_error(model: Any, traj: Trajectory) -> float:
    """Largest parameter difference of a run's final model from the judge's."""
    return max_abs_diff_states(model, traj.state)


def optim_error(optim: Any, traj: Trajectory) -> float:
    """Largest difference of a run's AdamW state (step, exp_avg, exp_avg_sq per parameter)
    from the judge's."""
    got = moments(optim)
    if set(got) != set(traj.optim):
        return INF
    return worst(max_abs_diff(got[k].get(name) if isinstance(got[k], dict) else None, want)
                 for k, saved in traj.optim.items() for name, want in saved.items()
                 if name in ("step", "exp_avg", "exp_avg_sq"))


def metrics_errors(records: Any, traj: Trajectory, first_step: int = 0) -> tuple[float, float]:
    """(loss, lr) differences of a run's metrics.jsonl records from the judge's steps;
    infinity when the records are not exactly the steps replayed."""
    steps = list(range(first_step, first_step + len(traj.losses)))
    if (not isinstance(records, list) or len(records) != len(steps)
            or not all(isinstance(r, dict) for r in records)
            or [r.get("step") for r in records] != steps):
        return INF, INF
    losses = torch.tensor([as_float(r.get("loss")) for r in records], dtype=torch.float64)
    lrs = torch.tensor([as_float(r.get("lr")) for r in records], dtype=torch.float64)
    return (max_abs_diff(losses, torch.tensor(traj.losses, dtype=torch.float64)),
            max_abs_diff(lrs, torch.tensor(traj.lrs, dtype=torch.float64)))
