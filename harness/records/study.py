"""The study file: tasks x pairs x arms, the model, budgets, caps and seeds; its assignment.

Pairs are numbered across the whole study, task by task: with 2 tasks and 3 pairs per task,
pairs 1-3 are the first task's and 4-6 the second's. Both arms of a pair share the task and
the seed, so a pair differs only by its arm.

The project's default study (what ``harness session`` runs without ``--study``) is set here
and nowhere else: ``$HARNESS_STUDY`` if set, else ``studies/pilot.yaml``.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import random
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from grading.packet import CUDA_CONFIGURATIONS
from grading.yamlfile import YamlFileError, load_model
from harness.errors import HarnessError
from harness.paths import REPO_ROOT
from harness.records.budget import Budget
from harness.records.tasks import default_hidden_dir, default_packet_dir

ArmName = Literal["control", "treatment"]
# What a task's sessions may claim: evidence for the treatment-vs-control comparison (the
# diagnostic gate in harness/study/freeze.py must accept it), or only a coverage audit (they run
# and are reported, labelled as not evidence of benefit).
Comparison = Literal["treatment-vs-control", "coverage-audit"]

DEFAULT_STUDY = Path("studies/pilot.yaml")
STUDY_ENV = "HARNESS_STUDY"
# The model providers a study may name (agent.model is PROVIDER:NAME).
PROVIDERS = ("scripted", "openai", "anthropic")
# Who drives the model: the harness's own tool loop, or a coding-agent CLI in the sandbox.
AgentKind = Literal["loop", "claude-code", "codex"]
# The API each CLI speaks, so the provider its model may come from (or a scripted file).
CLI_PROVIDERS: dict[str, str] = {"claude-code": "anthropic", "codex": "openai"}


def default_study_path() -> Path:
    """The study a command uses without ``--study``: ``$HARNESS_STUDY``, else the pilot."""
    return Path(os.environ.get(STUDY_ENV) or DEFAULT_STUDY)


class Arm(BaseModel):
    """What one arm changes: its image and the extra tools it offers. Nothing else may differ."""

    model_config = ConfigDict(extra="forbid")

    image: Literal["control", "treatment"]
    extra_tools: list[str] = Field(default_factory=list)


class TaskRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    packet: Path | None = None  # default: task_packets/<id>
    hidden: Path | None = None  # default: hidden/<id>
    # TrainCheck's reports root: <reports>/<id>/reference/ (the frozen reference the treatment
    # tool uses) and <reports>/<id>/calibration.json (the diagnostic gate's evidence).
    reports: Path | None = None  # default: reports/traincheck
    comparison: Comparison = "treatment-vs-control"

    def packet_dir(self) -> Path:
        return _resolve(self.packet) if self.packet else default_packet_dir(self.id)

    def hidden_dir(self) -> Path:
        return _resolve(self.hidden) if self.hidden else default_hidden_dir(self.id)

    def reports_root(self) -> Path:
        return _resolve(self.reports or Path("reports") / "traincheck")

    def traincheck_dir(self) -> Path:
        return self.reports_root() / self.id


class RetryPolicy(BaseModel):
    """Retries of one model turn (tenacity): backoff with jitter, Retry-After honoured."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(default=6, ge=1)
    max_total_s: float = Field(default=600.0, gt=0)  # waiting + attempts, per model turn
    initial_wait_s: float = Field(default=1.0, ge=0)
    max_wait_s: float = Field(default=60.0, ge=0)
    jitter_s: float = Field(default=1.0, ge=0)
    request_timeout_s: float = Field(default=600.0, gt=0)


