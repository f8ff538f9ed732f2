"""A snapshot's grading reused from another attempt of the same study that graded the same inputs.

A scripted or well-converged study takes the same code many times over (every pair of a
scripted pilot writes the same diffs), and a snapshot grade is a full grading in a fresh
grader container: minutes each on a small host. A grading's result is a function of its
inputs alone: the grader image, the grading code, the task, the packet's ``packet.yaml`` (what
is restored, which configurations are declared), the pristine baseline, the hidden tree and
the diff (the grader is told an opaque id, never the arm or the session). So when an attempt
of the same study already holds a grading of exactly those inputs, a snapshot's grade copies
it instead of running it again.

What may be a source, and why a copy cannot launder a record:

- a grading its own attempt's records *name* as finished with a grade: a final grading whose
  listed ``summary.json`` has a verdict, or a snapshot grading that the listed
  ``grades/snapshots.json`` names, with a verdict and not itself a copy. A grading killed
  half-way, one added by hand, a copy cut short: none is named, so none is a source;
- in an attempt that verifies (``require_verified``) and records the same study, under the
  study's own folder (no link leads elsewhere);
- whose every entry is a regular file or folder that the attempt's manifest lists with the
  digest it has now (both ways: nothing unlisted, nothing missing);
- whose ``grader.json`` recorded these exact inputs, an exit 0 and no error.

The copy is made file by file from the listed files only, each copy hashed again against the
manifest's digest, and the grade is then read from the copy and bound to the inputs as a fresh
one is (``grade._bound_source_report``). ``reused.json`` is written first, so a copy cut short
is marked a copy, and names the source folder and the sha256 of the source's own manifest.
Anything unexpected on the way (a file that cannot be read, a record that does not parse)
makes the snapshot grade afresh; it never ends the grading.

Final grades (``grades/grade-N``) are never copied: each session's primary outcome is graded
on its own, so that no verdict of the study rests on one run a host fault could have flipped.
A final grade may be the *source* of a snapshot grade (the submitted code is often the last
snapshot's).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from grading.hashing import file_sha256
from harness.errors import HarnessError
from harness.records.attempt import (
    GRADE_SUMMARY_NAME,
    MANIFEST_NAME,
    SNAPSHOT_GRADES_NAME,
    GradeSummary,
    read_manifest,
    read_model_file,
)
from harness.records.grades import SnapshotGrades
from harness.records.verify import require_verified

GRADER_RECORD = "grader.json"
REUSED_RECORD = "reused.json"
# A grader.json is a few hundred bytes; a bigger one is not the host's own record.
_GRADER_RECORD_MAX_BYTES = 64 * 1024
_SOURCE_PATTERNS = ("*/attempt-*/grades/grade-*", "*/attempt-*/grades/snapshots/grade-*")


class GradingInputs(BaseModel):
    """Everything a grading's result depends on (the submission id is left out: it is random
    and tells the grader nothing)."""

    grader_image_id: str
    task_id: str
    packet_yaml_sha256: str
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
    except (OSError, ValueError, RecursionError):
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
        return GradingInputs.model_validate({
            **fields, "grader_image_id": record.get("grader_image_id"),
            # Recorded beside ``expected`` (the grade itself does not carry it); a grading from
            # before it was recorded is never a source.
            "packet_yaml_sha256": record.get("packet_yaml_sha256")})
    except ValidationError:
        return None


def plain_files(folder: Path) -> dict[str, str] | None:
    """sha256 of every file under ``folder`` (relative paths), or None when anything there is
    not a regular file or folder (a link, a FIFO, a socket)."""
    files: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                return None
            files[path.relative_to(folder).as_posix()] = file_sha256(path)
    return files


def _named_by_its_attempt(attempt_dir: Path, grading_dir: Path) -> bool:
    """Whether the attempt's own listed records name this grading as finished with a grade
    (and, for a snapshot grading, as no copy)."""
    folder = grading_dir.relative_to(attempt_dir).as_posix()
    if grading_dir.parent.name == "snapshots":
        graded = read_model_file(attempt_dir / SNAPSHOT_GRADES_NAME, SnapshotGrades,
                                 "snapshot grades")
        return any(g.folder == folder and g.verdict != "grader_error" and g.same_diff_as is None
                   and g.reused_from is None for g in graded.snapshots)
    summary = read_model_file(grading_dir / GRADE_SUMMARY_NAME, GradeSummary, "a grade summary")
    return summary.folder == folder and summary.verdict != "grader_error"


def _source_files(attempt_dir: Path, grading_dir: Path, study: str) -> dict[str, str] | None:
    """The grading's files (relative to it) with their digests when it may be a source."""
    record = require_verified(attempt_dir)
    if record.study != study or not _named_by_its_attempt(attempt_dir, grading_dir):
        return None
    listed = read_manifest(attempt_dir)  # covers every name below: require_verified read it
    prefix = grading_dir.relative_to(attempt_dir).as_posix() + "/"
    under = {rel[len(prefix):]: digest for rel, digest in listed.items()
             if rel.startswith(prefix)}
    now = plain_files(grading_dir)
    if not under or now is None or now != under:
        return None
    # What grade_diff wrote is the grading; a final grade's summary is its attempt's record.
    now.pop(GRADE_SUMMARY_NAME, None)
    return now


