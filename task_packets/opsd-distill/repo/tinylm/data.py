"""Generated addition problems: ``[BOS] 0 7 + 4 2 =`` -> ``4 9 [EOS]``.

Operands are zero-padded to two digits so every prompt has the same length (batched decoding
needs no left padding); answers are written without leading zeros and end with EOS, so answer
lengths vary from 2 to 4 tokens. Nothing is read from disk: the problem set, its train/held-out
split and every batch are generated from seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

MAX_OPERAND = 50  # operands are 0..49
# [BOS] a1 a0 + b1 b0 =
PROMPT_LEN = 7
# up to two answer digits plus EOS
ANSWER_LEN = 3
SEQ_LEN = PROMPT_LEN + ANSWER_LEN
HELDOUT_SIZE = 512
# The split is fixed for every run (it does not follow --seed), so the held-out objective of
# two runs is always measured on the same problems.
SPLIT_SEED = 1234


class Tokenizer:
    PAD, BOS, EOS, SEP = 0, 1, 2, 3
    # SEP is reserved for prompts that carry extra context; plain problems do not use it.
    _CHARS = "0123456789+="
    VOCAB_SIZE = 32  # ids above the last character are unused

    def __init__(self) -> None:
        self._to_id = {c: i + 4 for i, c in enumerate(self._CHARS)}
        self._to_char = {i: c for c, i in self._to_id.items()}

    def encode(self, text: str) -> list[int]:
        return [self._to_id[c] for c in text]

    def decode(self, ids: list[int] | torch.Tensor) -> str:
        """Characters up to the first EOS; special tokens other than EOS are dropped."""
        out = []
        for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
            if i == self.EOS:
                break
            if i in self._to_char:
                out.append(self._to_char[i])
        return "".join(out)


TOKENIZER = Tokenizer()


@dataclass(frozen=True)
class Problems:
    """A batch of problems: operand pairs ``[N, 2]`` (int64)."""

    operands: torch.Tensor

    def __len__(self) -> int:
        return int(self.operands.shape[0])

    def __getitem__(self, idx: slice | torch.Tensor) -> "Problems":
        return Problems(self.operands[idx])

    def prompts(self) -> torch.Tensor:
        """``[N, PROMPT_LEN]`` token ids."""
        rows = [
            [Tokenizer.BOS, *TOKENIZER.encode(f"{a:02d}+{b:02d}=")] for a, b in self.operands.tolist()
        ]
        return torch.tensor(rows, dtype=torch.long)

    def answers(self) -> torch.Tensor:
        """``[N, ANSWER_LEN]``: answer digits, EOS, then PAD."""
        rows = []
        for a, b in self.operands.tolist():
            ids = [*TOKENIZER.encode(str(a + b)), Tokenizer.EOS]
            rows.append(ids + [Tokenizer.PAD] * (ANSWER_LEN - len(ids)))
        return torch.tensor(rows, dtype=torch.long)


def _split() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(SPLIT_SEED)
    a, b = torch.meshgrid(torch.arange(MAX_OPERAND), torch.arange(MAX_OPERAND), indexing="ij")
    pairs = torch.stack([a.flatten(), b.flatten()], dim=1)
    perm = torch.randperm(len(pairs), generator=g)
    return pairs[perm[HELDOUT_SIZE:]], pairs[perm[:HELDOUT_SIZE]]


def train_pool() -> Problems:
    return Problems(_split()[0])


def heldout_problems() -> Problems:
    """The fixed held-out set (disjoint from the training pool)."""
    return Problems(_split()[1])


@dataclass(frozen=True)
class SFTBatch:
    # [B, SEQ_LEN]: prompt, answer, EOS, PAD
    tokens: torch.Tensor
    # [B, SEQ_LEN - 1]: True where logits[:, t] are scored against tokens[:, t + 1] (answer + EOS)
    loss_mask: torch.Tensor


def collate_sft(problems: Problems) -> SFTBatch:
    answers = problems.answers()
    tokens = torch.cat([problems.prompts(), answers], dim=1)
    target_is_answer = torch.zeros_like(tokens, dtype=torch.bool)
    target_is_answer[:, PROMPT_LEN:] = answers != Tokenizer.PAD
    return SFTBatch(tokens=tokens, loss_mask=target_is_answer[:, 1:])


class ProblemStream:
    """The global batch stream: every rank draws the same global batch and keeps its slice.

    Its state (batches drawn so far and the generator) is part of every checkpoint, so a
    resumed run continues with exactly the batches the uninterrupted run would have seen.
    """

    def __init__(self, global_batch: int, seed: int) -> None:
        self.pool = train_pool()
        self.global_batch = global_batch
        self.generator = torch.Generator().manual_seed(seed)
        self.position = 0

    def next_global_batch(self) -> Problems:
        idx = torch.randint(len(self.pool), (self.global_batch,), generator=self.generator)
        self.position += 1
        return self.pool[idx]

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])
        self.generator.set_state(state["generator"])
