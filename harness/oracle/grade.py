"""Host side of grading: run the grader image on baseline + diff + hidden, collect grade.json.

The grader container gets exactly four inputs: the pristine baseline, the packet's public
``packet.yaml``, the diff and ``hidden/<task>``, all root-owned and closed to the candidate
uid inside (``grading/sealed.py``). It runs with no network, read-only root and the sandbox's
limits, its judge as root with only the capabilities it needs to run candidate code as another
uid and to kill it. It is told an opaque submission id, never the arm, the session name or the
transcript. Each grading writes a new numbered folder under the attempt, so re-grading never
overwrites an earlier verdict.

The host trusts nothing the container returns but one bounded regular file, ``grade.json``,
read from the archive stream (no path on the host is ever followed), validated, and bound to
this submission: its submission id, task, diff digest, baseline and hidden-tree digests and
grader-code digest must be the ones the host sent and expects. The logs come back as inert
evidence (regular files only, capped); anything holding the hidden canary is refused. A grader
that exits non-zero, is killed or times out is a ``grader_error``, whatever it left behind.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import tarfile
import tempfile
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

import docker
from pydantic import BaseModel, ValidationError

from grading.hashing import file_sha256, grader_source_sha256, tree_sha256
from grading.models import GRADE_SCHEMA_VERSION, GradeReport
from grading.packet import load_packet_spec
from harness.errors import HarnessError
from harness.infra import images
from harness.infra.sandbox import ExecResult, Sandbox, SandboxLimits
from harness.infra.workspace import tar_inputs
from harness.oracle import reuse
from harness.records import events
from harness.records.attempt import (
    GRADER_ERROR,
    MANIFEST_NAME,
    AttemptPaths,
    GradeSummary,
    atomic_write,
    extend_manifest,
    new_numbered_dir,
    read_manifest,
    write_grade_summary,
    write_manifest,
)
from harness.records.clock import utc_timestamp
from harness.records.grades import SnapshotGrade, SnapshotGrades
from harness.records.transcript import read_events
from harness.records.verify import require_verified
from harness.text import one_line

INPUT_DIR = "/workspace/in"
OUTPUT_DIR = "/workspace/out"
WORK_DIR = "/workspace/work"
JUDGE_USER = "0:0"
# What the judge keeps of root's powers: make and hand over the candidate's folders (CHOWN,
# FOWNER), read what the candidate wrote (DAC_OVERRIDE), start processes as the candidate
# uid (SETUID, SETGID) and kill every one of them (KILL). Everything else is dropped, and
# no-new-privileges holds for the candidate.
JUDGE_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETUID", "SETGID")
# The container's loopback is shared by every candidate job of a grade, and a closed TCP
# connection's TIME_WAIT entry (its addresses and ports, readable by any uid in /proc/net/tcp)
# outlives its job by a minute: with no TIME_WAIT table, a job cannot leave data there for the
# next one (grading/sealed.py; docs/grading.md).
GRADER_SYSCTLS = {"net.ipv4.tcp_max_tw_buckets": "0"}
GRADE_JSON_MAX_BYTES = 16 * 1024**2
OUTPUT_MAX_BYTES = 256 * 1024**2


class GraderFailed(HarnessError):
    """The grader produced no grade the host can trust; ``reason`` says why, in one line."""

    def __init__(self, reason: str, fix: str) -> None:
        super().__init__(f"grader error: {reason}", fix)
        self.reason = reason


def grader_sandbox(client: docker.DockerClient, image: str, *, labels: dict[str, str],
                   name_hint: str = "grade", limits: SandboxLimits | None = None,
                   extra_capabilities: tuple[str, ...] = ()) -> Sandbox:
    """A grader container: the judge as root with ``JUDGE_CAPABILITIES``, nothing else, and a
    cgroup per candidate job where the host can give one (``harness.infra.job_cgroups``).
    ``extra_capabilities``: for diagnostics only (a loop that takes stacks with py-spy)."""
    return Sandbox(client, image, labels=labels, name_hint=name_hint,
                   limits=limits or SandboxLimits(pids=1024), user=JUDGE_USER,
                   cap_add=(*JUDGE_CAPABILITIES, *extra_capabilities), sysctls=GRADER_SYSCTLS,
                   job_cgroups=True)


def send_inputs(sandbox: Sandbox, entries: dict[str, Path]) -> None:
    """Make the grader's folders and put ``entries`` under ``INPUT_DIR``. Inputs and outputs
    are root-owned and 0700: the candidate uid inside never reads them."""
    sandbox.exec(["sh", "-c", f"mkdir -p {INPUT_DIR} {OUTPUT_DIR} {WORK_DIR} && "
                  f"chmod 700 {INPUT_DIR} {OUTPUT_DIR} && chmod 711 {WORK_DIR}"],
                 timeout_s=30, user=JUDGE_USER)
    sandbox.put_archive(INPUT_DIR, tar_inputs(entries))


class GraderInputs(BaseModel):
    """Everything the grader container receives: nothing about arm, session or transcript."""

    baseline: Path
    packet_yaml: Path
    hidden: Path
    diff: Path


class Expected(BaseModel):
    """What a trustworthy ``grade.json`` for this submission must say about its inputs."""

    submission_id: str
    task_id: str
    diff_sha256: str
    baseline_tree_sha256: str
    hidden_tree_sha256: str
    grader_source_sha256: str


def canaries(hidden: Path) -> list[bytes]:
    canary = hidden / "CANARY"
    return [canary.read_text().strip().encode()] if canary.is_file() else []


def _spool(chunks: Iterable[bytes], cap: int) -> tempfile.SpooledTemporaryFile[bytes]:
    spool: tempfile.SpooledTemporaryFile[bytes] = tempfile.SpooledTemporaryFile(8 * 1024**2)
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > cap:
            spool.close()
            raise GraderFailed(f"the grader's output is over {cap} bytes",
                               "see the grader's log; a grader writes a few MB at most")
        spool.write(chunk)
    spool.seek(0)
    return spool


def read_grader_output(chunks: Iterable[bytes], dest: Path, *, canaries: list[bytes],
                       main_file: str = "grade.json") -> bytes:
    """Read the archive of the grader's output folder; return ``main_file``'s bytes.

    Only regular files and folders inside the folder are taken; links, devices and anything
    else are dropped and listed in ``dest/refused.txt``. Files land in ``dest`` (new), which is
    only written, never read back or followed. A canary anywhere refuses the whole output.
    """
    dest.mkdir()
    grade_json: bytes | None = None
    refused: list[str] = []
    with _spool(chunks, OUTPUT_MAX_BYTES) as spool, tarfile.open(fileobj=spool, mode="r:") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if not parts or parts[0] != "out" or any(p in ("..", "/", "") for p in parts):
                refused.append(f"{member.name} (outside the output folder)")
                continue
            rel = parts[1:]
            if member.isdir():
                if rel:
                    dest.joinpath(*rel).mkdir(parents=True, exist_ok=True)
                continue
            if not member.isreg() or not rel:
                refused.append(f"{member.name} (not a regular file: type {member.type!r})")
                continue
            fh = tar.extractfile(member)
            data = fh.read() if fh is not None else b""
            hit = next((c for c in canaries if c in data), None)
            if hit is not None:
                raise GraderFailed(f"the grader's output file {'/'.join(rel)} holds the hidden "
                                   "canary", "hidden material must never leave the grader")
            if rel == (main_file,):
                if member.size > GRADE_JSON_MAX_BYTES:
                    raise GraderFailed(f"{main_file} is {member.size} bytes, over the "
                                       f"{GRADE_JSON_MAX_BYTES} cap", "see the grader's log")
                grade_json = data
            target = dest.joinpath(*rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            # "xb": a fresh file; a name the archive repeats cannot overwrite the first copy.
            with open(target, "xb") as out:
                out.write(data)
    if refused:
        (dest / "refused.txt").write_text("\n".join(refused) + "\n")
    if grade_json is None:
        raise GraderFailed(f"the grader left no regular {main_file}", "see the grader's log")
    return grade_json


def bind_report(raw: bytes, expected: Expected) -> GradeReport:
    """Parse ``grade.json`` and check that it is this submission's grade, of these inputs."""
    try:
        report = GradeReport.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise GraderFailed(f"grade.json is not a valid grade ({where}: {first['msg']})",
                           "see the grader's log") from None
    if report.schema_version != GRADE_SCHEMA_VERSION:
        raise GraderFailed(f"grade.json has schema version {report.schema_version}, expected "
                           f"{GRADE_SCHEMA_VERSION}", "rebuild the images: harness images build")
    got = {"submission_id": report.submission_id, "task_id": report.task_id,
           "diff_sha256": report.diff.sha256,
           "baseline_tree_sha256": report.baseline_tree_sha256,
           "hidden_tree_sha256": report.hidden_tree_sha256,
           "grader_source_sha256": report.grader_source_sha256}
    for key, want in expected.model_dump().items():
        if got[key] != want:
            fix = ("rebuild the images (harness images build): the grader image is not this "
                   "checkout's grading code" if key == "grader_source_sha256"
                   else "the grade is not of this submission; re-grade it")
            raise GraderFailed(f"grade.json's {key} is {str(got[key])[:24]!r}, expected "
                               f"{want[:24]!r}", fix)
    return report


