"""The root filesystem image: a registry image when one can be pulled, else debootstrap +
``docker import``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import docker
import docker.errors

from harness.errors import HarnessError
from harness.infra.images.dockerbuild import docker_build
from harness.infra.images.specs import ROLE_LABEL, ROOTFS_TAG, Log
from harness.paths import CACHE_DIR

ROOTFS_PACKAGES = ["python3", "python3-venv", "git", "ca-certificates", "procps"]


def debian_mirror() -> str:
    """The Debian mirror apt on this host already uses (overridable by HARNESS_DEBIAN_MIRROR)."""
    if os.environ.get("HARNESS_DEBIAN_MIRROR"):
        return os.environ["HARNESS_DEBIAN_MIRROR"]
    candidates = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in candidates:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        for line in text.splitlines():
            line = line.strip()
            deb822 = re.match(r"URIs:\s*(\S+)", line)
            one_line = re.match(r"deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+bookworm\s", line + " ")
            for match in (deb822, one_line):
                if match and "security" not in match.group(1) and "debian" in match.group(1):
                    return match.group(1)
    raise HarnessError(
        "no Debian mirror found in /etc/apt sources",
        "set HARNESS_DEBIAN_MIRROR to a Debian bookworm mirror URL",
    )


def _rootfs_from_registry(client: docker.DockerClient, log: Log) -> bool:
    try:
        client.images.pull("debian", tag="bookworm")
    except docker.errors.DockerException:
        return False
    log("debian:bookworm pulled; installing Python and git into it")
    dockerfile = (
        "FROM debian:bookworm\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends "
        + " ".join(ROOTFS_PACKAGES)
        + " && rm -rf /var/lib/apt/lists/*\n"
    )
    with tempfile.TemporaryDirectory() as ctx:
        Path(ctx, "Dockerfile").write_text(dockerfile)
        docker_build(client, Path(ctx), ROOTFS_TAG, {}, {ROLE_LABEL: "rootfs"}, log, network="host")
    return True


def _rootfs_from_debootstrap(client: docker.DockerClient, log: Log) -> None:
    if shutil.which("debootstrap") is None:
        raise HarnessError(
            "no registry image could be pulled and debootstrap is not installed",
            "apt-get install debootstrap (scripts/setup.sh does it)",
        )
    if os.geteuid() != 0:
        raise HarnessError("debootstrap needs root", "run `harness images build` as root once")
    mirror = debian_mirror()
    log(f"no registry: bootstrapping Debian bookworm locally from the apt mirror ({mirror})")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = [
            "debootstrap", "--variant=minbase", "--include=" + ",".join(ROOTFS_PACKAGES),
            "bookworm", str(rootfs), mirror,
        ]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise HarnessError(
                f"debootstrap failed: {result.stdout.strip().splitlines()[-1:]}",
                "check the Debian mirror (HARNESS_DEBIAN_MIRROR) and disk space",
            )
        # Package caches only make the image bigger.
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (rootfs / cache).glob("*"):
                if item.is_file():
                    item.unlink()
        tar_path = Path(tmp) / "rootfs.tar"
        subprocess.run(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tar_path), "."], check=True
        )
        repository, tag = ROOTFS_TAG.split(":")
        client.api.import_image_from_file(
            str(tar_path), repository=repository, tag=tag,
            changes=[f'LABEL {ROLE_LABEL}="rootfs"', 'CMD ["/bin/bash"]'],
        )


def ensure_rootfs(client: docker.DockerClient, log: Log) -> str:
    try:
        return str(client.images.get(ROOTFS_TAG).id)
    except docker.errors.ImageNotFound:
        pass
    if not _rootfs_from_registry(client, log):
        _rootfs_from_debootstrap(client, log)
    return str(client.images.get(ROOTFS_TAG).id)
