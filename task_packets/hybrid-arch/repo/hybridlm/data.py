"""Synthetic, seeded token data: no files, identical on every rank.

Sequences come from a fixed random second-order Markov source whose next-token distribution
is sparse (a few likely successors per context): part of it is learnable from the current
token alone, the rest needs the previous one, so held-out loss after a few hundred steps
separates models that mix information across positions well from those that do not.

Every rank regenerates the same *global* batch from (seed, batch index) and keeps its own
contiguous slice, so the global batch (and so the trajectory) does not depend on the world
size, and the data position is one integer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Held-out batches are drawn from a disjoint index range of the same source.
HELDOUT_OFFSET = 1_000_000


def _generator(seed: int, stream: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 7_919_993 + stream)


@dataclass
class MarkovSource:
    vocab_size: int = 64
    seq_len: int = 32
    # The source is a property of the task, not of a run: same seed, same language.
    source_seed: int = 1234
    successors: int = 4

    def __post_init__(self) -> None:
        g = _generator(self.source_seed, 0)
        v, s = self.vocab_size, self.successors
        # Token b is followed by one of `successors` candidates (learnable from b alone); the
        # token before b picks which candidate is likely, so a model that mixes in the
        # previous position beats one that only sees the current token.
        successors = torch.randint(0, v, (v, s), generator=g)
        favoured = torch.randint(0, s, (v,), generator=g)
        self.next_tokens = successors.unsqueeze(0).expand(v, v, s)
        probs = torch.full((v, v, s), 0.1 / (s - 1))
        probs.scatter_(2, favoured.view(v, 1, 1).expand(v, v, 1), 0.9)
        self.next_probs = probs

    def sample(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """[batch_size, seq_len + 1] int64 tokens (inputs are [:, :-1], targets [:, 1:])."""
        out = torch.empty(batch_size, self.seq_len + 1, dtype=torch.long)
        out[:, :2] = torch.randint(0, self.vocab_size, (batch_size, 2), generator=generator)
        rows = torch.arange(batch_size)
        for t in range(2, self.seq_len + 1):
            a, b = out[:, t - 2], out[:, t - 1]
            choice = torch.multinomial(self.next_probs[a, b], 1, generator=generator)[:, 0]
            out[:, t] = self.next_tokens[a, b][rows, choice]
        return out


class ShardedBatches:
    """The training stream: batch i is the same global batch on every rank; each rank its slice."""

    def __init__(
        self, source: MarkovSource, global_batch: int, seed: int, rank: int, world_size: int
    ) -> None:
        if global_batch % world_size:
            raise ValueError(f"global batch {global_batch} not divisible by world {world_size}")
        self.source = source
        self.global_batch = global_batch
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.position = 0  # batches consumed so far

    def global_batch_at(self, index: int) -> torch.Tensor:
        return self.source.sample(self.global_batch, _generator(self.seed, 1 + index))

    def local_slice(self, batch: torch.Tensor) -> torch.Tensor:
        per_rank = batch.shape[0] // self.world_size
        return batch[self.rank * per_rank:(self.rank + 1) * per_rank]

    def next(self) -> torch.Tensor:
        batch = self.local_slice(self.global_batch_at(self.position))
        self.position += 1
        return batch

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position, "seed": self.seed, "global_batch": self.global_batch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if (int(state["seed"]), int(state["global_batch"])) != (self.seed, self.global_batch):
            raise ValueError(f"checkpoint data stream {state} does not match seed {self.seed}, "
                             f"global batch {self.global_batch}")
        self.position = int(state["position"])


def heldout_batches(source: MarkovSource, n_batches: int = 8, batch_size: int = 64,
                    seed: int = 0) -> list[torch.Tensor]:
    """The fixed held-out set: the same for every run with the same source and ``seed``."""
    return [source.sample(batch_size, _generator(seed, HELDOUT_OFFSET + i))
            for i in range(n_batches)]
