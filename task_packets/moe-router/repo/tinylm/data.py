"""Synthetic language: sequences drawn from a mixture of random Markov chains.

Every rank regenerates the same global batch from (seed, step) and keeps its own slice, so the
data a configuration sees depends only on the global batch size, never on the world size.
"""

from __future__ import annotations

import torch

# Fixes the language itself (the transition tables); training seeds only pick samples.
LANGUAGE_SEED = 1234
# Offset of the held-out stream so it never overlaps a training stream.
HELDOUT_SEED = 2_000_003


class MarkovLanguage:
    """`n_sources` Markov chains over the vocabulary; each sequence follows one of them."""

    def __init__(self, vocab_size: int, seq_len: int, n_sources: int = 4) -> None:
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        g = torch.Generator().manual_seed(LANGUAGE_SEED)
        # Peaked rows make the next token predictable once the source is inferred from context.
        logits = torch.randn(n_sources, vocab_size, vocab_size, generator=g) * 3.0
        self.transitions = torch.softmax(logits, dim=-1)
        self.n_sources = n_sources

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """`n` sequences of seq_len + 1 tokens (inputs and shifted targets), int64."""
        source = torch.randint(self.n_sources, (n,), generator=generator)
        tokens = torch.empty(n, self.seq_len + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(self.vocab_size, (n,), generator=generator)
        for t in range(1, self.seq_len + 1):
            probs = self.transitions[source, tokens[:, t - 1]]
            tokens[:, t] = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        return tokens


class TokenStream:
    """The global batch of each step; its position (the next step) is checkpointed."""

    def __init__(self, language: MarkovLanguage, global_batch: int, seed: int) -> None:
        self.language = language
        self.global_batch = global_batch
        self.seed = seed
        self.step = 0

    def next_global_batch(self) -> torch.Tensor:
        # Seeding per step keeps resume exact without saving generator internals.
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.step)
        self.step += 1
        return self.language.sample(self.global_batch, g)

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step, "seed": self.seed, "global_batch": self.global_batch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if int(state["global_batch"]) != self.global_batch or int(state["seed"]) != self.seed:
            raise ValueError(f"checkpoint data stream {state} does not match this run "
                             f"(seed {self.seed}, global batch {self.global_batch})")
        self.step = int(state["step"])


def local_slice(batch: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank `rank`'s contiguous slice of the global batch."""
    if batch.shape[0] % world_size != 0:
        raise ValueError(f"global batch {batch.shape[0]} is not divisible by world {world_size}")
    per_rank = batch.shape[0] // world_size
    return batch[rank * per_rank:(rank + 1) * per_rank]


def heldout_tokens(language: MarkovLanguage, n: int = 256) -> torch.Tensor:
    """The fixed held-out set the quality objective is measured on."""
    return language.sample(n, torch.Generator().manual_seed(HELDOUT_SEED))
