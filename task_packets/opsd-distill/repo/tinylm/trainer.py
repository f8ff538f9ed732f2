"""The training loop: supervised fine-tuning (SFT) on generated addition problems."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tinylm.checkpoint import full_state, load_checkpoint, save_checkpoint
from tinylm.config import TrainConfig
from tinylm.data import ProblemStream, SFTBatch, collate_sft, heldout_problems
from tinylm.evaluate import heldout_metrics
from tinylm.export import export_model
from tinylm.model import ModelConfig, TinyLM
from tinylm.parallel import Runtime, init_runtime, parallelize, shutdown

DTYPES = {"fp32": torch.float32, "fp64": torch.float64}
METRICS_NAME = "metrics.jsonl"
FINAL_STATE_NAME = "final_state.pt"
SUMMARY_NAME = "summary.json"


def lr_lambda(warmup_steps: int, total_steps: int):
    """Linear warmup, then cosine decay to 10% of the peak learning rate."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def sft_loss(logits: torch.Tensor, batch: SFTBatch, rt: Runtime) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy per answer token, averaged over the answer tokens of the GLOBAL batch.

    Ranks hold different numbers of answer tokens, and DDP/FSDP average gradients over ranks, so
    each rank scales its local sum by world_size / global_count: the averaged gradient is then
    exactly the gradient of the global token mean, as in one process with the whole batch.
    """
    nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2) if logits.dtype == torch.bfloat16
                          else logits[:, :-1].transpose(1, 2), batch.tokens[:, 1:], reduction="none")
    mask = batch.loss_mask.to(nll.dtype)
    local_sum = (nll * mask).sum()
    global_count = rt.all_reduce_sum(mask.sum())
    loss = local_sum * rt.world_size / global_count
    global_mean = rt.all_reduce_sum(local_sum.detach()) / global_count
    return loss, {"loss": global_mean.item(), "answer_tokens": global_count.item()}


def build_model(cfg: TrainConfig, rt: Runtime) -> tuple[nn.Module, ModelConfig]:
    model_cfg = ModelConfig()
    # Same seed on every rank: all ranks start from identical parameters before wrapping.
    torch.manual_seed(cfg.seed)
    model = TinyLM(model_cfg).to(device=rt.device, dtype=DTYPES[cfg.dtype])
    return parallelize(model, rt), model_cfg


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run one training job; returns the summary (complete on rank 0)."""
    t_start = time.perf_counter()
    rt = init_runtime(cfg.config)
    try:
        return _train(cfg, rt, t_start)
    finally:
        shutdown(rt)


def _train(cfg: TrainConfig, rt: Runtime, t_start: float) -> dict[str, Any]:
    model, model_cfg = build_model(cfg, rt)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.warmup_steps, cfg.steps))
    stream = ProblemStream(cfg.global_batch, seed=cfg.seed)
    local = rt.local_slice(cfg.global_batch)

    start = 0
    if cfg.resume is not None:
        template = {"step": 0, "scheduler": scheduler.state_dict(), "data": stream.state_dict()}
        loaded = load_checkpoint(cfg.resume, model, optimizer, template, rt)
        scheduler.load_state_dict(loaded["scheduler"])
        stream.load_state_dict(loaded["data"])
        start = int(loaded["step"])

    metrics_file = None
    if rt.is_main and cfg.out is not None:
        cfg.out.mkdir(parents=True, exist_ok=True)
        metrics_file = (cfg.out / METRICS_NAME).open("a" if cfg.resume else "w")

    t_train = time.perf_counter()
    last: dict[str, float] = {}
    try:
        model.train()
        for step in range(start, cfg.steps):
            batch = _to_device(collate_sft(stream.next_global_batch()[local]), rt.device)
            with rt.autocast():
                logits = model(batch.tokens)
            loss, stats = sft_loss(logits, batch, rt)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()

            last = {"step": step, "lr": lr, **stats}
            if metrics_file is not None:
                metrics_file.write(json.dumps(last) + "\n")
                metrics_file.flush()
            if cfg.ckpt is not None and cfg.save_every and (step + 1) % cfg.save_every == 0:
                train_state = {"step": step + 1, "scheduler": scheduler.state_dict(), "data": stream.state_dict()}
                save_checkpoint(cfg.ckpt / f"step-{step + 1}", model, optimizer, train_state, rt)
    finally:
        if metrics_file is not None:
            metrics_file.close()
    train_wall = time.perf_counter() - t_train

    final = full_state(model, optimizer, rt)
    summary: dict[str, Any] = {}
    if rt.is_main:
        assert final is not None
        summary = {
            "config": cfg.to_json(),
            "world_size": rt.world_size,
            "start_step": start,
            "final_step": cfg.steps,
            "final_loss": last.get("loss"),
            "train_wall_s": train_wall,
        }
        if not cfg.no_eval:
            eval_model = TinyLM(model_cfg).to(DTYPES[cfg.dtype])
            eval_model.load_state_dict(final["model"])
            summary["heldout"] = heldout_metrics(eval_model, heldout_problems())
        if cfg.export is not None:
            export_model(cfg.export, final["model"], model_cfg)
        if cfg.out is not None:
            torch.save(final, cfg.out / FINAL_STATE_NAME)
            summary["wall_s"] = time.perf_counter() - t_start
            (cfg.out / SUMMARY_NAME).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _to_device(batch: SFTBatch, device: torch.device) -> SFTBatch:
    return SFTBatch(tokens=batch.tokens.to(device), loss_mask=batch.loss_mask.to(device))


def read_metrics(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / METRICS_NAME).read_text().splitlines()]
