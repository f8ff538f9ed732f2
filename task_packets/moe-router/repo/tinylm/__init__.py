"""tinylm: a tiny causal transformer LM trained on synthetic data, one process or two."""

from tinylm.config import CONFIGURATIONS, ModelConfig, TrainConfig
from tinylm.data import MarkovLanguage, TokenStream, heldout_tokens
from tinylm.export import export_schema, load_export
from tinylm.model import TinyLM
from tinylm.trainer import train

__all__ = [
    "CONFIGURATIONS",
    "MarkovLanguage",
    "ModelConfig",
    "TinyLM",
    "TokenStream",
    "TrainConfig",
    "export_schema",
    "heldout_tokens",
    "load_export",
    "train",
]
