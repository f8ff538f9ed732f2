# HARNESS-CANARY-8a0e5fe7-3b11-4c19-b138-53348751b84e
"""An independent re-implementation of tinylm with the MoE feed-forward, from TASK.md alone.

Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

It shares no code with the candidate: the parameters are plain tensors keyed by the documented
export schema, attention is an explicit masked softmax (not scaled_dot_product_attention), GELU
is written with erf, and capacity is served by an explicit queue walked token by token. It
returns the per-layer routing statistics the checks need (router probabilities, top-k choices,
kept assignments, per-expert counts).

With dropout (``forward(..., dropout=p)``, the training replay's only random part) the
attention goes through torch's ``scaled_dot_product_attention`` and the block's two dropouts
through ``torch.nn.functional.dropout``, called in the baseline model's order (per block: the
attention's own dropout, the dropout on the attention's output, the one on the feed-forward's
output): the masks are then the ones the baseline's dropout sites draw from the same generator
state, which TASK.md keeps (the MoE layer replaces the feed-forward and draws nothing).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

VOCAB, SEQ, D_MODEL, N_HEADS = 64, 32, 64, 4


@dataclass(frozen=True)
class Cfg:
    experts: int = 4
    top_k: int = 2
    capacity_factor: float = 1.25
    aux_weight: float = 0.01
    n_layers: int = 2
    ffn_hidden: int = 256
    d_model: int = D_MODEL
    vocab: int = VOCAB
    seq_len: int = SEQ
    n_heads: int = N_HEADS

    def model_config_kwargs(self) -> dict[str, Any]:
        return {"vocab_size": self.vocab, "seq_len": self.seq_len, "d_model": self.d_model,
                "n_layers": self.n_layers, "n_heads": self.n_heads,
                "ffn_hidden": self.ffn_hidden, "dropout": 0.0,
                "moe_experts": self.experts, "moe_top_k": self.top_k,
                "moe_capacity_factor": self.capacity_factor,
                "moe_aux_weight": self.aux_weight}


def schema(cfg: Cfg) -> dict[str, tuple[int, ...]]:
    """The export schema of TASK.md (MoE when experts > 0, else the dense one)."""
    d, h, v = cfg.d_model, cfg.ffn_hidden, cfg.vocab
    out: dict[str, tuple[int, ...]] = {"tok_emb.weight": (v, d), "pos_emb.weight": (cfg.seq_len, d)}
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        out |= {p + "ln1.weight": (d,), p + "ln1.bias": (d,), p + "attn.qkv.weight": (3 * d, d),
                p + "attn.proj.weight": (d, d), p + "ln2.weight": (d,), p + "ln2.bias": (d,)}
        if cfg.experts > 0:
            out[p + "ffn.router.weight"] = (cfg.experts, d)
            for e in range(cfg.experts):
                out[p + f"ffn.experts.{e}.w1.weight"] = (h, d)
                out[p + f"ffn.experts.{e}.w2.weight"] = (d, h)
        else:
            out[p + "ffn.w1.weight"] = (h, d)
            out[p + "ffn.w2.weight"] = (d, h)
    out |= {"norm.weight": (d,), "norm.bias": (d,), "head.weight": (v, d)}
    return out


def make_params(cfg: Cfg, seed: int, dtype: torch.dtype = torch.float64,
                router_scale: float = 0.15) -> dict[str, torch.Tensor]:
    """Deterministic parameters for every schema key, float32-representable, cast to dtype."""
    g = torch.Generator().manual_seed(seed)
    params = {}
    for key, shape in schema(cfg).items():
        if key.endswith(("ln1.weight", "ln2.weight", "norm.weight")):
            t = 1.0 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif key.endswith("bias"):
            t = 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif key.endswith("emb.weight"):
            t = 0.5 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif key.endswith("router.weight"):
            t = router_scale * torch.randn(shape, generator=g, dtype=torch.float64)
        else:
            t = torch.randn(shape, generator=g, dtype=torch.float64) / math.sqrt(shape[1])
        params[key] = t.to(torch.float32).to(dtype)
    return params


def _layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * w + b


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _attention(x: torch.Tensor, qkv_w: torch.Tensor, proj_w: torch.Tensor,
               n_heads: int) -> torch.Tensor:
    b, t, d = x.shape
    hd = d // n_heads
    q, k, v = (x @ qkv_w.T).split(d, dim=-1)
    q, k, v = (z.reshape(b, t, n_heads, hd).transpose(1, 2) for z in (q, k, v))
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v
    return y.transpose(1, 2).reshape(b, t, d) @ proj_w.T


@dataclass
class LayerStats:
    probs: torch.Tensor  # [B, T, E]
    choice: torch.Tensor  # [B, T, K] expert ids in torch.topk order
    kept: torch.Tensor  # [B, T, K] bool, within capacity
    counts: torch.Tensor  # [E] top-k assignments per expert, before capacity (local)
    topk_gap: float  # smallest gap between consecutive sorted probs among the top K+1


@dataclass
class Forward:
    logits: torch.Tensor
    aux: torch.Tensor
    layers: list[LayerStats] = field(default_factory=list)


def route(probs: torch.Tensor, top_k: int, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k choices and the capacity mask, served per sequence in (position, rank) order."""
    b, t, e = probs.shape
    choice = probs.topk(top_k, dim=-1).indices
    kept = torch.zeros(b, t, top_k, dtype=torch.bool)
    load = torch.zeros(b, e, dtype=torch.long)  # assignments accepted so far, per sequence
    rows = torch.arange(b)
    for pos in range(t):  # the queue: earlier tokens first, then choice rank within a token
        for r in range(top_k):
            ex = choice[:, pos, r]
            ok = load[rows, ex] < capacity
            kept[:, pos, r] = ok
            load[rows, ex] += ok.long()
    return choice, kept


