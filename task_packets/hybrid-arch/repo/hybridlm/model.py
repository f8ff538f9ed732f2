"""A tiny causal language model of pre-norm attention blocks, with incremental decoding.

State-dict key schema (checkpoints, ``final_state.pt`` and the exported program all use it):

    tok_embeddings.weight                    [vocab_size, dim]
    pos_embeddings.weight                    [max_seq_len, dim]
    layers.{i}.attention_norm.weight         [dim]
    layers.{i}.attention.wqkv.weight         [3 * dim, dim]
    layers.{i}.attention.wo.weight           [dim, dim]
    layers.{i}.ffn_norm.weight               [dim]
    layers.{i}.feed_forward.w1.weight        [ffn_hidden, dim]
    layers.{i}.feed_forward.w2.weight        [dim, ffn_hidden]
    norm.weight                              [dim]
    output.weight                            [vocab_size, dim]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    vocab_size: int = 64
    dim: int = 64
    n_layers: int = 4
    n_heads: int = 4
    ffn_hidden: int = 256
    max_seq_len: int = 32
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not divisible by n_heads {self.n_heads}")
        if self.n_layers < 1:
            raise ValueError(f"n_layers must be >= 1, got {self.n_layers}")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Written out rather than F.rms_norm so the exported graph keeps plain elementwise ops.
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


@dataclass
class KVCache:
    """Keys and values of every position decoded so far, for one attention layer."""

    k: torch.Tensor  # [batch, n_heads, max_seq_len, head_dim]
    v: torch.Tensor


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.n_heads = args.n_heads
        self.head_dim = args.dim // args.n_heads
        # One fused projection: fewer, larger FSDP all-gathers and one key per block.
        self.wqkv = nn.Linear(args.dim, 3 * args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)

    def init_cache(
        self, batch_size: int, max_seq_len: int, dtype: torch.dtype, device: torch.device
    ) -> KVCache:
        shape = (batch_size, self.n_heads, max_seq_len, self.head_dim)
        return KVCache(torch.zeros(shape, dtype=dtype, device=device),
                       torch.zeros(shape, dtype=dtype, device=device))

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None, start_pos: int = 0
    ) -> torch.Tensor:
        bsz, seqlen, dim = x.shape
        q, k, v = self.wqkv(x).split(dim, dim=-1)
        q, k, v = (t.view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
                   for t in (q, k, v))
        if cache is not None:
            end = start_pos + seqlen
            cache.k[:, :, start_pos:end] = k.to(cache.k.dtype)
            cache.v[:, :, start_pos:end] = v.to(cache.v.dtype)
            k, v = cache.k[:, :, :end].to(q.dtype), cache.v[:, :, :end].to(q.dtype)
        # An explicit mask (query i at absolute position start_pos + i sees keys <= it) keeps
        # one code path for the full forward and for cached chunks at any offset.
        q_pos = torch.arange(start_pos, start_pos + seqlen, device=x.device)
        k_pos = torch.arange(k.shape[2], device=x.device)
        mask = k_pos[None, :] <= q_pos[:, None]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(out.transpose(1, 2).reshape(bsz, seqlen, dim))


class FeedForward(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.w1 = nn.Linear(args.dim, args.ffn_hidden, bias=False)
        self.w2 = nn.Linear(args.ffn_hidden, args.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(x)))


class TransformerBlock(nn.Module):
    """Pre-norm attention + feed-forward; the unit FSDP wraps."""

    def __init__(self, layer_id: int, args: ModelArgs) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.feed_forward = FeedForward(args)

    def init_cache(
        self, batch_size: int, max_seq_len: int, dtype: torch.dtype, device: torch.device
    ) -> KVCache:
        return self.attention.init_cache(batch_size, max_seq_len, dtype, device)

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None, start_pos: int = 0
    ) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cache, start_pos)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.pos_embeddings = nn.Embedding(args.max_seq_len, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(i, args) for i in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """GPT-2 style: N(0, 0.02), residual output projections scaled by depth.

        Parameters are drawn in module order from the global RNG, so a seed fixes the model.
        """
        residual_std = 0.02 / math.sqrt(2 * self.args.n_layers)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif name.endswith(("wo.weight", "w2.weight")):
                nn.init.normal_(p, std=residual_std)
            else:
                nn.init.normal_(p, std=0.02)

    def init_cache(
        self,
        batch_size: int,
        dtype: torch.dtype | None = None,
        device: torch.device | None = None,
    ) -> list[KVCache]:
        """Fresh decoding state: one entry per layer, in layer order."""
        ref = self.output.weight
        dtype = dtype or ref.dtype
        device = device or ref.device
        return [layer.init_cache(batch_size, self.args.max_seq_len, dtype, device)
                for layer in self.layers]

    def forward(
        self,
        tokens: torch.Tensor,
        cache: list[KVCache] | None = None,
        start_pos: int = 0,
    ) -> torch.Tensor:
        """Logits [batch, seq, vocab] for ``tokens`` [batch, seq].

        Without ``cache`` this is the full causal forward of a sequence starting at position 0.
        With ``cache`` (from ``init_cache``), ``tokens`` is the next chunk (any length >= 1) of
        the sequence, starting at absolute position ``start_pos``; the cache must hold the
        state of positions ``0 .. start_pos - 1`` and is updated in place.
        """
        seqlen = tokens.shape[1]
        if start_pos + seqlen > self.args.max_seq_len:
            raise ValueError(f"positions up to {start_pos + seqlen} exceed max_seq_len "
                             f"{self.args.max_seq_len}")
        positions = torch.arange(start_pos, start_pos + seqlen, device=tokens.device)
        h = self.tok_embeddings(tokens) + self.pos_embeddings(positions)
        for i, layer in enumerate(self.layers):
            h = layer(h, None if cache is None else cache[i], start_pos)
        return self.output(self.norm(h))


@torch.no_grad()
def decode_logits(model: Transformer, tokens: torch.Tensor, chunk: int = 1) -> torch.Tensor:
    """Logits of ``tokens`` computed incrementally, ``chunk`` tokens per cached call.

    Must equal ``model(tokens)`` up to floating-point reassociation; the tests compare them.
    """
    cache = model.init_cache(tokens.shape[0])
    outs = []
    for start in range(0, tokens.shape[1], chunk):
        outs.append(model(tokens[:, start:start + chunk], cache=cache, start_pos=start))
    return torch.cat(outs, dim=1)
