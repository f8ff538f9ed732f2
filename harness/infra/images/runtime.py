"""The engine and the built images, as a session or a grading finds them."""

from __future__ import annotations

import docker
import docker.errors

from harness.errors import HarnessError
from harness.infra.images.specs import ALL_IMAGE_SPECS, image_tag


def docker_client() -> docker.DockerClient:
    """A client for the local engine, or one clear error saying how to start it."""
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException as exc:
        raise HarnessError(
            f"cannot reach the Docker daemon ({str(exc).splitlines()[0][:160]})",
            "start it (`dockerd &` as root, or `scripts/setup.sh`) and check DOCKER_HOST",
        ) from exc
    return client


def image_id(client: docker.DockerClient, name: str) -> str:
    """The ID of a built image, or a clear error telling how to build it."""
    tag = image_tag(name)
    try:
        return str(client.images.get(tag).id)
    except docker.errors.ImageNotFound as exc:
        cli = ALL_IMAGE_SPECS[name].cli
        raise HarnessError(
            f"image {tag} is missing",
            f"build it with `harness images build{f' --agent {cli}' if cli else ''}`"
        ) from exc