def collect_grade(sandbox: Sandbox, result: ExecResult, out_dir: Path, expected: Expected, *,
                  canaries: list[bytes]) -> GradeReport:
    """The grade a finished grader run left, if the host can trust it (else ``GraderFailed``).

    A grader that timed out or exited non-zero left nothing usable, whatever its folder holds.
    """
    if result.timed_out or result.exit_code != 0:
        why = ("timed out" if result.timed_out else f"exited with code {result.exit_code}")
        raise GraderFailed(f"the grader {why}; its output is not used",
                           f"see {out_dir / 'grader-output.log'}")
    raw = read_grader_output(sandbox.get_archive(OUTPUT_DIR), out_dir / "out", canaries=canaries)
    return bind_report(raw, expected)


class ContractLines:
    """Each contract's outcome as the grader announces it (``grading: contract ID: OUTCOME``),
    passed on while it grades; the grader's other output is not shown, and nothing shown is
    longer than one inert line."""

    PREFIX = b"grading: contract "

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.pending = b""

    def feed(self, chunk: bytes) -> None:
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        self.pending = self.pending[-4096:]  # a line that never ends is not a contract line
        for line in lines:
            if line.startswith(self.PREFIX):
                text = line[len(self.PREFIX):].decode("utf-8", "replace")
                self.log(f"  {one_line(text, 200)}")


