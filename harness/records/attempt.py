"""The runs folder: attempt folders, session records and manifests.

``runs/<study>/<session>/attempt-N/`` is created with an exclusive ``mkdir``, so two
harness processes can never write the same attempt, and nothing recorded is overwritten:
a rerun gets the next N. The session record is the one file rewritten in place (atomically)
as the session moves from ``running`` to its end; the transcript beside it is append-only.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from grading.hashing import file_sha256
from grading.models import Verdict
from grading.yamlfile import M
from harness.errors import HarnessError
from harness.records import outcomes
from harness.records.budget import Usage
from harness.records.processes import StopReport
from harness.text import json_dumps

RECORD_NAME = "session.json"
MANIFEST_NAME = "manifest.json"
TRANSCRIPT_NAME = "transcript.jsonl"
BLOB_DIR = "blobs"
ARTIFACT_DIR = "artifacts"
BASELINE_DIR = "baseline"
FINAL_DIR = "final"
DIFF_NAME = "submission.diff"
SNAPSHOT_DIR = "snapshots"
GRADES_DIR = "grades"
# Each grading's summary, in its own grades/grade-N/ folder (written once, never rewritten).
GRADE_SUMMARY_NAME = "summary.json"
# Auditors' records (harness/audit/evidence.py), added after the session with their own hash chain.
AUDIT_DIR = "audit"
SNAPSHOT_GRADES_NAME = f"{GRADES_DIR}/snapshots.json"
CHAINS_NAME = f"{AUDIT_DIR}/chains.json"
JUDGEMENTS_NAME = f"{AUDIT_DIR}/judgements.jsonl"


class AttemptPaths(BaseModel):
    """Every file of one attempt folder, by name: the one place that names them.

    ::

        runs/<study>/<session>/attempt-N/
          session.json              the session record (SessionRecord)
          transcript.jsonl          the hash-chained event log
          blobs/<sha256>            strings too long to inline in an event
          artifacts/NNNN-<tool>.log a tool call's whole output
          baseline/                 the packet's repository as the agent received it
          final/                    the workspace copied out at the end
          submission.diff           final/ against baseline/: what is graded
          snapshots/NNNN.diff       the code at each trajectory snapshot
          manifest.json             sha256 of every file above
          grades/grade-N/           one grading (summary.json, grader.json, out/grade.json,
                                    out/logs/)
          grades/snapshots.json     every snapshot's grade (grades/snapshots/grade-N/)
          audit/chains.json         evidence chains (never in the manifest)
          audit/judgements.jsonl    auditors' judgements (never in the manifest)
    """

    model_config = ConfigDict(frozen=True)

    root: Path

    @property
    def record(self) -> Path:
        return self.root / RECORD_NAME

    @property
    def transcript(self) -> Path:
        return self.root / TRANSCRIPT_NAME

    @property
    def blobs(self) -> Path:
        return self.root / BLOB_DIR

    @property
    def artifacts(self) -> Path:
        return self.root / ARTIFACT_DIR

    @property
    def baseline(self) -> Path:
        return self.root / BASELINE_DIR

    @property
    def final(self) -> Path:
        return self.root / FINAL_DIR

    @property
    def diff(self) -> Path:
        return self.root / DIFF_NAME

    @property
    def snapshots(self) -> Path:
        return self.root / SNAPSHOT_DIR

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST_NAME

    @property
    def grades(self) -> Path:
        return self.root / GRADES_DIR

    @property
    def snapshot_grades(self) -> Path:
        return self.root / SNAPSHOT_GRADES_NAME

    @property
    def snapshot_grade_dirs(self) -> Path:
        return self.grades / SNAPSHOT_DIR

    @property
    def audit(self) -> Path:
        return self.root / AUDIT_DIR

    @property
    def chains(self) -> Path:
        return self.root / CHAINS_NAME

    @property
    def judgements(self) -> Path:
        return self.root / JUDGEMENTS_NAME

    @staticmethod
    def snapshot_diff_name(index: int) -> str:
        """A snapshot's diff, relative to the attempt folder (as its event names it)."""
        return f"{SNAPSHOT_DIR}/{index:04d}.diff"


class DiffSummary(BaseModel):
    sha256: str
    bytes: int
    files_changed: list[str] = Field(default_factory=list)


