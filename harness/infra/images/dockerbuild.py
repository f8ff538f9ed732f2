"""One ``docker build`` with its log kept under ``.cache/build-logs``."""

from __future__ import annotations

from pathlib import Path

import docker

from harness.errors import HarnessError
from harness.infra.images.specs import Log
from harness.paths import CACHE_DIR


def docker_build(
    client: docker.DockerClient,
    context: Path,
    tag: str,
    buildargs: dict[str, str],
    labels: dict[str, str],
    log: Log,
    network: str | None = None,
) -> str:
    log_dir = CACHE_DIR / "build-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{tag.replace(':', '_').replace('/', '_')}.log"
    error = None
    with log_path.open("w") as out:
        stream = client.api.build(
            path=str(context), tag=tag, buildargs=buildargs, labels=labels, rm=True,
            forcerm=True, decode=True, network_mode=network,
        )
        for chunk in stream:
            if "stream" in chunk:
                out.write(chunk["stream"])
            if "error" in chunk:
                error = chunk["error"].strip()
                out.write(f"ERROR: {error}\n")
    if error:
        raise HarnessError(f"building {tag} failed: {error[-300:]}", f"see {log_path}")
    return str(client.images.get(tag).id)
