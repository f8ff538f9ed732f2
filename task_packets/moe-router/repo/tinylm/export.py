"""Model export with a fixed, documented key schema.

An export file is ``torch.save`` of a dict::

    {"format": "tinylm-export-v1",
     "model_config": dataclasses.asdict(ModelConfig),
     "state_dict": {key: tensor}}

Every tensor is a plain (not DTensor), contiguous, float32 CPU tensor. The keys, with
``d = d_model``, ``V = vocab_size``, ``T = seq_len``, ``H = ffn_hidden`` and ``i`` the layer:

| key | shape |
| --- | --- |
| ``tok_emb.weight`` | (V, d) |
| ``pos_emb.weight`` | (T, d) |
| ``layers.{i}.ln1.weight``, ``layers.{i}.ln1.bias`` | (d,) |
| ``layers.{i}.attn.qkv.weight`` | (3d, d) |
| ``layers.{i}.attn.proj.weight`` | (d, d) |
| ``layers.{i}.ln2.weight``, ``layers.{i}.ln2.bias`` | (d,) |
| ``layers.{i}.ffn.w1.weight`` | (H, d) |
| ``layers.{i}.ffn.w2.weight`` | (d, H) |
| ``norm.weight``, ``norm.bias`` | (d,) |
| ``head.weight`` | (V, d) |

No other key is allowed (no wrapper prefixes such as ``module.`` or ``_orig_mod.``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from tinylm.config import ModelConfig
from tinylm.model import TinyLM

EXPORT_FORMAT = "tinylm-export-v1"


def export_schema(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every exported key and its shape, in a stable order."""
    d, h = cfg.d_model, cfg.ffn_hidden
    schema: dict[str, tuple[int, ...]] = {
        "tok_emb.weight": (cfg.vocab_size, d),
        "pos_emb.weight": (cfg.seq_len, d),
    }
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        schema |= {
            p + "ln1.weight": (d,),
            p + "ln1.bias": (d,),
            p + "attn.qkv.weight": (3 * d, d),
            p + "attn.proj.weight": (d, d),
            p + "ln2.weight": (d,),
            p + "ln2.bias": (d,),
            p + "ffn.w1.weight": (h, d),
            p + "ffn.w2.weight": (d, h),
        }
    schema |= {"norm.weight": (d,), "norm.bias": (d,), "head.weight": (cfg.vocab_size, d)}
    return schema


def check_schema(state_dict: dict[str, torch.Tensor], cfg: ModelConfig) -> None:
    schema = export_schema(cfg)
    if set(state_dict) != set(schema):
        missing = sorted(set(schema) - set(state_dict))
        extra = sorted(set(state_dict) - set(schema))
        raise ValueError(f"state dict does not match the export schema: missing {missing}, "
                         f"unexpected {extra}")
    for key, shape in schema.items():
        if tuple(state_dict[key].shape) != shape:
            raise ValueError(f"{key} has shape {tuple(state_dict[key].shape)}, schema says {shape}")


def export_model(path: Path, full_model_state: dict[str, Any], cfg: ModelConfig) -> None:
    """Write the export from a full (reconstructed) model state dict."""
    state = {k: torch.as_tensor(v).detach().to("cpu", torch.float32).contiguous()
             for k, v in full_model_state.items()}
    check_schema(state, cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": EXPORT_FORMAT, "model_config": dataclasses.asdict(cfg),
                "state_dict": state}, path)


def load_export(path: Path) -> TinyLM:
    """Rebuild a float32 TinyLM on CPU from an export file."""
    blob = torch.load(path, map_location="cpu", weights_only=True)
    if blob.get("format") != EXPORT_FORMAT:
        raise ValueError(f"{path} is not a {EXPORT_FORMAT} file")
    cfg = ModelConfig(**blob["model_config"])
    check_schema(blob["state_dict"], cfg)
    model = TinyLM(cfg)
    model.load_state_dict(blob["state_dict"], strict=True)
    return model.eval()