def fixed_inputs(client: docker.DockerClient, packet_yaml: Path, baseline: Path,
                 hidden: Path) -> dict[str, str]:
    """What a grading depends on besides its diff (``reuse.GradingInputs`` less the diff)."""
    return {
        "grader_image_id": images.image_id(client, "grader"),
        "task_id": load_packet_spec(packet_yaml).id,
        "packet_yaml_sha256": file_sha256(packet_yaml),
        "baseline_tree_sha256": tree_sha256(baseline),
        "hidden_tree_sha256": tree_sha256(hidden),
        "grader_source_sha256": grader_source_sha256(),
    }


def finished_grading(out_dir: Path, inputs: reuse.GradingInputs) -> GradeReport | None:
    """The grade ``grade_diff`` finished in ``out_dir`` for exactly ``inputs``, else None.

    grade_diff writes ``grader.json`` and the folder's manifest last, whatever happened. So
    a grading that was cut short, failed, or was made with other inputs is not taken. Nor is
    a folder with a link in it or any file changed since. The grade is bound again as a
    fresh one is.
    """
    if reuse.recorded_inputs(out_dir) != inputs:
        return None
    now = reuse.plain_files(out_dir)  # None when a link or a special file is there
    try:
        if now is None or {k: v for k, v in now.items() if k != MANIFEST_NAME} \
                != read_manifest(out_dir):
            return None
        record = json.loads((out_dir / reuse.GRADER_RECORD).read_bytes())
        expected = Expected(submission_id=record["expected"]["submission_id"],
                            **inputs.model_dump(include=set(Expected.model_fields)))
        return bind_report((out_dir / "out" / "grade.json").read_bytes(), expected)
    except (OSError, ValueError, KeyError, TypeError, HarnessError):
        return None


