"""The hidden canary appears nowhere an agent can see: packets, images, workspaces, transcripts."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from harness.infra import images
from tests.helpers import canaries, contains_any


@pytest.mark.parametrize("arm", ["control", "treatment"])
def test_no_agent_image_holds_a_canary(client: docker.DockerClient, arm: str) -> None:
    container = client.containers.create(images.image_tag(arm), network_mode="none")
    try:
        hit = contains_any(container.export(chunk_size=1 << 20), canaries())
    finally:
        container.remove(force=True)
    assert hit is None


def test_no_workspace_or_transcript_holds_a_canary(demo_attempt: Path) -> None:
    needles = canaries()
    seen = 0
    for part in ("final", "baseline", "artifacts", "blobs", "transcript.jsonl",
                 "submission.diff", "session.json"):
        root = demo_attempt / part
        paths = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in paths:
            if path.is_symlink():
                continue
            seen += 1
            assert contains_any([path.read_bytes()], needles) is None, path
    assert seen > 10
