"""The one YAML loader: a file -> a validated pydantic model, or one line naming the problem.

Every configured object (study, packet declaration, agent script, validation and fault specs,
TrainCheck needs) is read through ``load_model``, so each bad file is reported the same way:
the file, then the first problem (YAML syntax with its line, or the first field that does not
validate, with how many there are). It lives in ``grading`` because the grader reads
``packet.yaml`` and must not import ``harness``; the harness turns ``YamlFileError`` into its
own one-line error with a fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class YamlFileError(ValueError):
    """A YAML file that is missing, unreadable, not a mapping, or not the expected model."""


def yaml_problem(exc: yaml.YAMLError) -> str:
    where = getattr(exc, "problem_mark", None)
    return "not valid YAML" + (f" at line {where.line + 1}" if where else "")


def validation_problem(exc: ValidationError) -> str:
    """The first problem of a pydantic failure, on one line, with how many there are."""
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    return f"{loc}: {first['msg']} ({exc.error_count()} problem(s))"


def load_model(path: Path, model: type[M], *, what: str) -> M:
    """``path`` parsed as YAML and validated as ``model``; ``what`` names the file's role."""
    if not path.is_file():
        raise YamlFileError(f"{what} {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise YamlFileError(f"{what} {path} cannot be read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise YamlFileError(f"{what} {path} is {yaml_problem(exc)}") from None
    if not isinstance(raw, dict):
        raise YamlFileError(f"{what} {path} must be a YAML mapping, not "
                            f"{type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise YamlFileError(f"{what} {path}: {validation_problem(exc)}") from None
