"""A hidden task's file formats (faults, validation) and the gold validation's report."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from grading.models import Verdict
from grading.yamlfile import M, YamlFileError, load_model
from harness.errors import HarnessError
from harness.paths import REPO_ROOT

# Outcomes that judged a contract and found it wanting.
FAILING = frozenset({"fail", "crash", "hang", "flaky", "diff_rejected"})


class FaultSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    description: str
    how: str
    in_practice: str
    breaks: list[str] = Field(min_length=1)  # contract ids (fnmatch patterns)


class ValidationSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    baseline_fails: list[str] = Field(min_length=1)


class Requirement(BaseModel):
    """One requirement of TASK.md, quoted, and the checks that judge it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: Literal["must", "option", "default", "part", "behaviour"]
    text: str = Field(min_length=1)  # verbatim from TASK.md, whitespace aside
    # "hidden:<file>::<test function>" (fnmatch patterns), "public-tests" or
    # "grader:editable-paths" (harness.oracle.requirements.OTHER_JUDGES)
    checks: list[str]
    note: str | None = None
    gap: str | None = None  # why no check judges it (``checks`` empty)


class RequirementsTrace(BaseModel):
    """``hidden/<task>/requirements.yaml``: every requirement of TASK.md to its checks."""

    model_config = ConfigDict(extra="forbid")

    requirements: list[Requirement] = Field(min_length=1)


class VariantResult(BaseModel):
    variant: str
    verdict: Verdict
    outcomes: dict[str, str]
    expected_failing: list[str]
    mismatches: list[str]
    grade_folder: str
    # Per declared configuration: pass, fail or not_run (as the grade reports it).
    configurations: dict[str, str] = Field(default_factory=dict)
    # Per contract: the check's declared oracle, configurations, tolerance and measured values.
    evidence: dict[str, dict[str, str]] = Field(default_factory=dict)


class ValidationReport(BaseModel):
    task: str
    ok: bool
    contracts: list[str]
    variants: list[VariantResult]
    not_run: list[str]
    # What the requirements trace lacks (harness/oracle/requirements.py); any fails the task.
    requirement_problems: list[str] = Field(default_factory=list)


def load_yaml(path: Path, model: type[M]) -> M:
    try:
        return load_model(path, model, what="hidden task file")
    except YamlFileError as exc:
        raise HarnessError(str(exc), "fix the hidden task's validation files") from None


class TaskPaths(BaseModel):
    """Where one task's folders are: its public packet, its hidden side, and its reports."""

    task: str
    packet: Path
    hidden: Path
    reports: Path = REPO_ROOT / "reports"

    @property
    def reference_patch(self) -> Path:
        return self.hidden / "reference" / "solution.patch"

    @property
    def traincheck_reports(self) -> Path:
        return self.reports / "traincheck" / self.task

    @property
    def validation_reports(self) -> Path:
        return self.reports / "validation"

    @property
    def oracle_strength_reports(self) -> Path:
        return self.reports / "oracle-strength"


def default_packet_dir(task: str) -> Path:
    return REPO_ROOT / "task_packets" / task


def default_hidden_dir(task: str) -> Path:
    return REPO_ROOT / "hidden" / task


def task_paths(task: str, *, packet: Path | None = None, hidden: Path | None = None,
               needs: tuple[str, ...] = ()) -> TaskPaths:
    """A task's folders (the repository's by default); each of ``needs`` (a path under the
    hidden folder, or ``packet.yaml``) must exist, or one error line names it."""
    paths = TaskPaths(task=task, packet=packet or default_packet_dir(task),
                      hidden=hidden or default_hidden_dir(task))
    for needed in ("packet.yaml", *needs):
        where = paths.packet / needed if needed == "packet.yaml" else paths.hidden / needed
        if not where.is_file():
            raise HarnessError(f"task {task!r}: {where} is missing",
                               "pass --packet/--hidden, or use a task with "
                               "task_packets/<task>/ and hidden/<task>/")
    return paths
