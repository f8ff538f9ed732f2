"""Host side of grading: run the grader image on baseline + diff + hidden, collect grade.json.

The grader container gets exactly four inputs: the pristine baseline, the packet's public
``packet.yaml``, the diff and ``hidden/<task>``. It runs with no network, as a non-root
user, with the sandbox's limits, under a wall limit. It is told an opaque submission id,
never the arm, the session name or the transcript. Each grading writes a new numbered
folder under the attempt, so re-grading never overwrites an earlier verdict.
"""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from collections.abc import Callable
from pathlib import Path

import docker
from pydantic import BaseModel

from grading.models import GradeReport
from grading.packet import load_packet_spec
from harness import images, records
from harness.errors import HarnessError
from harness.sandbox import Sandbox
from harness.transcript import utc_timestamp
from harness.workspace import extract_tree

INPUT_DIR = "/workspace/in"
OUTPUT_DIR = "/workspace/out"


def tar_inputs(entries: dict[str, Path]) -> bytes:
    """One tar of the grader's inputs, owned by uid 1000 (symlinks stay links)."""
    buf = io.BytesIO()

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 1000
        info.uname = info.gname = "agent"
        return info

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, path in entries.items():
            tar.add(path, arcname=name, filter=owned)
    return buf.getvalue()


class GraderInputs(BaseModel):
    """Everything the grader container receives: nothing about arm, session or transcript."""

    baseline: Path
    packet_yaml: Path
    hidden: Path
    diff: Path


def grade_diff(
    inputs: GraderInputs,
    out_dir: Path,
    *,
    client: docker.DockerClient,
    timeout_s: float | None = None,
) -> GradeReport:
    """Grade one diff in a fresh grader container; ``out_dir`` (new, empty) gets the results.

    The wall limit is the packet's declared ``grade_timeout_s`` unless one is given.
    """
    for needed in (inputs.hidden, inputs.packet_yaml, inputs.baseline, inputs.diff):
        if not needed.exists():
            raise HarnessError(f"grading input {needed} is missing", "restore it and re-grade")
    if timeout_s is None:
        timeout_s = load_packet_spec(inputs.packet_yaml).grade_timeout_s
    grader_id = images.image_id(client, "grader")
    submission_id = uuid.uuid4().hex  # opaque: says nothing about arm, pair or session
    sandbox = Sandbox(client, grader_id, name_hint=f"grade-{submission_id[:12]}",
                      labels={"org.harness.role": "grader",
                              "org.harness.submission": submission_id})
    with sandbox:
        sandbox.exec(["mkdir", "-p", INPUT_DIR, OUTPUT_DIR, "/workspace/work"], timeout_s=30)
        sandbox.put_archive(INPUT_DIR, tar_inputs({
            "baseline": inputs.baseline, "packet.yaml": inputs.packet_yaml,
            "submission.diff": inputs.diff, "hidden": inputs.hidden,
        }))
        result = sandbox.exec(
            ["python", "-m", "grading", "--baseline", f"{INPUT_DIR}/baseline",
             "--packet", f"{INPUT_DIR}/packet.yaml", "--diff", f"{INPUT_DIR}/submission.diff",
             "--hidden", f"{INPUT_DIR}/hidden", "--out", OUTPUT_DIR,
             "--work", "/workspace/work/repo", "--submission-id", submission_id],
            timeout_s=timeout_s, artifact=out_dir / "grader-output.log",
        )
        extract_tree(sandbox.get_archive(OUTPUT_DIR), out_dir / "out", strip_prefix="out",
                     max_bytes=256 * 1024**2)
    grade_json = out_dir / "out" / "grade.json"
    if result.timed_out or not grade_json.is_file():
        why = "timed out" if result.timed_out else f"exited {result.exit_code} without grade.json"
        raise HarnessError(f"the grader {why} (inputs: {inputs.diff})",
                           f"see {out_dir / 'grader-output.log'}")
    (out_dir / "grader.json").write_text(json.dumps({
        "grader_image_id": grader_id, "submission_id": submission_id,
        "graded_at": utc_timestamp(), "exit_code": result.exit_code,
        "duration_s": result.duration_s,
    }, indent=1) + "\n")
    records.write_manifest(out_dir)
    return GradeReport.model_validate_json(grade_json.read_text())


def grade_attempt(
    attempt_dir: Path,
    *,
    client: docker.DockerClient | None = None,
    timeout_s: float | None = None,
    log: Callable[[str], None] = print,
) -> GradeReport:
    """Grade a session's diff; each grading gets a new ``grades/grade-N`` folder."""
    record = records.read_record(attempt_dir)
    diff_path = attempt_dir / "submission.diff"
    if not diff_path.is_file():
        raise HarnessError(f"{attempt_dir} has no submission.diff",
                           "the session did not produce a diff; see its transcript")
    inputs = GraderInputs(baseline=attempt_dir / "baseline",
                          packet_yaml=Path(record.packet_dir) / "packet.yaml",
                          hidden=Path(record.hidden_dir), diff=diff_path)
    client = client or images.docker_client()
    out_dir = records.new_numbered_dir(attempt_dir / "grades", "grade")
    log(f"grading {record.session_id} in a fresh grader container")
    report = grade_diff(inputs, out_dir, client=client, timeout_s=timeout_s)
    record.grades.append(records.GradeSummary(
        verdict=report.verdict, folder=str(out_dir.relative_to(attempt_dir)),
        counts=report.counts, configurations_not_run=report.configurations_not_run,
    ))
    records.write_record(attempt_dir, record)
    records.write_manifest(attempt_dir)  # the record changed: the index must match it again
    log(f"grade: {report.verdict} " + ", ".join(f"{k}={v}" for k, v in report.counts.items()))
    for name, why in report.configurations_not_run.items():
        log(f"not run: {name} ({why})")
    return report
