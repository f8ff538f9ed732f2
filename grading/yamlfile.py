"""The one YAML loader: a file -> a validated pydantic model, or one line naming the problem.

Every configured object (study, packet declaration, agent script, validation and fault specs,
TrainCheck needs) is read through ``load_model``, so each bad file is reported the same way:
the file, then the first problem (YAML syntax with its line, or the first field that does not
validate, with how many there are). It lives in ``grading`` because the grader reads
``packet.yaml`` and must not import ``harness``; the harness turns ``YamlFileError`` into its
own one-line error with a fix.
"""

from __future__ import annotations

import difflib
import stat
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

# No configuration file is near this (a scripted agent with a 10 MB argument is 12 MB);
# a larger one is a mistake, not a study, a packet or a script.
MAX_YAML_BYTES = 64 * 1024**2


class YamlFileError(ValueError):
    """A YAML file that is missing, unreadable, not a mapping, or not the expected model."""


def yaml_problem(exc: yaml.YAMLError) -> str:
    """Where the parser stopped and why, as it says it."""
    where = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    reason = getattr(exc, "problem", None) or getattr(exc, "context", None)
    return ("not valid YAML" + (f" at line {where.line + 1}, column {where.column + 1}"
                                if where else "") + (f": {reason}" if reason else ""))


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that holds the field at ``loc`` (through lists, dicts and Optional)."""
    current: Any = model
    for part in loc:
        while True:
            origin = typing.get_origin(current)
            if origin in (list, tuple, set, frozenset) and isinstance(part, int):
                current = typing.get_args(current)[0]
                break
            if origin is dict:
                current = typing.get_args(current)[1]
                break
            if origin in (typing.Union, types.UnionType):
                models = [a for a in typing.get_args(current)
                          if isinstance(a, type) and issubclass(a, BaseModel)]
                if not models:
                    return None
                current = models[0]
                continue
            break
        if isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str):
            field = current.model_fields.get(part)
            if field is None:
                return current
            current = field.annotation
        elif not isinstance(part, int) and typing.get_origin(current) is not dict:
            return None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def validation_problem(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """The first problem of a pydantic failure, on one line, with how many there are. An
    unknown key comes first (a misspelt key also makes its real one "Field required"), named
    with the closest known key; a pattern's regex is never shown."""
    errors = exc.errors()
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    first = unknown[0] if unknown else errors[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    count = f" ({exc.error_count()} problem(s))"
    if first["type"] == "extra_forbidden":
        key = str(first["loc"][-1])
        holder = _model_at(model, tuple(first["loc"][:-1])) if model else None
        known = list(holder.model_fields) if holder else []
        near = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean `{near[0]}`?)" if near else (
            f" (known keys: {', '.join(known)})" if known else "")
        return f"unknown key `{loc}`{hint}{count}"
    if first["type"] == "string_pattern_mismatch":
        return f"{loc}: {first['input']!r} is not allowed here{count}"
    if first["type"] == "value_error" and "error" in first.get("ctx", {}):
        return f"{loc}: {first['ctx']['error']}{count}"  # the validator's words, unprefixed
    return f"{loc}: {first['msg']}{count}"


def read_yaml_text(path: Path, what: str) -> str:
    """The text of a YAML file, read as untrusted input: a regular file (links followed: a
    configuration may be linked), at most ``MAX_YAML_BYTES``, UTF-8, not empty."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise YamlFileError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise YamlFileError(f"{what} {path} cannot be read ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise YamlFileError(f"{what} {path} is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise YamlFileError(f"{what} {path} is not a regular file")
    if st.st_size > MAX_YAML_BYTES:
        raise YamlFileError(f"{what} {path} is {st.st_size} bytes, over the "
                            f"{MAX_YAML_BYTES}-byte limit")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise YamlFileError(f"{what} {path} cannot be read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlFileError(f"{what} {path} is not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise YamlFileError(f"{what} {path} is empty")
    return text


def load_model(path: Path, model: type[M], *, what: str) -> M:
    """``path`` parsed as YAML and validated as ``model``; ``what`` names the file's role."""
    text = read_yaml_text(path, what)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise YamlFileError(f"{what} {path} is {yaml_problem(exc)}") from None
    except RecursionError:
        raise YamlFileError(f"{what} {path} is nested too deeply") from None
    if not isinstance(raw, dict):
        raise YamlFileError(f"{what} {path} must be a YAML mapping, not "
                            f"{type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise YamlFileError(f"{what} {path}: {validation_problem(exc, model)}") from None