GRADER_ERROR: Literal["grader_error"] = "grader_error"
# The grader's verdict, or ``grader_error`` when no trustworthy grade came back.
RecordedVerdict = Verdict | Literal["grader_error"]


class GradeSummary(BaseModel):
    verdict: RecordedVerdict
    folder: str
    counts: dict[str, int] = Field(default_factory=dict)
    # Declared configurations the grader could not run, with why (never counted as passed).
    configurations_not_run: dict[str, str] = Field(default_factory=dict)
    # Every declared configuration's outcome (pass, fail, not_run).
    configurations: dict[str, str] = Field(default_factory=dict)
    # Why a grader_error is one.
    reason: str | None = None

    def shown(self) -> str:
        """The verdict as a reader must see it: what was not determined, in so many words."""
        if self.verdict == "complete_on_cpu":
            cuda = ", ".join(self.configurations_not_run) or "CUDA"
            return f"complete_on_cpu (not determined for CUDA: {cuda} not run)"
        if self.configurations_not_run:
            return f"{self.verdict} (not run: {', '.join(self.configurations_not_run)})"
        return self.verdict


class TranscriptHead(BaseModel):
    """Where the transcript ended when the session closed it: the chain cannot say that."""

    events: int
    head: str  # the last event's hash


class LaunchInfo(BaseModel):
    """How a matrix launched this attempt; absent for a session started by hand."""

    executor: Literal["local", "slurm"]
    run_id: str  # the `harness matrix run` that launched it
    # The matrix run's start (local) or the job's submission (Slurm), UTC.
    queued_at: str
    # From ``queued_at`` to the container's start: kept apart from every budget.
    queue_seconds: float | None = None
    job_id: str | None = None  # Slurm
    job_started_at: str | None = None  # when the job's worker started (Slurm), UTC
    cpus: float = 0.0  # what the session was promised
    gpus: int = 0


# session.json's format; absent (1) in records written before it was versioned.
SESSION_SCHEMA_VERSION = 2
# Only outcomes harness/records/outcomes.py classifies, so a matrix knows what each one means.
SessionOutcome = Annotated[str, AfterValidator(outcomes.require_known)]


class SessionRecord(BaseModel):
    """``session.json``: one attempt of one session, rewritten as the session progresses."""

    schema_version: int = 1
    study: str
    session_id: str
    attempt: int
    task: str
    pair: int
    arm: Literal["control", "treatment"]
    seed: int
    model: str
    in_frozen_study: bool = True
    # The study lock the session ran under (harness/study/freeze.py); None: not frozen.
    study_revision: int | None = None
    lock_sha256: str | None = None
    launch: LaunchInfo | None = None
    packet_dir: str
    hidden_dir: str
    image: str
    image_id: str
    container: str | None = None
    gpu_ids: list[str] = Field(default_factory=list)
    status: Literal["running", "finished", "interrupted"] = "running"
    outcome: SessionOutcome | None = None
    error: str | None = None
    harness_pid: int
    host: str
    started_at: str
    ended_at: str | None = None
    usage: Usage | None = None
    # The agent's processes frozen and killed before the final copy-out: which, and how.
    processes_stopped: StopReport | None = None
    diff: DiffSummary | None = None
    grades: list[GradeSummary] = Field(default_factory=list)
    transcript: TranscriptHead | None = None  # set when the session ends


