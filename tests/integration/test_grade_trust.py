"""The host trusts one bounded regular file from a grader container, bound to the submission.

Each case is a real grader container whose output folder holds what a subverted grader could
leave there, read back through the real archive stream by ``collect_grade``.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from grading.models import DiffInfo, GradeReport, RestoreInfo, SealInfo, count_outcomes
from harness.infra import images
from harness.infra.sandbox import ExecResult, Sandbox
from harness.oracle.grade import (
    JUDGE_USER,
    OUTPUT_DIR,
    Expected,
    GraderFailed,
    collect_grade,
    grader_sandbox,
)
from tests.conftest import TEST_LABEL

CANARY = b"HARNESS-CANARY-00000000-0000-4000-8000-00000000c0de"


def expected() -> Expected:
    return Expected(submission_id=uuid.uuid4().hex, task_id="tiny-regression",
                    diff_sha256=hashlib.sha256(b"diff").hexdigest(), baseline_tree_sha256="b" * 64,
                    hidden_tree_sha256="h" * 64, grader_source_sha256="g" * 64)


def passing_grade(exp: Expected, **changes: str) -> bytes:
    fields = exp.model_dump() | changes
    report = GradeReport(
        submission_id=fields["submission_id"], task_id=fields["task_id"], verdict="complete",
        contracts=[], counts=count_outcomes([]),
        diff=DiffInfo(sha256=fields["diff_sha256"], size_bytes=4, empty=False, applied=True),
        restore=RestoreInfo(), started_at="t", finished_at="t", duration_s=1.0,
        grader_source_sha256=fields["grader_source_sha256"],
        baseline_tree_sha256=fields["baseline_tree_sha256"],
        hidden_tree_sha256=fields["hidden_tree_sha256"],
        seal=SealInfo(judge_uid=0, candidate_uid=2000), python_version="3.11",
        torch_version=None)
    return report.model_dump_json().encode()


def put(box: Sandbox, files: dict[str, bytes], links: dict[str, str] | None = None) -> None:
    """Files and symlinks under /workspace, owned by root, as a grader would leave them."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    box.put_archive("/workspace", buf.getvalue())


@pytest.fixture
def box(client: docker.DockerClient) -> Iterator[Sandbox]:
    grader = images.image_id(client, "grader")
    with grader_sandbox(client, grader, labels={TEST_LABEL: "1"}, name_hint="trust") as sandbox:
        sandbox.exec(["mkdir", "-p", OUTPUT_DIR], timeout_s=30, user=JUDGE_USER)
        yield sandbox


def finished(box: Sandbox, command: str = "true") -> ExecResult:
    return box.exec(["sh", "-c", command], timeout_s=30, user=JUDGE_USER)


def test_a_bound_regular_grade_is_accepted(box: Sandbox, tmp_path: Path) -> None:
    exp = expected()
    put(box, {"out/grade.json": passing_grade(exp), "out/logs/public-tests.log": b"ok\n"})
    report = collect_grade(box, finished(box), tmp_path, exp, canaries=[CANARY])
    assert report.verdict == "complete" and report.submission_id == exp.submission_id
    assert (tmp_path / "out" / "logs" / "public-tests.log").read_bytes() == b"ok\n"


@pytest.mark.parametrize("target", ["/workspace/other/grade.json", "/etc/passwd",
                                    "../other/grade.json"])
def test_a_symlinked_grade_is_never_followed(box: Sandbox, tmp_path: Path, target: str) -> None:
    """Another session's passing grade, or a file of the host: the link is refused, and no
    path on the host is opened through it."""
    exp = expected()
    put(box, {"other/grade.json": passing_grade(exp)}, links={"out/grade.json": target})
    with pytest.raises(GraderFailed, match=r"no regular grade\.json") as info:
        collect_grade(box, finished(box), tmp_path, exp, canaries=[CANARY])
    assert "root:" not in str(info.value)
    assert not (tmp_path / "out" / "grade.json").exists()
    assert "out/grade.json" in (tmp_path / "out" / "refused.txt").read_text()


def test_a_killed_grader_is_a_grader_error_whatever_it_left(box: Sandbox, tmp_path: Path) -> None:
    exp = expected()
    put(box, {"out/grade.json": passing_grade(exp)})
    result = finished(box, "kill -9 $$")
    assert result.exit_code == 137
    with pytest.raises(GraderFailed, match="exited with code 137"):
        collect_grade(box, result, tmp_path, exp, canaries=[CANARY])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field", ["submission_id", "diff_sha256", "hidden_tree_sha256",
                                   "grader_source_sha256", "task_id"])
def test_a_grade_of_other_inputs_is_refused(box: Sandbox, tmp_path: Path, field: str) -> None:
    exp = expected()
    put(box, {"out/grade.json": passing_grade(exp, **{field: "0" * 64})})
    with pytest.raises(GraderFailed, match=field):
        collect_grade(box, finished(box), tmp_path, exp, canaries=[CANARY])


def test_hidden_material_in_the_output_refuses_it(box: Sandbox, tmp_path: Path) -> None:
    exp = expected()
    put(box, {"out/grade.json": passing_grade(exp),
              "out/logs/leak.log": b"copied: " + CANARY + b"\n"})
    with pytest.raises(GraderFailed, match="canary"):
        collect_grade(box, finished(box), tmp_path, exp, canaries=[CANARY])


def test_a_malformed_grade_is_one_clear_error(box: Sandbox, tmp_path: Path) -> None:
    exp = expected()
    put(box, {"out/grade.json": b'{"verdict": "complete"}'})
    with pytest.raises(GraderFailed, match="not a valid grade") as info:
        collect_grade(box, finished(box), tmp_path, exp, canaries=[CANARY])
    assert "\n" not in info.value.reason
