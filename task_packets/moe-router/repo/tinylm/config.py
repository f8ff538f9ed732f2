"""Configuration dataclasses shared by the model, the trainer and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# The configurations every run is declared under (names shared with the evaluation harness).
CONFIGURATIONS: tuple[str, ...] = (
    "cpu-1", "gloo-ddp-2", "gloo-fsdp-2", "cuda-ddp-2", "cuda-fsdp-2",
)


@dataclass
class ModelConfig:
    vocab_size: int = 64
    seq_len: int = 32
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    ffn_hidden: int = 256
    dropout: float = 0.0

    def validate(self) -> None:
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


@dataclass
class TrainConfig:
    config: str = "cpu-1"
    steps: int = 100
    seed: int = 0
    # Sequences per optimizer step summed over all ranks; each rank trains on its slice.
    global_batch: int = 16
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 10
    dtype: str = "fp32"
    # metrics.jsonl, final_state.pt and summary.json go here (rank 0 writes them).
    out: Path | None = None
    # Checkpoints go to ckpt/step_<N>/ every save_every steps (0: never).
    ckpt: Path | None = None
    save_every: int = 0
    # A checkpoint directory (ckpt/step_<N>) to continue from; `steps` stays the total.
    resume: Path | None = None
    # Write the exported model (see tinylm/export.py for the key schema) to this file.
    export: Path | None = None
    model: ModelConfig = field(default_factory=ModelConfig)

    def validate(self) -> None:
        if self.config not in CONFIGURATIONS:
            raise ValueError(f"unknown configuration {self.config!r}; one of {CONFIGURATIONS}")
        if self.dtype not in ("fp32", "fp64"):
            raise ValueError(f"dtype must be fp32 or fp64, got {self.dtype!r}")
        if self.steps < 0 or self.global_batch <= 0 or self.save_every < 0:
            raise ValueError("steps and save_every must be >= 0 and global_batch > 0")
        if self.save_every and self.ckpt is None:
            raise ValueError("--save-every needs --ckpt")
        self.model.validate()
