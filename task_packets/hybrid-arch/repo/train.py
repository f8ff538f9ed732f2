"""The single entry point for every configuration.

One process:   python train.py --config cpu-1 --steps 200 --out /tmp/run
Two processes: torchrun --nnodes 1 --nproc-per-node 2 --master-addr 127.0.0.1 \
                   --master-port 29531 train.py --config gloo-ddp-2 --out /tmp/run
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from hybridlm.model import ModelArgs
from hybridlm.parallel import CONFIGS
from hybridlm.trainer import DTYPES, TrainConfig, run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train the tiny hybridlm language model.")
    p.add_argument("--config", choices=sorted(CONFIGS), default="cpu-1")
    p.add_argument("--steps", type=int, default=200, help="total optimizer steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--global-batch", type=int, default=16,
                   help="sequences per step over all ranks (each rank takes its slice)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--n-layers", type=int, default=4)
    p.add_argument("--out", type=Path, default=None,
                   help="folder for metrics.jsonl, final_state.pt and summary.json")
    p.add_argument("--save-every", type=int, default=0, help="checkpoint every K steps")
    p.add_argument("--ckpt", type=Path, default=None, help="checkpoint folder (step-K inside)")
    p.add_argument("--resume", type=Path, default=None, help="a checkpoint (ckpt/step-K)")
    p.add_argument("--export", type=Path, default=None,
                   help="write the torch.export program of the final model here (.pt2)")
    args = p.parse_args(argv)
    if args.save_every and args.ckpt is None:
        p.error("--save-every needs --ckpt")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = TrainConfig(
        config=args.config,
        steps=args.steps,
        seed=args.seed,
        global_batch=args.global_batch,
        lr=args.lr,
        warmup_steps=args.warmup_steps,
        dtype=args.dtype,
        model=ModelArgs(n_layers=args.n_layers),
        out=args.out,
        save_every=args.save_every,
        ckpt=args.ckpt,
        resume=args.resume,
        export=args.export,
    )
    summary = run(cfg)
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps({k: summary[k] for k in ("config", "steps", "final_loss",
                                                   "heldout_loss", "train_s")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
