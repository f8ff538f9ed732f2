"""Building one image unless one with the same inputs exists, and the whole set in order."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import docker
import docker.errors
from pydantic import BaseModel

from grading.hashing import add_image_context
from harness.infra.images.cli_binaries import ensure_cli_tree, pinned
from harness.infra.images.dockerbuild import docker_build
from harness.infra.images.rootfs import ensure_rootfs
from harness.infra.images.runtime import docker_client
from harness.infra.images.specs import (
    ALL_IMAGE_SPECS,
    DEFAULT_TORCH_SPEC,
    IMAGE_SPECS,
    INPUTS_LABEL,
    ROLE_LABEL,
    ROOTFS_TAG,
    ImageSpec,
    Log,
    image_tag,
)
from harness.infra.images.wheelhouse import ensure_wheelhouse, find_wheels, image_pins
from harness.paths import CACHE_DIR, IMAGES_DIR, REPO_ROOT


def inputs_hash(spec: ImageSpec, parent_id: str, wheels: list[Path], torch_spec: str) -> str:
    digest = hashlib.sha256()
    digest.update(f"parent={parent_id}\0torch={torch_spec}\0".encode())
    add_image_context(digest, IMAGES_DIR / spec.dockerfile_dir, "dockerfile")
    if spec.cli is not None:  # the CLI's pinned files (their bytes are checked against these)
        cli = pinned(spec.cli)
        digest.update(f"cli={spec.cli}\0{cli.model_dump_json()}\0".encode())
    if spec.requirements:
        digest.update((IMAGES_DIR / "requirements" / spec.requirements).read_bytes())
    for wheel in wheels:  # a wheel's name carries its version; its size catches a re-download
        digest.update(f"{wheel.name}\0{wheel.stat().st_size}\0".encode())
    for package in spec.local_packages:
        add_image_context(digest, REPO_ROOT / package, package)
    return digest.hexdigest()


def build_image(
    client: docker.DockerClient,
    spec: ImageSpec,
    parent_id: str,
    parent_tag: str,
    wheelhouse: Path,
    torch_spec: str,
    log: Log,
    force: bool = False,
) -> tuple[str, bool]:
    """Build one image unless an image with the same inputs exists. Returns (id, built)."""
    wheels = find_wheels(wheelhouse, image_pins(spec, torch_spec))
    digest = inputs_hash(spec, parent_id, wheels, torch_spec)
    if not force:
        try:
            current = client.images.get(spec.tag)
            if current.labels.get(INPUTS_LABEL) == digest:
                return str(current.id), False
        except docker.errors.ImageNotFound:
            pass
    log(f"building {spec.tag}")
    with tempfile.TemporaryDirectory(dir=_mkdir(CACHE_DIR)) as tmp:
        context = Path(tmp)
        shutil.copytree(IMAGES_DIR / spec.dockerfile_dir, context, dirs_exist_ok=True)
        if spec.cli is not None:
            _link_tree(ensure_cli_tree(spec.cli, log), context / "agent")
        (context / "wheels").mkdir()
        for wheel in wheels:  # hard links: no copy of the 190 MB torch wheel
            try:
                os.link(wheel, context / "wheels" / wheel.name)
            except OSError:
                shutil.copy2(wheel, context / "wheels" / wheel.name)
        (context / "requirements.txt").write_text(
            "".join(f"{n}=={v}\n" for n, v in image_pins(spec, torch_spec))
        )
        for package in spec.local_packages:
            shutil.copytree(
                REPO_ROOT / package, context / package,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        buildargs = {"ROOTFS_IMAGE": ROOTFS_TAG, "PARENT_IMAGE": parent_tag}
        if spec.cli is not None:
            buildargs |= {"AGENT_CLI": spec.cli, "AGENT_ENTRYPOINT": pinned(spec.cli).entrypoint}
        labels = {INPUTS_LABEL: digest, ROLE_LABEL: spec.name, "org.harness.torch": torch_spec}
        return docker_build(client, context, spec.tag, buildargs, labels, log), True


def _link_tree(source: Path, target: Path) -> None:
    """``source``'s files under ``target`` as hard links (no copy of a 370 MB binary)."""
    for path in sorted(source.rglob("*")):
        dest = target / path.relative_to(source)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, dest)
        except OSError:
            shutil.copy2(path, dest)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


class BuildReport(BaseModel):
    image_ids: dict[str, str]
    built: list[str]


def build_images(
    names: list[str] | None = None,
    *,
    torch_spec: str | None = None,
    force: bool = False,
    log: Log = print,
) -> BuildReport:
    """Build (or reuse) the requested images and everything they stand on (default: the four
    images every study uses; a CLI agent's images only when named)."""
    torch_spec = torch_spec or os.environ.get("HARNESS_TORCH_SPEC", DEFAULT_TORCH_SPEC)
    wanted = set(names or IMAGE_SPECS)
    for name in list(wanted):
        image_tag(name)  # validates the name
        parent = ALL_IMAGE_SPECS[name].parent
        while parent:
            wanted.add(parent)
            parent = ALL_IMAGE_SPECS[parent].parent
    client = docker_client()
    wheelhouse = CACHE_DIR / "wheelhouse"
    ensure_wheelhouse(wheelhouse, torch_spec, log)
    ids = {"rootfs": ensure_rootfs(client, log)}
    built = []
    for name, spec in ALL_IMAGE_SPECS.items():  # dict order is parent-before-child
        if name not in wanted:
            continue
        parent_name = spec.parent or "rootfs"
        parent_tag = ALL_IMAGE_SPECS[spec.parent].tag if spec.parent else ROOTFS_TAG
        ids[name], did_build = build_image(
            client, spec, ids[parent_name], parent_tag, wheelhouse, torch_spec, log, force
        )
        if did_build:
            built.append(name)
    return BuildReport(image_ids=ids, built=built)
