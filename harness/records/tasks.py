"""A hidden task's file formats (faults, validation) and the gold validation's report."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from grading.models import Verdict
from grading.yamlfile import M, YamlFileError, load_model
from harness.errors import HarnessError

# Outcomes that judged a contract and found it wanting.
FAILING = frozenset({"fail", "crash", "hang", "diff_rejected"})


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


def load_yaml(path: Path, model: type[M]) -> M:
    try:
        return load_model(path, model, what="hidden task file")
    except YamlFileError as exc:
        raise HarnessError(str(exc), "fix the hidden task's validation files") from None
