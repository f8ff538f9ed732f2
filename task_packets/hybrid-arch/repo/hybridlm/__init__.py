"""hybridlm: a tiny causal LM trained on synthetic data under one process, DDP or FSDP2."""

from hybridlm.data import MarkovSource, ShardedBatches, heldout_batches
from hybridlm.model import KVCache, ModelArgs, Transformer, decode_logits
from hybridlm.trainer import TrainConfig, run, train

__all__ = [
    "KVCache",
    "MarkovSource",
    "ModelArgs",
    "ShardedBatches",
    "TrainConfig",
    "Transformer",
    "decode_logits",
    "heldout_batches",
    "run",
    "train",
]