def grade_diff(
    inputs: GraderInputs,
    out_dir: Path,
    *,
    client: docker.DockerClient,
    timeout_s: float | None = None,
    log: Callable[[str], None] | None = None,
) -> GradeReport:
    """Grade one diff in a fresh grader container; ``out_dir`` (new, empty) gets the results.

    The wall limit is the packet's declared ``grade_timeout_s`` unless one is given. Raises
    ``GraderFailed`` when no trustworthy grade came back (the caller records a grader error).
    """
    for needed in (inputs.hidden, inputs.packet_yaml, inputs.baseline, inputs.diff):
        if not needed.exists():
            raise HarnessError(f"grading input {needed} is missing", "restore it and re-grade")
    packet = load_packet_spec(inputs.packet_yaml)
    if timeout_s is None:
        timeout_s = packet.grade_timeout_s
    grader_id = images.image_id(client, "grader")
    submission_id = uuid.uuid4().hex  # opaque: says nothing about arm, pair or session
    expected = Expected(
        submission_id=submission_id, task_id=packet.id,
        diff_sha256=hashlib.sha256(inputs.diff.read_bytes()).hexdigest(),
        baseline_tree_sha256=tree_sha256(inputs.baseline),
        hidden_tree_sha256=tree_sha256(inputs.hidden),
        grader_source_sha256=grader_source_sha256(),
    )
    record: dict[str, object] = {"grader_image_id": grader_id, "submission_id": submission_id,
              "graded_at": utc_timestamp(), "expected": expected.model_dump(),
              # An input the grade itself does not carry (harness.oracle.reuse keys on it).
              "packet_yaml_sha256": file_sha256(inputs.packet_yaml)}
    try:
        with grader_sandbox(client, grader_id, name_hint=f"grade-{submission_id[:12]}",
                            labels={"org.harness.role": "grader",
                                    "org.harness.submission": submission_id}) as sandbox:
            send_inputs(sandbox, {
                "baseline": inputs.baseline, "packet.yaml": inputs.packet_yaml,
                "submission.diff": inputs.diff, "hidden": inputs.hidden,
            })
            result = sandbox.exec(
                ["python", "-m", "grading", "--baseline", f"{INPUT_DIR}/baseline",
                 "--packet", f"{INPUT_DIR}/packet.yaml", "--diff", f"{INPUT_DIR}/submission.diff",
                 "--hidden", f"{INPUT_DIR}/hidden", "--out", OUTPUT_DIR,
                 "--work", f"{WORK_DIR}/grade", "--submission-id", submission_id,
                 "--expect-hidden-sha256", expected.hidden_tree_sha256],
                timeout_s=timeout_s, artifact=out_dir / "grader-output.log", user=JUDGE_USER,
                on_output=None if log is None else ContractLines(log).feed,
            )
            record.update({"exit_code": result.exit_code, "timed_out": result.timed_out,
                           "duration_s": result.duration_s})
            report = collect_grade(sandbox, result, out_dir, expected,
                                   canaries=canaries(inputs.hidden))
    except GraderFailed as exc:
        record["error"] = exc.reason
        raise
    finally:
        (out_dir / "grader.json").write_text(json.dumps(record, indent=1) + "\n")
        write_manifest(out_dir)
    return report


