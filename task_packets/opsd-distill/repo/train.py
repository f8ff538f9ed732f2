"""Entry point for every configuration.

One process:   python train.py --config cpu-1 --steps 300 --out /tmp/run
Two processes: torchrun --nnodes 1 --nproc-per-node 2 --master-addr 127.0.0.1 \
                   --master-port 29511 train.py --config gloo-ddp-2 --steps 300 --out /tmp/run
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tinylm.config import TrainConfig
from tinylm.parallel import CONFIGURATIONS
from tinylm.trainer import train


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    d = TrainConfig()
    p = argparse.ArgumentParser(description="Train tinylm on generated addition problems.")
    p.add_argument("--config", choices=sorted(CONFIGURATIONS), default=d.config)
    p.add_argument("--steps", type=int, default=d.steps, help="total optimizer steps")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--global-batch", type=int, default=d.global_batch, help="problems per step, all ranks")
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps)
    p.add_argument("--dtype", choices=["fp32", "fp64"], default=d.dtype)
    p.add_argument("--out", type=Path, default=None, help="metrics.jsonl, final_state.pt, summary.json")
    p.add_argument("--ckpt", type=Path, default=None, help="checkpoint folder (step-N subfolders)")
    p.add_argument("--save-every", type=int, default=0, help="checkpoint every N steps (needs --ckpt)")
    p.add_argument("--resume", type=Path, default=None, help="a step-N checkpoint folder to continue from")
    p.add_argument("--export", type=Path, default=None, help="write the tinylm-export-v1 file here")
    p.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation")
    a = p.parse_args(argv)
    return TrainConfig(
        config=a.config, steps=a.steps, seed=a.seed, global_batch=a.global_batch, lr=a.lr,
        weight_decay=a.weight_decay, warmup_steps=a.warmup_steps, dtype=a.dtype, out=a.out,
        ckpt=a.ckpt, save_every=a.save_every, resume=a.resume, export=a.export, no_eval=a.no_eval,
    )


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    summary = train(cfg)
    if summary:
        print(json.dumps({k: summary[k] for k in ("final_step", "final_loss", "heldout") if k in summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
