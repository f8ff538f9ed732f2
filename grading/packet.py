"""The task packet's public declaration (``packet.yaml``).

It lives in ``grading`` because the grader reads it too and ``grading`` never imports
``harness``; the harness imports it from here so there is one definition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from grading.yamlfile import load_model

ConfigurationName = Literal["cpu-1", "gloo-ddp-2", "gloo-fsdp-2", "cuda-ddp-2", "cuda-fsdp-2"]

# Configurations that need GPUs; everything else runs on a CPU-only machine.
CUDA_CONFIGURATIONS: frozenset[str] = frozenset({"cuda-ddp-2", "cuda-fsdp-2"})


class ResumeProbeSpec(BaseModel):
    """How a diagnostic run checkpoints and resumes, for the resume probe (a straight run that
    writes a checkpoint at step ``save_every``, and a run resumed from it).

    In each word, ``{k}`` is the checkpoint step, ``{ckpt}`` a fresh folder for checkpoints
    and ``{out}`` the straight run's ``--out`` folder; ``checkpoint`` names the step-k
    checkpoint the straight run leaves, and ``{checkpoint}`` in ``resume_args`` stands for it.
    """

    model_config = ConfigDict(extra="forbid")

    save_every: int = Field(ge=1)
    save_args: list[str] = Field(min_length=1)
    resume_args: list[str] = Field(min_length=1)
    checkpoint: str = Field(min_length=1)


class DiagnosticsSpec(BaseModel):
    """How a diagnostic (TrainCheck) run trains this task: a short run of ``train.py``.

    ``python train.py --config C --steps N --seed S <args> [<feature_args>] --out DIR``; the
    distributed configurations run it under a static-rendezvous torchrun.
    """

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(default=3, ge=1, le=50)
    seed: int = 0
    # The arguments every run of the baseline accepts.
    args: list[str] = Field(default_factory=list)
    # The flags that switch the requested feature on; the baseline does not accept them.
    feature_args: list[str] = Field(default_factory=list)
    wall_s: float = Field(default=300.0, gt=0)
    # How the resume probe checkpoints and resumes this task's runs; none: no resume probe.
    resume: ResumeProbeSpec | None = None

    @model_validator(mode="after")
    def _resume_leaves_a_step(self) -> DiagnosticsSpec:
        if self.resume is not None and self.resume.save_every >= self.steps:
            raise ValueError(f"diagnostics.resume.save_every ({self.resume.save_every}) must be "
                             f"below diagnostics.steps ({self.steps}): the resumed run needs a "
                             "step to take")
        return self

    def train_args(self, *, feature: bool, seed: int | None = None) -> list[str]:
        return ["--steps", str(self.steps), "--seed", str(self.seed if seed is None else seed),
                *self.args, *(self.feature_args if feature else [])]


class PacketSpec(BaseModel):
    """What ``task_packets/<task>/packet.yaml`` declares; every field is public to the agent."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str
    configurations: list[ConfigurationName] = Field(min_length=1)
    # Globs (fnmatch, relative to repo/) the agent is asked to edit; the grader ignores changes
    # elsewhere by restoring those paths from the baseline.
    editable_paths: list[str] = Field(min_length=1)
    # Globs restored from the pristine baseline before grading (public tests at least).
    protected_paths: list[str] = Field(default_factory=list)
    public_test_command: str
    public_test_timeout_s: float = 300.0
    # One command per declared configuration: a full training run the agent may launch.
    candidate_commands: dict[ConfigurationName, str] = Field(default_factory=dict)
    candidate_timeout_s: float = 300.0
    # The declared wall limit of grading one submission end to end (grader container).
    grade_timeout_s: float = 900.0
    # Default budget limits (validated by the harness's Budget model).
    default_budget: dict[str, float] = Field(default_factory=dict)
    # Short diagnostic runs (the TrainCheck tool and the calibration track).
    diagnostics: DiagnosticsSpec | None = None


def load_packet_spec(path: Path) -> PacketSpec:
    """Parse and validate a ``packet.yaml``; a ``YamlFileError`` (a ValueError) names the
    file and its first problem on one line."""
    return load_model(path, PacketSpec, what="packet file")
