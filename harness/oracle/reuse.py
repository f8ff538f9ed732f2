"""A snapshot's grading reused from another attempt of the same study that graded the same inputs.

A scripted or well-converged study takes the same code many times over (every pair of a
scripted pilot writes the same diffs), and a snapshot grade is a full grading in a fresh
grader container: minutes each on a small host. A grading's result is a function of its
inputs alone: the grader image, the grading code, the task, the pristine baseline, the hidden
tree and the diff (the grader is told an opaque id, never the arm or the session). So when an
attempt under the same study folder already holds a grading of exactly those inputs, a
snapshot's grade copies it instead of running it again.

What may be copied, and why it cannot launder a record:

- only a grading whose attempt verifies (``require_verified``: transcript chain, manifest,
  diff and snapshot digests) and whose every file is listed in that attempt's manifest with
  the same digest (a grading killed half-way, or one added by hand, is never a source);
- only one that ended in a grade (no grader error, exit 0, not timed out): an infrastructure
  failure is run again, never copied;
- the copy is byte for byte, and ``reused.json`` beside it names the source folder, the inputs
  it matched and the digest of the source's own manifest, so an auditor can follow it back.

Final grades (``grades/grade-N``) are never copied: each session's primary outcome is graded
on its own, so that no verdict of the study rests on one run a host fault could have flipped.
A final grade may be the *source* of a snapshot grade (the submitted code is often the last
snapshot's).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from harness.errors import HarnessError
from harness.records.attempt import manifest_files, read_manifest
from harness.records.verify import require_verified

GRADER_RECORD = "grader.json"
REUSED_RECORD = "reused.json"
# A grader.json is a few hundred bytes; a bigger one is not the host's own record.
_GRADER_RECORD_MAX_BYTES = 64 * 1024


class GradingInputs(BaseModel):
    """Everything a grading's result depends on (the submission id is left out: it is random
    and tells the grader nothing)."""

    grader_image_id: str
    task_id: str
    diff_sha256: str
    baseline_tree_sha256: str
    hidden_tree_sha256: str
    grader_source_sha256: str


class ReusedGrading(BaseModel):
    """``reused.json``: where a copied grading came from."""

    source: str  # the source folder, relative to the study folder
    source_manifest_sha256: str
    inputs: GradingInputs


def recorded_inputs(grading_dir: Path) -> GradingInputs | None:
    """The inputs a finished, successful grading recorded in its grader.json, else None."""
    path = grading_dir / GRADER_RECORD
    try:
        if path.is_symlink() or not path.is_file() \
                or path.stat().st_size > _GRADER_RECORD_MAX_BYTES:
            return None
        record: Any = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("error") is not None:
        return None
    if record.get("exit_code") != 0 or record.get("timed_out") is not False:
        return None
    expected = record.get("expected")
    if not isinstance(expected, dict):
        return None
    fields = {k: v for k, v in expected.items() if k != "submission_id"}
    try:
        return GradingInputs.model_validate({**fields, "grader_image_id": record.get(
            "grader_image_id")})
    except ValueError:  # pydantic's ValidationError is one
        return None


def _blessed(attempt_dir: Path, grading_dir: Path) -> str | None:
    """The digest of the grading's own manifest when the attempt verifies and lists every file
    of the grading with the digest it has now; else None."""
    try:
        require_verified(attempt_dir)
        listed = read_manifest(attempt_dir)
    except HarnessError:
        return None
    prefix = grading_dir.relative_to(attempt_dir).as_posix() + "/"
    # name="": list the grading's own manifest.json too (it is one of the attempt's files).
    now = {prefix + rel: digest for rel, digest in manifest_files(grading_dir, name="").items()}
    if not now or any(listed.get(rel) != digest for rel, digest in now.items()):
        return None
    return now.get(prefix + "manifest.json")


def find_reusable(study_dir: Path, inputs: GradingInputs, *,
                  exclude: Path | None = None) -> tuple[Path, str] | None:
    """A grading of exactly ``inputs`` in a verified attempt under ``study_dir``: (its folder,
    the digest of its manifest). ``exclude``: an attempt not to look in (the one being graded)."""
    patterns = ("*/attempt-*/grades/grade-*", "*/attempt-*/grades/snapshots/grade-*")
    home = study_dir.resolve()
    for pattern in patterns:
        for grading_dir in sorted(study_dir.glob(pattern)):
            # glob follows a linked session or attempt folder: only the study's own records.
            if grading_dir.is_symlink() or not grading_dir.is_dir() \
                    or not grading_dir.resolve().is_relative_to(home):
                continue
            if (grading_dir / REUSED_RECORD).exists():
                continue  # a copy: its source is the one to name
            attempt_dir = grading_dir.parents[1] if grading_dir.parent.name == "grades" \
                else grading_dir.parents[2]
            if exclude is not None and attempt_dir.resolve() == exclude.resolve():
                continue
            if recorded_inputs(grading_dir) != inputs:
                continue
            if (digest := _blessed(attempt_dir, grading_dir)) is not None:
                return grading_dir, digest
    return None


def copy_grading(source: Path, digest: str, study_dir: Path, inputs: GradingInputs,
                 out_dir: Path) -> None:
    """Copy a source grading into the new, empty ``out_dir`` and say where it came from."""
    shutil.copytree(source, out_dir, symlinks=True, dirs_exist_ok=True)
    record = ReusedGrading(source=source.relative_to(study_dir).as_posix(),
                           source_manifest_sha256=digest, inputs=inputs)
    (out_dir / REUSED_RECORD).write_text(record.model_dump_json(indent=1) + "\n")


def study_folder(attempt_dir: Path) -> Path:
    """The folder an attempt's study keeps its sessions in: ``runs/<study>/<session>/attempt-N``."""
    return attempt_dir.parent.parent
