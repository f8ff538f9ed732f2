"""The grading package's own tests, run where grading really runs: in the grader image.

The host's test environment has no torch, so ``tests/test_grading.py`` skips its torch
cases there; here they all run (reference patch, baseline, faults that hang or crash) in
the grader container, with no network, as uid 1000.
"""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import docker

from harness import images
from harness.images import REPO_ROOT
from harness.sandbox import Sandbox, SandboxLimits
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


def test_grading_suite_passes_inside_the_grader_image(
    client: docker.DockerClient, tmp_path: Path
) -> None:
    grader = images.image_id(client, "grader")
    with Sandbox(client, grader, labels={TEST_LABEL: "1"}, name_hint="grader-suite",
                 limits=SandboxLimits(pids=1024)) as box:
        box.put_archive("/workspace", _tree_tar([
            "tests/test_grading.py", "tests/test_launch.py", "tests/fixtures",
            "hidden/tiny-regression",
        ]))
        result = box.exec(
            ["python", "-m", "pytest", "-q", "--noconftest", "-p", "no:cacheprovider",
             "-o", "addopts=", "-c", "/dev/null", "--rootdir", "/workspace/repo",
             "/workspace/repo/tests/test_grading.py", "/workspace/repo/tests/test_launch.py"],
            timeout_s=1200, workdir="/workspace/repo", artifact=tmp_path / "suite.log",
        )
    summary = result.output.strip().splitlines()[-1]
    assert result.exit_code == 0, result.output[-3000:]
    assert re.search(r"\d+ passed", summary) and "skipped" not in summary, summary