def atomic_write(path: Path, data: bytes, *, create_only: bool = False) -> None:
    """Write ``path`` whole or not at all. ``create_only``: a record written once; when it
    already exists (another run wrote it meanwhile) nothing is changed and ``HarnessError``
    names it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if create_only:
            # link() never replaces: of two runs, exactly one creates the record.
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise HarnessError(f"{path} was written meanwhile by another run",
                                   "read it there; a record once written is never "
                                   "rewritten") from None
            Path(tmp).unlink()
        else:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(attempt_dir: Path, record: SessionRecord) -> None:
    # Not model_dump_json: a file name that is not UTF-8 (a lone surrogate) must not fail it.
    data = record.model_dump(mode="json")
    # Assignments are not validated: check here what every reader will check (an unclassified
    # outcome), so a record that could not be read back is never written.
    SessionRecord.model_validate(data)
    text = json_dumps(data, indent=2)
    atomic_write(attempt_dir / RECORD_NAME, text.encode())


# No record of an attempt is near this; a larger file is damage, not a record.
RECORD_MAX_BYTES = 64 * 1024**2


def read_json_file(path: Path, what: str, *, max_bytes: int = RECORD_MAX_BYTES) -> Any:
    """A record file's JSON, read as hostile: a regular file (never through a link), at most
    ``max_bytes``, UTF-8, one JSON value; anything else is one error naming the file."""
    fix = "restore it from a copy you trust (`harness verify` names every changed file)"
    try:
        st = path.lstat()
    except FileNotFoundError:
        raise HarnessError(f"{path} is missing ({what})", fix) from None
    except OSError as exc:
        raise HarnessError(f"{path} cannot be read ({what}): {exc.strerror}", fix) from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise HarnessError(f"{path} is {kind}, not {what}", fix)
    if st.st_size > max_bytes:
        raise HarnessError(f"{path} is {st.st_size} bytes, too large for {what}", fix)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HarnessError(f"{path} is not UTF-8 (byte {exc.start}), so not {what}", fix) from None
    except OSError as exc:
        raise HarnessError(f"{path} cannot be read ({what}): {exc.strerror}", fix) from None
    if not text.strip():
        raise HarnessError(f"{path} is empty, not {what}", fix)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        where = (f" at line {exc.lineno} column {exc.colno}"
                 if isinstance(exc, json.JSONDecodeError) else "")
        raise HarnessError(f"{path} is not JSON{where} ({reason}), so not {what}", fix) from None


def read_model_file(path: Path, model: type[M], what: str) -> M:
    """:func:`read_json_file`, then the model's validation; its first problem in one line."""
    data = read_json_file(path, what)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the top level"
        raise HarnessError(f"{path} is not {what}: {where}: {first['msg']}",
                           "restore it from a copy you trust (`harness verify` names every "
                           "changed file)") from None


def _parse_record(path: Path) -> SessionRecord:
    # json.loads, not model_validate_json, which refuses the escapes write_record may write.
    return read_model_file(path, SessionRecord, "a session record")


def read_record(attempt_dir: Path) -> SessionRecord:
    path = attempt_dir / RECORD_NAME
    if not path.exists() and not path.is_symlink():
        raise HarnessError(f"{attempt_dir} holds no session record", "pass an attempt folder")
    return _parse_record(path)


def new_numbered_dir(parent: Path, prefix: str) -> Path:
    """Create the next ``<prefix>-N`` folder exclusively (mkdir fails if it exists)."""
    parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        try:
            (parent / f"{prefix}-{n}").mkdir()
            return parent / f"{prefix}-{n}"
        except FileExistsError:
            n += 1


def newest_numbered_dir(parent: Path, prefix: str) -> Path | None:
    """The ``<prefix>-N`` folder with the highest N (a real folder, not a link), if any."""
    numbered = []
    for folder in parent.glob(f"{prefix}-*"):
        number = folder.name.removeprefix(f"{prefix}-")
        if number.isdigit() and folder.is_dir() and not folder.is_symlink():
            numbered.append((int(number), folder))
    return max(numbered)[1] if numbered else None


def set_aside(path: Path) -> Path:
    """Rename an unfinished piece of work to ``<name>.unfinished-N`` (never deleted: it is
    evidence of what the stopped run had done) and return where it went."""
    n = 1
    while (aside := path.with_name(f"{path.name}.unfinished-{n}")).exists():
        n += 1
    path.rename(aside)
    return aside


def new_attempt_dir(session_root: Path) -> tuple[Path, int]:
    folder = new_numbered_dir(session_root, "attempt")
    return folder, int(folder.name.rsplit("-", 1)[1])


