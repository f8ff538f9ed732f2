"""tinylm: a tiny causal language model trained on generated addition problems.

One entry point (``train.py``) runs every configuration: one process on CPU, DDP or FSDP2 on
two gloo processes, and the same two on NCCL GPUs.
"""

from tinylm.config import TrainConfig
from tinylm.data import (
    HELDOUT_SIZE,
    PROMPT_LEN,
    ANSWER_LEN,
    Problems,
    ProblemStream,
    Tokenizer,
    collate_sft,
    heldout_problems,
)
from tinylm.model import ModelConfig, TinyLM

__all__ = [
    "ANSWER_LEN",
    "HELDOUT_SIZE",
    "PROMPT_LEN",
    "ModelConfig",
    "ProblemStream",
    "Problems",
    "TinyLM",
    "Tokenizer",
    "TrainConfig",
    "collate_sft",
    "heldout_problems",
]
