"""The grading package's own tests, run where grading really runs: in the grader image.

``tests/grader/`` runs only here: in the grader container, with no network, as root with the
judge's capabilities, so the grader can run candidate code as the image's candidate uid
(reference patch, baseline, faults that hang or crash, and the forgeries of
``tests/grader/test_seal.py``).
"""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import docker
import pytest

from harness.infra import images, job_cgroups
from harness.oracle.grade import JUDGE_USER, grader_sandbox
from harness.paths import REPO_ROOT
from tests.conftest import TEST_LABEL


def _tree_tar(paths: list[str]) -> bytes:
    buf = io.BytesIO()

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if "__pycache__" in info.name:
            return None
        info.uid = info.gid = 1000
        return info

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel in paths:
            tar.add(REPO_ROOT / rel, arcname=f"repo/{rel}", filter=owned)
    return buf.getvalue()


# The whole in-image suite, one exec: longer than one test's default on a loaded host.
@pytest.mark.timeout(1800)
def test_grading_suite_passes_inside_the_grader_image(
    client: docker.DockerClient, tmp_path: Path
) -> None:
    grader = images.image_id(client, "grader")
    with grader_sandbox(client, grader, labels={TEST_LABEL: "1"},
                        name_hint="grader-suite") as box:
        # The suite's job cgroup tests run on a delegated hierarchy wherever the host can give
        # one, and see the reason where it cannot.
        assert box.job_cgroups is not None
        assert (box.job_cgroups.path is not None) == job_cgroups.support(client).available
        box.put_archive("/workspace", _tree_tar([
            "tests/grader", "tests/fixtures", "hidden/tiny-regression",
            "hidden/hybrid-arch/checks/graph_exec.py",
        ]))
        # The judge's own permissions, as grading really runs: root with JUDGE_CAPABILITIES,
        # candidate code as the image's candidate uid.
        result = box.exec(
            ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
             "-c", "/dev/null", "--rootdir", "/workspace/repo",
             "--confcutdir", "/workspace/repo/tests/grader", "/workspace/repo/tests/grader"],
            timeout_s=1500, workdir="/workspace/repo", artifact=tmp_path / "suite.log",
            user=JUDGE_USER,
        )
    summary = result.output.strip().splitlines()[-1]
    assert result.exit_code == 0, result.output[-3000:]
    assert re.search(r"\d+ passed", summary) and "skipped" not in summary, summary