def grade_attempt(
    attempt_dir: Path,
    *,
    client: docker.DockerClient | None = None,
    timeout_s: float | None = None,
    log: Callable[[str], None] = print,
) -> GradeSummary:
    """Grade a session's diff; each grading gets a new ``grades/grade-N`` folder.

    A grader that fails is recorded as a ``grader_error`` grade with its reason, never as a
    verdict.
    """
    record = require_verified(attempt_dir)
    paths = AttemptPaths(root=attempt_dir)
    diff_path = paths.diff
    if not diff_path.is_file():
        raise HarnessError(f"{attempt_dir} has no submission.diff",
                           "the session did not produce a diff; see its transcript")
    inputs = GraderInputs(baseline=paths.baseline,
                          packet_yaml=Path(record.packet_dir) / "packet.yaml",
                          hidden=Path(record.hidden_dir), diff=diff_path)
    client = client or images.docker_client()
    out_dir = new_numbered_dir(paths.grades, "grade")
    folder = str(out_dir.relative_to(attempt_dir))
    log(f"grading {record.session_id} in a fresh grader container")
    try:
        report = grade_diff(inputs, out_dir, client=client, timeout_s=timeout_s, log=log)
        summary = GradeSummary(
            verdict=report.verdict, folder=folder,
            counts={str(k): n for k, n in report.counts.items()},
            configurations_not_run=report.configurations_not_run,
            configurations={k: v.outcome for k, v in report.configurations.items()})
        log(f"grade: {summary.shown()}; "
            + ", ".join(f"{k}={v}" for k, v in report.counts.items()))
        for name, result in report.configurations.items():
            log(f"  {name}: {result.outcome}" + (f" ({result.reason})" if result.reason else ""))
    except GraderFailed as exc:
        summary = GradeSummary(verdict=GRADER_ERROR, folder=folder, reason=exc.reason)
        log(f"grade: {GRADER_ERROR}: {exc.reason}")
    # The session record is never rewritten: the summary goes into the grading's own folder,
    # and the manifest only gains the new files.
    write_grade_summary(out_dir, summary)
    extend_manifest(attempt_dir)
    return summary


def _prefixed(log: Callable[[str], None], where: str, message: str) -> None:
    log(f"{where}: {message}")


def _copied_grading(study_dir: Path, study: str, key: reuse.GradingInputs, attempt_dir: Path,
                    out_dir: Path, entry: SnapshotGrade, *,
                    log: Callable[[str], None]) -> GradeReport | None:
    """The grade of a copy of another attempt's grading of ``key`` (``harness.oracle.reuse``),
    read from the copy and bound to the inputs as a fresh grade is; None (``out_dir`` left
    empty) when there is none to copy or the copy does not hold."""
    try:
        found = reuse.find_reusable(study_dir, study, key, exclude=attempt_dir)
        if found is None:
            return None
        source, files = found
        reuse.copy_grading(source, files, study_dir, key, out_dir)
        record = json.loads((out_dir / reuse.GRADER_RECORD).read_bytes())
        expected = Expected(submission_id=record["submission_id"],
                            **key.model_dump(exclude={"grader_image_id", "packet_yaml_sha256"}))
        report = bind_report((out_dir / "out" / "grade.json").read_bytes(), expected)
    # The copy is a shortcut: whatever goes wrong in it (a record that does not parse or bind,
    # a file that cannot be read or changed under it), the snapshot is graded afresh instead.
    except Exception as exc:
        log(f"not copied ({one_line(str(exc), 160)}); grading it afresh")
        reuse.clear(out_dir)
        return None
    entry.reused_from = source.relative_to(study_dir).as_posix()
    log(f"the same inputs were graded in {entry.reused_from}; copied")
    return report