def resolve_attempt(ref: str, runs_root: Path) -> Path:
    """An attempt folder from a path, or ``STUDY/SESSION``: the attempt the study counts.

    That is the latest attempt of the latest frozen revision that ended with the agent's own
    outcome (an infrastructure failure is retried, an interruption resumed: neither counts);
    a session with no such attempt resolves to its latest finished one, else its latest.
    """
    candidates = [Path(ref), runs_root / ref]
    for path in candidates:
        if (path / RECORD_NAME).exists():
            return path
        attempts = sorted((p for p in path.glob("attempt-*")
                           if p.name.removeprefix("attempt-").isdigit()),
                          key=lambda p: int(p.name.split("-")[1]))
        if attempts:
            return _counted(attempts)
    raise HarnessError(
        f"no session found at {ref!r}",
        "pass an attempt folder (runs/<study>/<session>/attempt-N) or <study>/<session>",
    )


def _counted(attempts: list[Path]) -> Path:
    ended: list[tuple[Path, SessionRecord]] = []
    for folder in attempts:
        try:
            record = read_record(folder)
        except HarnessError:
            continue  # damaged: reading it names the problem; never chosen over a good one
        if record.status == "finished" and outcomes.outcome_kind(record.outcome) not in (
                "infra", "interrupted"):
            ended.append((folder, record))
    counted = [(f, r) for f, r in ended if r.in_frozen_study]
    if counted:
        return max(counted, key=lambda fr: (fr[1].study_revision or 0, fr[1].attempt))[0]
    return ended[-1][0] if ended else attempts[-1]


