"""The training loop shared by every configuration (cpu-1, DDP, FSDP2; CPU or CUDA)."""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hybridlm import checkpoint
from hybridlm.data import MarkovSource, ShardedBatches, heldout_batches
from hybridlm.export import write_export
from hybridlm.model import ModelArgs, Transformer
from hybridlm.parallel import DistContext, all_reduce_mean, parallelize, setup, teardown

DTYPES = {"fp32": torch.float32, "fp64": torch.float64}


@dataclass
class TrainConfig:
    config: str = "cpu-1"
    steps: int = 200
    seed: int = 0
    global_batch: int = 16
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 10
    dtype: str = "fp32"
    model: ModelArgs = field(default_factory=ModelArgs)
    out: Path | None = None
    # Save a DCP checkpoint to ckpt/step-K every `save_every` steps (0: never).
    save_every: int = 0
    ckpt: Path | None = None
    # A checkpoint folder (ckpt/step-K) to continue from; `steps` stays the total.
    resume: Path | None = None
    # Where rank 0 writes the torch.export program of the final model (None: no export).
    export: Path | None = None
    # Held-out evaluation at the end (a fixed set, independent of the seed).
    eval_batches: int = 8


def make_scheduler(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup then cosine decay to 10% of the peak."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def lm_loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())


@torch.no_grad()
def evaluate(model: nn.Module, source: MarkovSource, ctx: DistContext, n_batches: int) -> float:
    """Mean held-out loss; every rank evaluates its slice (FSDP needs all ranks in forward)."""
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=ctx.device)
    for batch in heldout_batches(source, n_batches=n_batches):
        per_rank = batch.shape[0] // ctx.world_size
        local = batch[ctx.rank * per_rank:(ctx.rank + 1) * per_rank].to(ctx.device)
        with autocast(ctx):
            total += lm_loss(model, local).double()
    model.train()
    return float(all_reduce_mean(total, ctx)) / n_batches


def autocast(ctx: DistContext) -> contextlib.AbstractContextManager[Any]:
    if ctx.config.bf16_autocast:
        return torch.autocast(ctx.device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train(cfg: TrainConfig, ctx: DistContext) -> dict[str, Any]:
    """Run (or resume) training in an already set-up process group; returns the summary."""
    started = time.perf_counter()
    dtype = DTYPES[cfg.dtype]
    # Same seed on every rank: identical initial weights before DDP/FSDP sees them.
    torch.manual_seed(cfg.seed)
    model = Transformer(cfg.model).to(device=ctx.device, dtype=dtype)
    n_params = sum(p.numel() for p in model.parameters())
    model = parallelize(model, ctx)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                  betas=(0.9, 0.95))
    scheduler = make_scheduler(optimizer, cfg.warmup_steps, cfg.steps)
    source = MarkovSource(vocab_size=cfg.model.vocab_size, seq_len=cfg.model.max_seq_len)
    data = ShardedBatches(source, cfg.global_batch, cfg.seed, ctx.rank, ctx.world_size)

    start = 0
    if cfg.resume is not None:
        start = checkpoint.load_checkpoint(cfg.resume, model, optimizer, scheduler, data, ctx)

    metrics = None
    if ctx.is_main and cfg.out is not None:
        cfg.out.mkdir(parents=True, exist_ok=True)
        metrics = (cfg.out / "metrics.jsonl").open("a" if cfg.resume else "w")
    loss_value = float("nan")
    try:
        model.train()
        for step in range(start, cfg.steps):
            batch = data.next().to(ctx.device)
            with autocast(ctx):
                loss = lm_loss(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()
            # Each rank's loss is the mean over its equal slice, so the rank mean is the
            # global-batch loss.
            loss_value = float(all_reduce_mean(loss.detach(), ctx))
            if metrics is not None:
                metrics.write(json.dumps({"step": step, "loss": loss_value, "lr": lr}) + "\n")
            if cfg.save_every and cfg.ckpt is not None and (step + 1) % cfg.save_every == 0:
                checkpoint.save_checkpoint(cfg.ckpt / f"step-{step + 1}", model, optimizer,
                                           scheduler, data, step + 1, ctx)
    finally:
        if metrics is not None:
            metrics.close()
    train_s = time.perf_counter() - started

    heldout = evaluate(model, source, ctx, cfg.eval_batches)
    final = checkpoint.full_state(model, optimizer)  # collective: every rank calls it
    summary: dict[str, Any] = {
        "config": ctx.config.name,
        "world_size": ctx.world_size,
        "steps": cfg.steps,
        "resumed_from": start,
        "seed": cfg.seed,
        "global_batch": cfg.global_batch,
        "dtype": cfg.dtype,
        "model": asdict(cfg.model),
        "n_params": n_params,
        "final_loss": loss_value,
        "heldout_loss": heldout,
        "train_s": round(train_s, 3),
    }
    if ctx.is_main:
        if cfg.export is not None:
            info = write_export(cfg.export, cfg.model, final["model"])
            summary["export_ops"] = info["ops"]
        if cfg.out is not None:
            torch.save(final, cfg.out / "final_state.pt")
            (cfg.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def run(cfg: TrainConfig) -> dict[str, Any]:
    """Set up the configuration's process group, train, tear down."""
    ctx = setup(cfg.config)
    try:
        return train(cfg, ctx)
    finally:
        teardown(ctx)