def grade_snapshots(
    attempt_dir: Path,
    *,
    client: docker.DockerClient | None = None,
    log: Callable[[str], None] = print,
    reuse_gradings: bool = True,
) -> SnapshotGrades:
    """Grade every trajectory snapshot of an attempt, each distinct diff in a fresh grader
    container (snapshots of the same diff share its grading: ``same_diff_as``).

    Blind: a grader sees an opaque submission id and a diff, never the arm, the session or
    the snapshot's position; the snapshots are graded in a random order, into folders
    numbered in that order, and only ``snapshots.json`` maps them back to the timeline.
    ``reuse_gradings``: a diff whose exact inputs another verified attempt of the study already
    graded gets a copy of that grading (``harness.oracle.reuse``) instead of a new one.
    """
    record = require_verified(attempt_dir)  # every snapshot is the one its event recorded
    paths = AttemptPaths(root=attempt_dir)
    if paths.snapshot_grades.exists():
        raise HarnessError(f"{paths.snapshot_grades} already holds this attempt's snapshot "
                           "grades", "read them there; a record once written is never "
                           "rewritten")
    taken = [events.parse(e).data for e in read_events(paths.transcript)
             if e.kind == "snapshot"]
    snapshots = [s for s in taken if isinstance(s, events.Snapshot) and s.diff is not None]
    if not snapshots:
        raise HarnessError(f"{attempt_dir} has no trajectory snapshot",
                           "snapshots are taken by sessions run with this harness version")
    client = client or images.docker_client()
    # One grading per distinct diff: a snapshot taken when the code had not changed since an
    # earlier one (a candidate run right after the public tests, a submit of the tested code)
    # has the same inputs, so a second container would only repeat the first's work.
    first_by_diff: dict[str, events.Snapshot] = {}
    for snap in snapshots:
        assert snap.sha256 is not None
        first_by_diff.setdefault(snap.sha256, snap)
    order = list(first_by_diff.values())
    random.SystemRandom().shuffle(order)
    packet_yaml = Path(record.packet_dir) / "packet.yaml"
    study_dir = reuse.study_folder(attempt_dir)
    same_inputs = fixed_inputs(client, packet_yaml, paths.baseline, Path(record.hidden_dir))
    graded: dict[str, SnapshotGrade] = {}
    for snap in order:
        assert snap.diff is not None and snap.sha256 is not None
        out_dir = new_numbered_dir(paths.snapshot_grade_dirs, "grade")
        folder = str(out_dir.relative_to(attempt_dir))
        entry = SnapshotGrade(index=snap.index, trigger=snap.trigger, call_id=snap.call_id,
                              diff_sha256=snap.sha256, folder=folder, verdict=GRADER_ERROR)
        where = f"a snapshot of {record.session_id} ({len(graded) + 1} of {len(order)})"
        key = reuse.GradingInputs(diff_sha256=snap.sha256, **same_inputs)
        report = None
        if reuse_gradings:
            report = _copied_grading(study_dir, record.study, key, attempt_dir, out_dir, entry,
                                     log=functools.partial(_prefixed, log, where))
        if report is None:
            inputs = GraderInputs(baseline=paths.baseline, packet_yaml=packet_yaml,
                                  hidden=Path(record.hidden_dir), diff=attempt_dir / snap.diff)
            log(f"grading {where}")
            try:
                report = grade_diff(inputs, out_dir, client=client)
            except GraderFailed as exc:
                entry.reason = exc.reason
        if report is not None:
            entry.verdict = report.verdict
            entry.contracts = {c.id: c.outcome for c in report.contracts}
        graded[snap.sha256] = entry
    entries = []
    for snap in snapshots:
        assert snap.sha256 is not None
        first = graded[snap.sha256]
        entries.append(first if first.index == snap.index else first.model_copy(update={
            "index": snap.index, "trigger": snap.trigger, "call_id": snap.call_id,
            "same_diff_as": first.index}))
    result = SnapshotGrades(graded_at=utc_timestamp(),
                            snapshots=sorted(entries, key=lambda g: g.index))
    atomic_write(paths.snapshot_grades, (result.model_dump_json(indent=1) + "\n").encode(),
                 create_only=True)
    extend_manifest(attempt_dir)
    return result