def capacity(cfg: Cfg, t: int) -> int:
    """TASK.md's capacity of one expert in one sequence of ``t`` tokens."""
    return math.ceil(cfg.capacity_factor * t * cfg.top_k / cfg.experts)


CapacityRule = Callable[[Cfg, int], int]


def moe_layer(x: torch.Tensor, params: dict[str, torch.Tensor], prefix: str, cfg: Cfg,
              global_counts: torch.Tensor | None = None,
              capacity_rule: CapacityRule = capacity) -> tuple[torch.Tensor, torch.Tensor,
                                                               LayerStats]:
    """(output, balance loss, stats); ``global_counts`` replaces the local f_e counts;
    ``capacity_rule`` (cfg, tokens per sequence) -> capacity, TASK.md's unless the checks ask
    what another rule would give."""
    b, t, _ = x.shape
    e_n, k = cfg.experts, cfg.top_k
    logits = x @ params[prefix + "router.weight"].T
    probs = torch.softmax(logits.to(torch.float64), dim=-1)
    capacity = capacity_rule(cfg, t)
    with torch.no_grad():
        choice, kept = route(probs.detach(), k, capacity)
        srt = probs.detach().sort(dim=-1, descending=True).values[..., : min(k + 1, e_n)]
        gap = float((srt[..., :-1] - srt[..., 1:]).min()) if srt.shape[-1] > 1 else 1.0
    out = torch.zeros_like(x)
    for ex in range(e_n):
        w1 = params[prefix + f"experts.{ex}.w1.weight"]
        w2 = params[prefix + f"experts.{ex}.w2.weight"]
        y = _gelu(x @ w1.T) @ w2.T  # every token through every expert; masked below
        weight = torch.zeros(b, t, dtype=probs.dtype)
        for r in range(k):
            sel = (choice[..., r] == ex) & kept[..., r]
            weight = weight + torch.where(sel, probs[..., ex], torch.zeros_like(weight))
        out = out + y * weight.unsqueeze(-1).to(x.dtype)
    counts = torch.zeros(e_n, dtype=torch.float64)
    for ex in range(e_n):
        counts[ex] = float((choice == ex).sum())
    f_counts = counts if global_counts is None else global_counts
    fraction = f_counts / f_counts.sum()
    mean_prob = probs.reshape(-1, e_n).mean(0)
    balance = e_n * (fraction * mean_prob).sum()
    return out, balance, LayerStats(probs.detach(), choice, kept, counts, gap)


def _attention_with_dropout(x: torch.Tensor, qkv_w: torch.Tensor, proj_w: torch.Tensor,
                            n_heads: int, dropout: float) -> torch.Tensor:
    """Training-mode attention with dropout on its weights, as the baseline calls it (the
    same function draws the same mask from the same generator state)."""
    b, t, d = x.shape
    q, k, v = (x @ qkv_w.T).split(d, dim=-1)
    q, k, v = (z.reshape(b, t, n_heads, d // n_heads).transpose(1, 2) for z in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
    return y.transpose(1, 2).reshape(b, t, d) @ proj_w.T


def forward(params: dict[str, torch.Tensor], tokens: torch.Tensor, cfg: Cfg,
            global_counts: list[torch.Tensor] | None = None,
            capacity_rule: CapacityRule = capacity, dropout: float = 0.0) -> Forward:
    """The whole model; ``global_counts[i]`` (if given) is layer i's all-reduced count;
    ``capacity_rule`` as in :func:`moe_layer`; ``dropout`` > 0: training-mode dropout, drawn
    from the global generator (see the module's docstring)."""
    t = tokens.shape[1]
    x = params["tok_emb.weight"][tokens] + params["pos_emb.weight"][:t]
    balances, stats = [], []
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        h = _layer_norm(x, params[p + "ln1.weight"], params[p + "ln1.bias"])
        if dropout > 0:
            a = _attention_with_dropout(h, params[p + "attn.qkv.weight"],
                                        params[p + "attn.proj.weight"], cfg.n_heads, dropout)
            x = x + F.dropout(a, dropout, training=True)
        else:
            x = x + _attention(h, params[p + "attn.qkv.weight"],
                               params[p + "attn.proj.weight"], cfg.n_heads)
        h = _layer_norm(x, params[p + "ln2.weight"], params[p + "ln2.bias"])
        if cfg.experts > 0:
            y, bal, st = moe_layer(h, params, p + "ffn.", cfg,
                                   None if global_counts is None else global_counts[i],
                                   capacity_rule)
            balances.append(bal)
            stats.append(st)
        else:
            y = _gelu(h @ params[p + "ffn.w1.weight"].T) @ params[p + "ffn.w2.weight"].T
        x = x + (F.dropout(y, dropout, training=True) if dropout > 0 else y)
    logits = _layer_norm(x, params["norm.weight"], params["norm.bias"]) @ params["head.weight"].T
    if balances:
        aux = cfg.aux_weight * torch.stack(balances).mean()
    else:
        aux = torch.zeros((), dtype=x.dtype)
    return Forward(logits, aux, stats)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits.reshape(-1, logits.shape[-1]).to(torch.float64), dim=-1)
    return -logp.gather(1, targets.reshape(-1, 1)).mean()


def fixed_tokens(n: int, seed: int, vocab: int = VOCAB, seq: int = SEQ) -> torch.Tensor:
    """[n, seq + 1] tokens (inputs and shifted targets) from a fixed generator."""
    return torch.randint(vocab, (n, seq + 1), generator=torch.Generator().manual_seed(seed))
