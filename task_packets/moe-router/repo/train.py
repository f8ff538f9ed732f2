"""Train tinylm under one of the declared configurations.

One process:   python train.py --config cpu-1 --steps 100 --out runs/a
Two processes: torchrun --nnodes 1 --nproc-per-node 2 --master-addr 127.0.0.1 \
                   --master-port 29521 train.py --config gloo-ddp-2 --steps 100 --out runs/b
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tinylm.config import CONFIGURATIONS, ModelConfig, TrainConfig
from tinylm.trainer import train


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=CONFIGURATIONS, default="cpu-1")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--dtype", choices=["fp32", "fp64"], default="fp32")
    p.add_argument("--out", type=Path)
    p.add_argument("--ckpt", type=Path)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--resume", type=Path)
    p.add_argument("--export", type=Path)
    p.add_argument("--n-layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--ffn-hidden", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.0)
    a = p.parse_args(argv)
    model = ModelConfig(n_layers=a.n_layers, d_model=a.d_model, ffn_hidden=a.ffn_hidden,
                        dropout=a.dropout)
    return TrainConfig(config=a.config, steps=a.steps, seed=a.seed, global_batch=a.global_batch,
                       lr=a.lr, weight_decay=a.weight_decay, warmup_steps=a.warmup_steps,
                       dtype=a.dtype, out=a.out, ckpt=a.ckpt, save_every=a.save_every,
                       resume=a.resume, export=a.export, model=model)


def main(argv: list[str] | None = None) -> None:
    summary = train(parse_args(argv))
    if summary:
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
