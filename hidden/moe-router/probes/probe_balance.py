"""2-rank probe of the balance statistics (run by the grading launcher, one process per rank).

usage: python probe_balance.py OUT_DIR INPUTS   (cwd: the candidate tree, on PYTHONPATH)

Runs as the candidate uid and is readable by it: it holds no expected value and no canary.
INPUTS (written by the checks, read with ``weights_only``) holds the model config, the fixed
parameters, each rank's tokens and the world size. Each rank builds the candidate's one-layer
MoE TinyLM (fp64) with those parameters, wraps it with the candidate's own
``tinylm.distributed.setup("gloo-ddp-2")`` / ``parallelize`` (DDP), runs one training forward
and backward on its tokens and records the aux loss, then a training-mode forward of the
unwrapped model under ``torch.no_grad()`` on both ranks. Then rank 0 alone runs eval-mode
forwards of the unwrapped model (under no_grad, then with autograd on) while rank 1 runs no
collective and only waits for a marker file: an eval forward that runs a collective blocks
rank 0, rank 1 gives up after EVAL_WAIT_S and exits 3, and the launcher names it. The ranks
leave with os._exit after their last collective (no teardown), so only the MoE is on trial.
The checks compare the aux losses.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
from moe_probe import load_candidate_model

EVAL_WAIT_S = 30.0


def say(rank: int, msg: str) -> None:
    print(f"[probe rank {rank}] {msg}", flush=True)


def wait_for(path: Path, rank: int, what: str) -> None:
    deadline = time.monotonic() + EVAL_WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            say(rank, f"{what} did not happen within {EVAL_WAIT_S:g} s")
            os._exit(3)
        time.sleep(0.05)


def main(out: Path, inputs_path: Path) -> None:
    from tinylm.distributed import parallelize, setup

    inputs = torch.load(inputs_path, map_location="cpu", weights_only=True)
    rt = setup("gloo-ddp-2")
    rank, world = rt.rank, rt.world_size
    say(rank, f"process group up (world {world})")
    if world != inputs["world"]:
        raise SystemExit(f"probe expects {inputs['world']} ranks, got {world}")
    model = load_candidate_model(inputs["model_config"], inputs["params"])
    wrapped = parallelize(model, rt)
    tokens = inputs["tokens"][rank]
    wrapped.train()
    logits, aux = wrapped(tokens)
    (logits.double().mean() + aux).backward()  # DDP waits for its all-reduces here
    say(rank, f"training forward/backward done, aux {float(aux.detach())!r}")
    result = {"rank": rank, "world": world, "train_aux": float(aux.detach()),
              "train_aux_type": type(aux).__name__, "train_aux_dim": aux.dim()}
    # Training mode is the module's mode, not autograd's: a training-mode forward under
    # no_grad (both ranks, the same weights: backward changed none) still uses global counts.
    with torch.no_grad():
        _, nograd_aux = model(tokens)
    result["train_nograd_aux"] = float(nograd_aux)
    say(rank, f"training-mode forward under no_grad done, aux {result['train_nograd_aux']!r}")
    done = out / "eval_done"
    if rank == 0:
        model.eval()
        started = time.monotonic()
        with torch.no_grad():
            _, eval_aux = model(tokens)
        result["eval_aux"] = float(eval_aux)
        # Eval mode with autograd on (as a saliency pass or a loss with gradients would run).
        _, eval_grad_aux = model(tokens)
        result["eval_grad_aux"] = float(eval_grad_aux.detach())
        result["eval_s"] = time.monotonic() - started
        say(rank, f"eval forwards alone done, aux {result['eval_aux']!r} (no_grad), "
                  f"{result['eval_grad_aux']!r} (autograd on)")
        done.write_text("done\n")
    else:
        wait_for(done, rank, "rank 0's eval-mode forward (run on rank 0 alone, so it must run "
                 "no collective) returning")
    (out / f"rank{rank}.json").write_text(json.dumps(result) + "\n")
    # No collective is pending (DDP's backward waited for its all-reduces); leave without a
    # barrier or destroy_process_group, which the probe does not test. Rank 0 hosts the store,
    # so it leaves last.
    if rank == 0:
        wait_for(out / "rank1.json", rank, "rank 1 finishing")
    say(rank, "finished")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
