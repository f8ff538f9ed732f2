"""The training loop shared by every configuration."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tinylm.checkpoint import full_state, load_checkpoint, save_checkpoint
from tinylm.config import ModelConfig, TrainConfig
from tinylm.data import MarkovLanguage, TokenStream, heldout_tokens, local_slice
from tinylm.distributed import Runtime, all_reduce_mean, parallelize, setup, teardown
from tinylm.export import export_model
from tinylm.model import TinyLM

DTYPES = {"fp32": torch.float32, "fp64": torch.float64}


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy; low-precision logits are upcast for a stable softmax."""
    if logits.dtype in (torch.bfloat16, torch.float16):
        logits = logits.float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int,
                   total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup to lr, then linear decay to 10% of lr at total_steps."""
    def factor(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return (step + 1) / warmup_steps
        span = max(1, total_steps - warmup_steps)
        return 1.0 - 0.9 * min(1.0, (step - warmup_steps) / span)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@torch.no_grad()
def heldout_loss(model: nn.Module, cfg: ModelConfig, dtype: torch.dtype) -> float:
    """The quality objective: mean cross-entropy on the fixed held-out set (no aux loss)."""
    was_training = model.training
    model.eval()
    tokens = heldout_tokens(MarkovLanguage(cfg.vocab_size, cfg.seq_len))
    logits, _ = model(tokens[:, :-1])
    model.train(was_training)
    return lm_loss(logits.to(dtype), tokens[:, 1:]).item()


def build_model(cfg: TrainConfig, rt: Runtime) -> nn.Module:
    dtype = DTYPES[cfg.dtype]
    # Same seed on every rank: data parallelism needs identical initial weights.
    torch.manual_seed(cfg.seed)
    model = TinyLM(cfg.model).to(dtype=dtype)
    return model.to(rt.device)


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run one configuration end to end; returns the summary (also written by rank 0)."""
    cfg.validate()
    rt = setup(cfg.config)
    try:
        return _train(cfg, rt)
    finally:
        teardown()


def _train(cfg: TrainConfig, rt: Runtime) -> dict[str, Any]:
    started = time.perf_counter()
    dtype = DTYPES[cfg.dtype]
    model = parallelize(build_model(cfg, rt), rt)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = make_scheduler(optimizer, cfg.warmup_steps, cfg.steps)
    stream = TokenStream(MarkovLanguage(cfg.model.vocab_size, cfg.model.seq_len),
                         cfg.global_batch, cfg.seed)
    # A per-rank stream for dropout; it is checkpointed under a rank-suffixed key.
    torch.manual_seed(cfg.seed + 1 + rt.rank)
    if cfg.resume is not None:
        load_checkpoint(cfg.resume, model, optimizer, scheduler, stream, rt)

    metrics_file = None
    if rt.is_main and cfg.out is not None:
        cfg.out.mkdir(parents=True, exist_ok=True)
        metrics_file = (cfg.out / "metrics.jsonl").open("a" if cfg.resume else "w")

    model.train()
    last_loss = math.nan
    while stream.step < cfg.steps:
        step = stream.step
        batch = local_slice(stream.next_global_batch(), rt.rank, rt.world_size).to(rt.device)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        lr = optimizer.param_groups[0]["lr"]
        with rt.autocast():
            logits, aux_loss = model(inputs)
            ce = lm_loss(logits, targets)
            loss = ce + aux_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()

        # Each rank's loss is the mean over its equal slice, so the rank mean is the global one.
        last_loss = all_reduce_mean(ce, rt).item()
        aux_value = all_reduce_mean(aux_loss.float(), rt).item()
        if metrics_file is not None:
            metrics_file.write(json.dumps({"step": step, "loss": last_loss, "aux_loss": aux_value,
                                           "lr": lr}) + "\n")
            metrics_file.flush()
        if cfg.save_every and (step + 1) % cfg.save_every == 0 and cfg.ckpt is not None:
            save_checkpoint(cfg.ckpt / f"step_{step + 1}", model, optimizer, scheduler, stream, rt)
    if metrics_file is not None:
        metrics_file.close()

    state = full_state(model, optimizer)  # collective; only rank 0 receives the tensors
    summary: dict[str, Any] = {}
    if rt.is_main:
        eval_model = TinyLM(cfg.model).to(dtype=dtype)
        eval_model.load_state_dict(state["model"], strict=True)
        summary = {
            "config": cfg.config,
            "world_size": rt.world_size,
            "dtype": cfg.dtype,
            "steps": cfg.steps,
            "global_batch": cfg.global_batch,
            "seed": cfg.seed,
            "final_train_loss": last_loss,
            "heldout_loss": heldout_loss(eval_model, cfg.model, dtype),
            "n_params": sum(p.numel() for p in eval_model.parameters()),
            "wall_s": time.perf_counter() - started,
        }
        if cfg.export is not None:
            export_model(cfg.export, state["model"], cfg.model)
        if cfg.out is not None:
            torch.save(state, cfg.out / "final_state.pt")
            (cfg.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
