"""Held-out evaluation: teacher-forced answer loss and greedy exact match.

Evaluation runs on rank 0 over a plain ``TinyLM`` rebuilt from the reconstructed full state, so
the numbers do not depend on the configuration that trained the model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tinylm.data import ANSWER_LEN, Problems, Tokenizer, collate_sft


@torch.no_grad()
def greedy_complete(model: nn.Module, prompts: torch.Tensor, max_new: int = ANSWER_LEN) -> torch.Tensor:
    """Greedy continuation ``[B, max_new]`` of ``prompts [B, P]``; PAD after the first EOS."""
    seq = prompts
    done = torch.zeros(prompts.shape[0], dtype=torch.bool, device=prompts.device)
    out = []
    for _ in range(max_new):
        nxt = model(seq)[:, -1].argmax(dim=-1)
        nxt = torch.where(done, torch.full_like(nxt, Tokenizer.PAD), nxt)
        out.append(nxt)
        done |= nxt == Tokenizer.EOS
        seq = torch.cat([seq, nxt[:, None]], dim=1)
    return torch.stack(out, dim=1)


@torch.no_grad()
def heldout_metrics(model: nn.Module, problems: Problems) -> dict[str, float]:
    """``loss``: mean NLL per answer token (digits and EOS); ``exact_match``: greedy accuracy."""
    model.eval()
    batch = collate_sft(problems)
    logits = model(batch.tokens)[:, :-1].double()
    nll = F.cross_entropy(logits.transpose(1, 2), batch.tokens[:, 1:], reduction="none")
    loss = (nll * batch.loss_mask).sum() / batch.loss_mask.sum()
    completions = greedy_complete(model, problems.prompts())
    exact = (completions == problems.answers()).all(dim=1).double().mean()
    return {"loss": loss.item(), "exact_match": exact.item()}
