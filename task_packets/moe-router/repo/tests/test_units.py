"""Unit tests: data, model, export schema and checkpoint resume in one process."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from conftest import max_abs_diff

from tinylm import MarkovLanguage, ModelConfig, TinyLM, TokenStream, TrainConfig, train
from tinylm.data import local_slice
from tinylm.export import export_schema, load_export


def test_global_batch_is_seeded_and_sliced() -> None:
    lang = MarkovLanguage(64, 32)
    a, b = TokenStream(lang, 8, seed=3), TokenStream(lang, 8, seed=3)
    first = a.next_global_batch()
    assert first.shape == (8, 33) and torch.equal(first, b.next_global_batch())
    assert not torch.equal(a.next_global_batch(), first)
    slices = [local_slice(first, r, 2) for r in range(2)]
    assert torch.equal(torch.cat(slices), first)


def test_stream_position_round_trip() -> None:
    lang = MarkovLanguage(64, 32)
    a = TokenStream(lang, 4, seed=1)
    a.next_global_batch()
    b = TokenStream(lang, 4, seed=1)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.next_global_batch(), b.next_global_batch())


def test_forward_returns_plain_logits_and_scalar_aux() -> None:
    torch.manual_seed(0)
    model = TinyLM(ModelConfig())
    logits, aux = model(torch.randint(64, (3, 32)))
    assert type(logits) is torch.Tensor and logits.shape == (3, 32, 64)
    assert type(aux) is torch.Tensor and aux.shape == ()


def test_model_is_causal_and_eval_is_pure() -> None:
    torch.manual_seed(0)
    model = TinyLM(ModelConfig()).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tokens = torch.randint(64, (2, 32))
    changed = tokens.clone()
    changed[:, 20:] = (changed[:, 20:] + 1) % 64
    with torch.no_grad():
        a, _ = model(tokens)
        b, _ = model(changed)
        again, _ = model(tokens)
    assert torch.equal(a[:, :20], b[:, :20])
    assert torch.equal(a, again)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_export_follows_schema_and_reloads(tmp_path: Path) -> None:
    cfg = TrainConfig(steps=3, out=tmp_path / "run", export=tmp_path / "model.pt")
    summary = train(cfg)
    blob = torch.load(tmp_path / "model.pt", weights_only=True)
    schema = export_schema(cfg.model)
    assert list(blob["state_dict"]) == list(schema)
    for key, shape in schema.items():
        tensor = blob["state_dict"][key]
        assert type(tensor) is torch.Tensor and tuple(tensor.shape) == shape
        assert tensor.dtype == torch.float32 and tensor.is_contiguous()
    model = load_export(tmp_path / "model.pt")
    final = torch.load(tmp_path / "run" / "final_state.pt", weights_only=True)
    assert max_abs_diff(model.state_dict(), final["model"]) == 0.0
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == summary


def test_resume_in_one_process_is_exact(tmp_path: Path) -> None:
    full = TrainConfig(steps=6, out=tmp_path / "full", ckpt=tmp_path / "ckpt", save_every=3)
    train(full)
    resumed = TrainConfig(steps=6, out=tmp_path / "resumed", resume=tmp_path / "ckpt" / "step_3")
    train(resumed)
    a = torch.load(tmp_path / "full" / "final_state.pt", weights_only=True)
    b = torch.load(tmp_path / "resumed" / "final_state.pt", weights_only=True)
    assert max_abs_diff(a, b) == 0.0
    steps = [json.loads(line)["step"] for line in
             (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [3, 4, 5]