def manifest_files(folder: Path, *, name: str = MANIFEST_NAME) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` but the manifest (symlinks by their target) and
    the auditors' ``audit/`` folder."""
    files: dict[str, str] = {}
    # os.walk does not follow symlinked folders; the agent's tree may hold links to anywhere.
    for dirpath, dirnames, filenames in os.walk(folder):
        if Path(dirpath) == folder and AUDIT_DIR in dirnames:
            # Never listed: a grading that rewrites the manifest after an audit began would
            # otherwise freeze the audit file that every later judgement appends to.
            dirnames.remove(AUDIT_DIR)
        for entry in sorted(filenames + [d for d in dirnames if Path(dirpath, d).is_symlink()]):
            path = Path(dirpath, entry)
            rel = path.relative_to(folder).as_posix()
            if rel == name:
                continue
            if path.is_symlink():
                target = os.readlink(path).encode()
                files[rel] = "symlink:" + hashlib.sha256(target).hexdigest()
            elif path.is_file():
                files[rel] = file_sha256(path)
    return dict(sorted(files.items()))


def write_manifest(folder: Path, *, name: str = MANIFEST_NAME) -> dict[str, Any]:
    """SHA-256 of every file under ``folder`` (symlinks by their target text).

    In an attempt folder it also repeats the session record's transcript head, a second
    place that must agree for ``harness verify``.
    """
    files = manifest_files(folder, name=name)
    manifest: dict[str, Any] = {"files": files, "count": len(files)}
    if (folder / RECORD_NAME).is_file():
        head = _parse_record(folder / RECORD_NAME).transcript
        if head is not None:
            manifest["transcript"] = head.model_dump()
    atomic_write(folder / name, json.dumps(manifest, indent=1, sort_keys=True).encode())
    return manifest


class Manifest(BaseModel):
    """``manifest.json``: the sha256 of every file, and the transcript's head it repeats."""

    files: dict[str, str]
    count: int
    transcript: TranscriptHead | None = None


def read_manifest(folder: Path) -> dict[str, str]:
    """The files a folder's manifest lists, read as hostile (one error naming it)."""
    return read_model_file(folder / MANIFEST_NAME, Manifest, "a manifest").files


def manifest_problem(folder: Path) -> str | None:
    """Why ``folder``'s files no longer match its manifest, or None when they all do.

    Files under ``grades/`` that the manifest does not list are allowed: a grading killed
    before it rewrote the manifest leaves its own (partial) numbered folder, nothing else.
    ``audit/`` (evidence chains and judgements, made after the session) is never compared:
    ``manifest_files`` leaves it out, and it is verified by its own hash chain instead.
    """
    path = folder / MANIFEST_NAME
    if not path.exists() and not path.is_symlink():
        return f"{folder} has no {MANIFEST_NAME}"
    try:
        listed = read_manifest(folder)
    except HarnessError as exc:
        return exc.problem
    now = manifest_files(folder)
    for rel, digest in listed.items():
        if rel not in now:
            return f"{rel} is listed in the manifest but missing"
        if now[rel] != digest:
            return f"{rel} changed since the manifest was written"
    extra = [rel for rel in now if rel not in listed and not rel.startswith("grades/")]
    if extra:
        return f"{extra[0]} is not in the manifest"
    return None


def extend_manifest(folder: Path) -> dict[str, Any]:
    """Add the files that appeared since the manifest was written (a grading's folder); a
    listed file is never changed or dropped, and one that no longer matches its entry stops
    it (one error naming the file), so nothing is re-blessed."""
    path = folder / MANIFEST_NAME
    manifest = read_json_file(path, "a manifest")
    listed = read_manifest(folder)
    now = manifest_files(folder)
    for rel, digest in listed.items():
        if now.get(rel) != digest:
            raise HarnessError(f"{folder / rel} no longer matches the manifest",
                               "restore it from a copy you trust; nothing was added")
    manifest["files"] = dict(sorted({**now, **listed}.items()))
    manifest["count"] = len(manifest["files"])
    atomic_write(path, json.dumps(manifest, indent=1, sort_keys=True).encode())
    return manifest


def write_grade_summary(grade_dir: Path, summary: GradeSummary) -> None:
    """A grading's summary, in its own folder, written once."""
    target = grade_dir / GRADE_SUMMARY_NAME
    if target.exists():
        raise HarnessError(f"{target} already exists", "a grading writes a new grades/grade-N")
    atomic_write(target, (summary.model_dump_json(indent=1) + "\n").encode())


def read_grades(attempt_dir: Path, record: SessionRecord | None = None) -> list[GradeSummary]:
    """Every grading of an attempt, oldest first: those an older session record lists, then
    each ``grades/grade-N/summary.json`` (a grading killed before its summary has none)."""
    record = record or read_record(attempt_dir)
    found = {g.folder: g for g in record.grades}
    grades = AttemptPaths(root=attempt_dir).grades
    folders = grades.glob("grade-*") if grades.is_dir() else []
    numbered = sorted((int(d.name.split("-", 1)[1]), d) for d in folders
                      if d.name.split("-", 1)[1].isdigit() and d.is_dir())
    for _n, folder in numbered:
        rel = folder.relative_to(attempt_dir).as_posix()
        summary = folder / GRADE_SUMMARY_NAME
        if rel in found or not summary.is_file() or summary.is_symlink():
            continue
        try:
            found[rel] = GradeSummary.model_validate_json(summary.read_bytes())
        except ValueError:
            raise HarnessError(f"{summary} is not a grade summary",
                               "restore it from a copy you trust (harness verify names "
                               "every changed file)") from None
    order = {rel: i for i, rel in enumerate(found)}
    return sorted(found.values(), key=lambda g: (_grade_number(g.folder), order[g.folder]))


def _grade_number(folder: str) -> int:
    tail = folder.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def all_records(runs_root: Path) -> list[tuple[Path, SessionRecord]]:
    """Every session record under a runs folder (all studies, and their scratch sessions
    under ``scratch/<study>/``)."""
    return _records([*runs_root.glob(f"*/*/attempt-*/{RECORD_NAME}"),
                     *runs_root.glob(f"scratch/*/*/attempt-*/{RECORD_NAME}")])


def study_records(study_root: Path) -> list[tuple[Path, SessionRecord]]:
    """Every session record of one study (``runs/<study>``), attempts in number order."""
    paths = study_root.glob(f"*/attempt-*/{RECORD_NAME}")
    return sorted(_records(paths), key=lambda item: (item[1].session_id, item[1].attempt))


def _records(paths: Iterable[Path]) -> list[tuple[Path, SessionRecord]]:
    found = []
    for path in sorted(paths):
        try:
            found.append((path.parent, _parse_record(path)))
        except HarnessError:
            continue  # damaged: unreadable_attempts lists it, with why
    return found


def unreadable_attempts(study_root: Path) -> list[tuple[Path, str]]:
    """Attempt folders of a study whose session record cannot be read, with why (a half
    written record cannot exist: records are written atomically, so this is damage)."""
    found = []
    for folder in sorted(study_root.glob("*/attempt-*")):
        if not folder.is_dir() or folder.is_symlink():
            continue
        try:
            read_record(folder)
        except HarnessError as exc:
            found.append((folder, exc.problem))
    return found
