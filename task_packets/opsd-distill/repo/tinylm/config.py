"""Run configuration: every knob of a training run, with the CLI defaults."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

Dtype = Literal["fp32", "fp64"]


@dataclass
class TrainConfig:
    # One of tinylm.parallel.CONFIGURATIONS: cpu-1, gloo-ddp-2, gloo-fsdp-2, cuda-ddp-2, cuda-fsdp-2
    config: str = "cpu-1"
    steps: int = 300
    seed: int = 0
    # Problems per optimizer step summed over all ranks; each rank trains on its slice.
    global_batch: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 20
    dtype: Dtype = "fp32"
    out: Path | None = None
    ckpt: Path | None = None
    save_every: int = 0
    resume: Path | None = None
    export: Path | None = None
    # Skip the held-out evaluation at the end (tests that only look at parameters).
    no_eval: bool = False

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}