def find_reusable(study_dir: Path, study: str, inputs: GradingInputs, *,
                  exclude: Path) -> tuple[Path, dict[str, str]] | None:
    """A grading of exactly ``inputs`` that may be a source (see the module), in another
    attempt of ``study`` under ``study_dir``: (its folder, its files and their digests)."""
    home = study_dir.resolve()
    for pattern in _SOURCE_PATTERNS:
        for grading_dir in sorted(study_dir.glob(pattern)):
            # glob follows a linked session or attempt folder: only the study's own records.
            try:
                if grading_dir.is_symlink() or not grading_dir.is_dir() \
                        or not grading_dir.resolve().is_relative_to(home):
                    continue
                if grading_dir.parent.name == "grades":
                    attempt_dir = grading_dir.parents[1]
                else:
                    attempt_dir = grading_dir.parents[2]
                if attempt_dir.resolve() == exclude.resolve():
                    continue
                if recorded_inputs(grading_dir) != inputs:
                    continue
                files = _source_files(attempt_dir, grading_dir, study)
            except (HarnessError, OSError):  # a record that cannot be read is no source
                continue
            if files is not None:
                return grading_dir, files
    return None


def copy_grading(source: Path, files: dict[str, str], study_dir: Path, inputs: GradingInputs,
                 out_dir: Path) -> None:
    """Copy a source's listed files into the new, empty ``out_dir``, each checked against its
    digest; ``reused.json`` first, so a copy cut short still says it is one. Raises
    ``HarnessError`` when a copied file is not the listed one."""
    record = ReusedGrading(source=source.relative_to(study_dir).as_posix(),
                           source_manifest_sha256=files.get(MANIFEST_NAME, ""), inputs=inputs)
    (out_dir / REUSED_RECORD).write_text(record.model_dump_json(indent=1) + "\n")
    for rel, digest in sorted(files.items()):
        target = out_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / rel, target, follow_symlinks=False)
        if file_sha256(target) != digest:
            raise HarnessError(f"{source / rel} changed while it was copied",
                               "grade the snapshot afresh: harness grade --snapshots --no-reuse")


def clear(out_dir: Path) -> None:
    """Empty a grading folder a failed copy left (it is this run's own, new folder)."""
    for entry in out_dir.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def study_folder(attempt_dir: Path) -> Path:
    """The folder an attempt's study keeps its sessions in: ``runs/<study>/<session>/attempt-N``
    (of the real path: an attempt named through a link is its target's)."""
    return attempt_dir.resolve().parent.parent
