"""docs/study.md documents every field of the study file, so the reference cannot drift."""

from __future__ import annotations

import typing

from pydantic import BaseModel

from harness.paths import REPO_ROOT
from harness.records.study import Study


def fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    found = []
    for name, field in model.model_fields.items():
        key = prefix + name
        nested = [a for a in (field.annotation, *typing.get_args(field.annotation))
                  for a in (a, *typing.get_args(a))
                  if isinstance(a, type) and issubclass(a, BaseModel)]
        if name == "arms":  # a mapping of arm name -> Arm
            found += [f"arms.{arm}.{f}" for arm in ("control", "treatment")
                      for f in nested[0].model_fields]
        elif nested:
            listed = typing.get_origin(field.annotation) is list
            found += fields(nested[0], key + ("[]." if listed else "."))
        else:
            found.append(key)
    return found


def test_every_study_field_is_in_the_reference() -> None:
    text = (REPO_ROOT / "docs" / "study.md").read_text()
    missing = [f for f in fields(Study) if f"| `{f}` |" not in text]
    assert not missing, f"docs/study.md does not document: {missing}"