class AgentSettings(BaseModel):
    """The model every session of the study uses, and its call settings.

    A ``scripted:`` model may name its file with ``{task}`` and ``{arm}`` placeholders (one
    scripted solve per task, and a scripted agent that uses the treatment tool); a real model
    may not, so both arms of a study always talk to the same model.

    ``kind`` chooses who drives the model: ``loop`` (the harness's tool loop) or a coding-agent
    CLI run in the sandbox, every model call of which goes through the harness's gateway
    (harness/agent/gateway/). A CLI's version is pinned in images/cli/binaries.yaml; a study
    that states ``cli_version`` is refused when the images carry another.
    """

    model_config = ConfigDict(extra="forbid")

    kind: AgentKind = "loop"
    cli_version: str | None = None
    model: str  # PROVIDER:NAME, PROVIDER one of PROVIDERS
    temperature: float | None = None
    max_output_tokens: int = Field(default=4096, gt=0)
    # Provider reasoning options: openai {"effort": "high"}; anthropic
    # {"thinking_budget_tokens": 4096}.
    reasoning: dict[str, str | int | bool] = Field(default_factory=dict)
    system_prompt: str | None = None
    # What the model sees of one tool output (head + tail); the whole is kept as an artifact.
    tool_output_chars: int = Field(default=16_000, ge=1000)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)

    @field_validator("model")
    @classmethod
    def _provider(cls, value: str) -> str:
        provider, _, name = value.partition(":")
        if provider not in PROVIDERS:
            raise ValueError(f"unknown provider {provider!r} in {value!r}: use "
                             + ", ".join(f"{p}:<{'file' if p == 'scripted' else 'model'}>"
                                         for p in PROVIDERS))
        if not name:
            raise ValueError(f"{value!r} names no {'file' if provider == 'scripted' else 'model'}"
                             f" after {provider}:")
        return value

    @model_validator(mode="after")
    def _cli_provider(self) -> AgentSettings:
        if self.kind == "loop":
            if self.cli_version is not None:
                raise ValueError("cli_version is for a CLI agent (kind claude-code or codex)")
            return self
        provider = self.model.partition(":")[0]
        wanted = CLI_PROVIDERS[self.kind]
        if provider not in ("scripted", wanted):
            raise ValueError(f"a {self.kind} agent speaks the {wanted} API: its model is "
                             f"{wanted}:<model> or scripted:<file>, not {self.model!r}")
        return self

    @model_validator(mode="after")
    def _placeholders(self) -> AgentSettings:
        fields = set(re.findall(r"\{([^}]*)\}", self.model))
        if fields and not self.model.startswith("scripted:"):
            raise ValueError("only a scripted: model may use {task}/{arm} placeholders")
        if fields - {"task", "arm"}:
            raise ValueError(f"unknown placeholder(s) {sorted(fields - {'task', 'arm'})} "
                             "in agent.model (use {task} and {arm})")
        return self

    def for_session(self, task: str, arm: str) -> AgentSettings:
        """The settings one session uses: placeholders in a scripted model filled in."""
        if "{" not in self.model:
            return self
        return self.model_copy(update={"model": self.model.format(task=task, arm=arm)})


class StudyCaps(BaseModel):
    """Compute for the whole matrix; no session starts whose budget the rest cannot cover."""

    model_config = ConfigDict(extra="forbid")

    cpu_hours: float | None = Field(default=None, ge=0)
    gpu_hours: float | None = Field(default=None, ge=0)


class MatrixPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Attempts per session when infrastructure fails (harness error, daemon error, sandbox
    # lost, provider retries exhausted, grader error); an agent outcome is never retried.
    max_attempts: int = Field(default=3, ge=1, le=10)


class Resources(BaseModel):
    """What one session is promised: CPUs (the container's limit and its CPU-hours) and GPUs."""

    model_config = ConfigDict(extra="forbid")

    # Default: the packet's declared need, the ranks of its largest CPU configuration.
    cpus_per_session: float | None = Field(default=None, gt=0)
    gpus_per_session: int = Field(default=0, ge=0)


# The token categories a session's usage records (harness.records.budget.Usage).
TokenCategory = Literal["input", "output"]


class Price(BaseModel):
    """What one category of one model's tokens cost, as a price list said on a date.

    Read only by ``harness report`` for the money lines; never by a session, so a new price
    list is not a new study (the lock digests the study file without this table).
    """

    model_config = ConfigDict(extra="forbid")

    # The model as agent.model names it (a scripted template as written, placeholders and
    # all), or as one session resolved it.
    model: str = Field(min_length=1)
    category: TokenCategory
    per_million_tokens: float = Field(ge=0)
    currency: str = Field(default="USD", min_length=1)
    date: datetime.date  # when the source said so
    source: str = Field(min_length=1)  # where it was read: a URL, an invoice, a contract


class Study(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_-]*$")
    description: str = ""
    tasks: list[TaskRef] = Field(min_length=1)
    pairs_per_task: int = Field(ge=1)
    seed: int = 0
    arms: dict[ArmName, Arm]
    agent: AgentSettings
    budget: Budget
    caps: StudyCaps = Field(default_factory=StudyCaps)
    matrix: MatrixPolicy = Field(default_factory=MatrixPolicy)
    resources: Resources = Field(default_factory=Resources)
    runs_dir: Path = Path("runs")
    # Token prices for the report's money lines; a model or category without one is shown as
    # "no price", never as zero.
    prices: list[Price] = Field(default_factory=list)

    @model_validator(mode="after")
    def _prices_unique(self) -> Study:
        seen = [(p.model, p.category) for p in self.prices]
        twice = sorted({key for key in seen if seen.count(key) > 1})
        if twice:
            raise ValueError(f"prices name {twice[0][0]} {twice[0][1]} more than once")
        currencies = sorted({p.currency for p in self.prices})
        if len(currencies) > 1:
            raise ValueError(f"prices use more than one currency ({', '.join(currencies)}): "
                             "a report adds them up")
        return self

    @model_validator(mode="after")
    def _arms_complete(self) -> Study:
        if set(self.arms) != {"control", "treatment"}:
            raise ValueError("arms must define exactly 'control' and 'treatment'")
        if self.arms["control"].image != "control" or self.arms["control"].extra_tools:
            raise ValueError("the control arm uses the control image and no extra tools")
        if len({t.id for t in self.tasks}) != len(self.tasks):
            raise ValueError("task ids must be unique")
        return self

    @property
    def pair_count(self) -> int:
        return len(self.tasks) * self.pairs_per_task

    def runs_root(self) -> Path:
        return _resolve(self.runs_dir) / self.name

    def agent_for(self, spec: Assignment) -> AgentSettings:
        return self.agent.for_session(spec.task, spec.arm)


class Assignment(BaseModel):
    """One session of the study: which task, pair, arm and seed."""

    study: str
    task: str
    pair: int
    arm: ArmName
    seed: int

    @property
    def session_id(self) -> str:
        return f"{self.task}-pair{self.pair}-{self.arm}"


def _resolve(path: Path) -> Path:
    return path if path.is_absolute() else REPO_ROOT / path


def load_study(path: Path) -> Study:
    """Read and validate a study file; every problem is one HarnessError line."""
    # A path the user did not type is named as such: $HARNESS_STUDY may be set long ago.
    origin = (f" (the path came from ${STUDY_ENV})"
              if os.environ.get(STUDY_ENV) and str(path) == os.environ[STUDY_ENV] else "")
    if not path.exists() and not path.is_absolute() and (REPO_ROOT / path).exists():
        path = REPO_ROOT / path
    if not path.exists():
        raise HarnessError(f"study file {path} does not exist{origin}",
                           "pass --study studies/<name>.yaml" + (
                               f", or unset ${STUDY_ENV}" if origin else ""))
    try:
        study = load_model(path, Study, what="study file")
    except YamlFileError as exc:
        raise HarnessError(f"{exc}{origin}", "see studies/demo.yaml for the format, and "
                           "docs/study.md for every field") from None
    for task in study.tasks:
        if not (task.packet_dir() / "packet.yaml").is_file():
            raise HarnessError(
                f"study {study.name}: task {task.id} has no packet at {task.packet_dir()}",
                "set tasks[].packet to a folder holding packet.yaml",
            )
    return study


def assignment(study: Study, pair: int, arm: str) -> Assignment:
    if arm not in ("control", "treatment"):
        raise HarnessError(f"unknown arm {arm!r}", "use --arm control or --arm treatment")
    if not 1 <= pair <= study.pair_count:
        raise HarnessError(
            f"study {study.name} has pairs 1-{study.pair_count}, not {pair}",
            f"use --pair between 1 and {study.pair_count}",
        )
    task = study.tasks[(pair - 1) // study.pairs_per_task]
    # The seed depends on the study seed and the pair only: both arms of a pair share it.
    digest = hashlib.sha256(f"{study.name}:{study.seed}:{pair}".encode()).digest()
    seed = int.from_bytes(digest[:4], "big")
    return Assignment(study=study.name, task=task.id, pair=pair, arm=arm, seed=seed)  # type: ignore[arg-type]


def all_assignments(study: Study) -> list[Assignment]:
    return [
        assignment(study, pair, arm)
        for pair in range(1, study.pair_count + 1)
        for arm in ("control", "treatment")
    ]


def launch_order(study: Study) -> list[Assignment]:
    """Every session in the order a matrix launches them, randomised from the study seed.

    Blocked by pair: the pairs come in a random order and, within each, the two arms in a
    random order, so both arms of a pair run side by side (same machine load, same provider
    conditions) and neither arm systematically runs first. ``random.Random`` seeded with a
    string is stable across Python versions; the lock records the result anyway.
    """
    rng = random.Random(f"{study.name}:{study.seed}:launch-order")
    pairs = list(range(1, study.pair_count + 1))
    rng.shuffle(pairs)
    order: list[Assignment] = []
    for pair in pairs:
        arms = ["control", "treatment"]
        rng.shuffle(arms)
        order += [assignment(study, pair, arm) for arm in arms]
    return order


def session_budget(study: Study, default_budget: dict[str, float]) -> Budget:
    """A session's budget: the packet's defaults, overridden by what the study sets."""
    return Budget.model_validate({**default_budget,
                                  **study.budget.model_dump(exclude_unset=True)})


def configuration_ranks(name: str) -> int:
    """Processes one configuration runs: the trailing number of its name (``gloo-ddp-2``)."""
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 1


def session_resources(study: Study, configurations: list[str]) -> tuple[float, int]:
    """(CPUs, GPUs) one session of a task with these declared configurations is promised."""
    cpu = [configuration_ranks(c) for c in configurations if c not in CUDA_CONFIGURATIONS]
    cpus = study.resources.cpus_per_session or float(max(cpu, default=1))
    return cpus, study.resources.gpus_per_session


def task_ref(study: Study, task_id: str) -> TaskRef:
    for task in study.tasks:
        if task.id == task_id:
            return task
    raise HarnessError(f"study {study.name} has no task {task_id!r}", "check the study's tasks")
