"""Unit tests: tokenizer, problem set, data stream, model, loss normalisation, export."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tinylm.config import TrainConfig
from tinylm.data import (
    ANSWER_LEN,
    PROMPT_LEN,
    TOKENIZER,
    Problems,
    ProblemStream,
    Tokenizer,
    collate_sft,
    heldout_problems,
    train_pool,
)
from tinylm.export import load_export
from tinylm.model import ModelConfig, TinyLM
from tinylm.parallel import init_runtime
from tinylm.trainer import lr_lambda, sft_loss, train


def test_prompts_have_fixed_length_and_answers_end_with_eos() -> None:
    p = Problems(torch.tensor([[7, 42], [0, 3], [49, 49]]))
    assert p.prompts().shape == (3, PROMPT_LEN)
    assert TOKENIZER.decode(p.prompts()[0]) == "07+42="
    answers = p.answers()
    assert answers.shape == (3, ANSWER_LEN)
    assert [TOKENIZER.decode(r) for r in answers] == ["49", "3", "98"]
    assert answers[1].tolist() == [*TOKENIZER.encode("3"), Tokenizer.EOS, Tokenizer.PAD]


def test_sft_mask_covers_answer_and_eos_only() -> None:
    b = collate_sft(Problems(torch.tensor([[0, 3], [20, 30]])))
    assert b.loss_mask.sum(dim=1).tolist() == [2, 3]
    targets = b.tokens[:, 1:][b.loss_mask]
    assert Tokenizer.PAD not in targets.tolist()


def test_split_is_fixed_and_disjoint() -> None:
    train_set = {tuple(r) for r in train_pool().operands.tolist()}
    held = {tuple(r) for r in heldout_problems().operands.tolist()}
    assert len(held) == len(heldout_problems()) and not (train_set & held)
    assert torch.equal(heldout_problems().operands, heldout_problems().operands)


def test_stream_state_round_trip() -> None:
    a = ProblemStream(8, seed=3)
    a.next_global_batch()
    state = a.state_dict()
    expected = [a.next_global_batch().operands for _ in range(3)]
    b = ProblemStream(8, seed=99)
    b.load_state_dict(state)
    assert b.position == 1
    assert all(torch.equal(e, b.next_global_batch().operands) for e in expected)


def test_model_is_causal() -> None:
    torch.manual_seed(0)
    model = TinyLM(ModelConfig())
    x = torch.randint(0, 16, (2, 10))
    y = x.clone()
    y[:, 6:] = (y[:, 6:] + 1) % 16
    with torch.no_grad():
        assert torch.equal(model(x)[:, :6], model(y)[:, :6])


def test_sft_loss_is_global_token_mean_in_one_process() -> None:
    rt = init_runtime("cpu-1")
    torch.manual_seed(0)
    batch = collate_sft(Problems(torch.tensor([[1, 2], [30, 40], [5, 5]])))
    logits = torch.randn(3, batch.tokens.shape[1], 32, dtype=torch.float64)
    loss, stats = sft_loss(logits, batch, rt)
    nll = torch.nn.functional.cross_entropy(logits[:, :-1][batch.loss_mask], batch.tokens[:, 1:][batch.loss_mask])
    assert loss.item() == pytest.approx(nll.item(), rel=1e-12)
    assert stats["answer_tokens"] == batch.loss_mask.sum().item()


def test_lr_schedule_warms_up_then_decays() -> None:
    f = lr_lambda(10, 100)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(99) < f(50) < f(10) and f(1000) == pytest.approx(0.1)


def test_export_schema(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    train(TrainConfig(steps=2, export=path, no_eval=True))
    blob = torch.load(path, weights_only=True)
    assert blob["format"] == "tinylm-export-v1"
    assert set(blob["state_dict"]) == set(TinyLM(ModelConfig()).state_dict())
    assert all(not k.startswith("module.") for k in blob["state_dict"])
    assert all(v.dtype == torch.float32 for v in blob["state_dict"].values())
    load_export(path)
