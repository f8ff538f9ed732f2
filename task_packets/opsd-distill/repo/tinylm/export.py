"""Export of the trained model for inference.

Schema ``tinylm-export-v1`` (a ``torch.save`` dict):

- ``format``: ``"tinylm-export-v1"``
- ``model_config``: the ``ModelConfig`` fields (vocab_size, max_len, d_model, n_heads, n_layers)
- ``state_dict``: float32 tensors under exactly these keys, ``i`` in ``0..n_layers-1``:
  ``tok_emb.weight``, ``pos_emb.weight``,
  ``blocks.{i}.ln1.{weight,bias}``, ``blocks.{i}.attn.qkv.{weight,bias}``,
  ``blocks.{i}.attn.proj.{weight,bias}``, ``blocks.{i}.ln2.{weight,bias}``,
  ``blocks.{i}.mlp.0.{weight,bias}``, ``blocks.{i}.mlp.2.{weight,bias}``,
  ``ln_f.{weight,bias}``, ``lm_head.weight``

No wrapper prefixes (``module.``, ``_orig_mod.``) and nothing that is not a parameter of the
inference model.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from tinylm.model import ModelConfig, TinyLM

EXPORT_FORMAT = "tinylm-export-v1"


def export_model(path: Path, full_model_state: dict[str, torch.Tensor], cfg: ModelConfig) -> None:
    state = {k: v.detach().to("cpu", torch.float32).clone() for k, v in full_model_state.items()}
    expected = set(TinyLM(cfg).state_dict())
    if set(state) != expected:
        raise ValueError(f"export keys differ from the schema: {sorted(set(state) ^ expected)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": EXPORT_FORMAT, "model_config": asdict(cfg), "state_dict": state}, path)


def load_export(path: Path) -> TinyLM:
    blob = torch.load(path, weights_only=True)
    if blob.get("format") != EXPORT_FORMAT:
        raise ValueError(f"{path} is not a {EXPORT_FORMAT} file")
    model = TinyLM(ModelConfig(**blob["model_config"]))
    model.load_state_dict(blob["state_dict"])
    return model
