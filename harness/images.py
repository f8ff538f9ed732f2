"""Building the harness images offline: rootfs -> base -> control -> treatment, base -> grader.

No container registry is assumed. The root filesystem comes from a registry image when one
can be pulled, and otherwise from debootstrap + ``docker import``. Python packages come from
a wheelhouse the host downloads with exact pins, so no image build touches the network.
Every image carries a label with the hash of its inputs (Dockerfile folder, pins, wheels,
parent image ID); a build whose inputs did not change is skipped, which is what makes a
second ``harness images build`` nearly free.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import docker
import docker.errors
from pydantic import BaseModel

from harness.errors import HarnessError

REPO_ROOT = Path(__file__).resolve().parent.parent
IMAGES_DIR = REPO_ROOT / "images"
CACHE_DIR = REPO_ROOT / ".cache"
INPUTS_LABEL = "org.harness.inputs"
ROLE_LABEL = "org.harness.image"

ROOTFS_TAG = "harness-rootfs:bookworm"
ROOTFS_PACKAGES = ["python3", "python3-venv", "git", "ca-certificates", "procps"]
DEFAULT_TORCH_SPEC = "torch==2.13.0"
# Wheel platforms for CPython 3.11 on x86_64 glibc (bookworm has glibc 2.36).
WHEEL_PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any"]

Log = Callable[[str], None]


class ImageSpec(BaseModel):
    """One image: its Dockerfile folder, parent and the pinned packages it installs."""

    name: str
    parent: str | None  # name of the parent ImageSpec; None means the rootfs image
    requirements: str | None = None  # file under images/requirements/
    with_torch: bool = False
    # Project packages (top-level folders) copied into the build context, e.g. `grading`.
    local_packages: tuple[str, ...] = ()

    @property
    def tag(self) -> str:
        # HARNESS_IMAGE_TAG selects a set of images (e.g. one per torch build).
        return f"harness-{self.name}:{os.environ.get('HARNESS_IMAGE_TAG', 'local')}"


IMAGE_SPECS: dict[str, ImageSpec] = {
    "base": ImageSpec(name="base", parent=None, requirements="base.txt", with_torch=True),
    "control": ImageSpec(name="control", parent="base"),
    # The in-container TrainCheck runner (`diagnostics`) is part of the TrainCheck layer.
    "treatment": ImageSpec(name="treatment", parent="control", requirements="treatment.txt",
                           local_packages=("diagnostics",)),
    "grader": ImageSpec(
        name="grader", parent="base", requirements="grader.txt", local_packages=("grading",)
    ),
}


def image_tag(name: str) -> str:
    if name not in IMAGE_SPECS:
        raise HarnessError(f"unknown image {name!r}", f"use one of {sorted(IMAGE_SPECS)}")
    return IMAGE_SPECS[name].tag


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
        raise HarnessError(
            f"image {tag} is missing", "build it with `harness images build`"
        ) from exc


# --- requirements and the wheelhouse -------------------------------------------------------


def _normalise(project: str) -> str:
    return re.sub(r"[-_.]+", "_", project).lower()


def read_pins(path: Path) -> list[tuple[str, str]]:
    """``name==version`` lines of a requirements file, comments dropped."""
    pins = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise HarnessError(f"{path}: {line!r} is not pinned with ==", "pin every package")
        pins.append((name.strip(), version.strip()))
    return pins


def image_pins(spec: ImageSpec, torch_spec: str) -> list[tuple[str, str]]:
    pins = []
    if spec.with_torch:
        name, _, version = torch_spec.partition("==")
        pins.append((name.strip(), version.strip()))
    if spec.requirements:
        pins += read_pins(IMAGES_DIR / "requirements" / spec.requirements)
    return pins


def _wheel_matches(filename: str, name: str, version: str) -> bool:
    parts = filename.split("-")
    if len(parts) < 5 or not filename.endswith(".whl"):
        return False
    wheel_version = parts[1]
    return _normalise(parts[0]) == _normalise(name) and (
        wheel_version == version or wheel_version.startswith(version + "+")
    )


def find_wheels(wheelhouse: Path, pins: list[tuple[str, str]]) -> list[Path]:
    """The wheel file for each pin; a missing one is an error naming it."""
    files = sorted(p.name for p in wheelhouse.glob("*.whl")) if wheelhouse.is_dir() else []
    found = []
    for name, version in pins:
        match = [f for f in files if _wheel_matches(f, name, version)]
        if not match:
            raise HarnessError(
                f"no wheel for {name}=={version} in {wheelhouse}",
                "run `harness images build` (it downloads the wheelhouse) with PyPI reachable",
            )
        found.append(wheelhouse / match[0])
    return found


def ensure_wheelhouse(wheelhouse: Path, torch_spec: str, log: Log) -> None:
    """Download every pinned wheel not yet in the wheelhouse (no-op when all are there)."""
    pins: list[tuple[str, str]] = []
    for spec in IMAGE_SPECS.values():
        pins += image_pins(spec, torch_spec)
    try:
        find_wheels(wheelhouse, pins)
        return
    except HarnessError:
        pass
    wheelhouse.mkdir(parents=True, exist_ok=True)
    wanted = sorted({f"{n}=={v}" for n, v in pins})
    log(f"downloading {len(wanted)} pinned wheels into {wheelhouse}")
    cmd = [
        "python3", "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
        "--dest", str(wheelhouse), "--quiet",
    ]
    for platform in WHEEL_PLATFORMS:
        cmd += ["--platform", platform]
    result = subprocess.run(cmd + wanted, capture_output=True, text=True)
    if result.returncode != 0:
        tail = [ln for ln in result.stderr.splitlines() if "is ignored" not in ln][-3:]
        raise HarnessError(
            f"pip download of the pinned wheels failed: {' | '.join(tail)}",
            "check that PyPI is reachable and the pins in images/requirements/ exist",
        )
    find_wheels(wheelhouse, pins)


# --- the root filesystem image ---------------------------------------------------------------


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
        _build(client, Path(ctx), ROOTFS_TAG, {}, {ROLE_LABEL: "rootfs"}, log, network="host")
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


# --- building one image ----------------------------------------------------------------------


def _hash_tree(digest: hashlib._Hash, root: Path, prefix: str) -> None:
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        rel = f"{prefix}/{path.relative_to(root).as_posix()}"
        digest.update(f"{rel}\0{path.stat().st_mode & 0o777}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())


def inputs_hash(spec: ImageSpec, parent_id: str, wheels: list[Path], torch_spec: str) -> str:
    digest = hashlib.sha256()
    digest.update(f"parent={parent_id}\0torch={torch_spec}\0".encode())
    _hash_tree(digest, IMAGES_DIR / spec.name, "dockerfile")
    if spec.requirements:
        digest.update((IMAGES_DIR / "requirements" / spec.requirements).read_bytes())
    for wheel in wheels:  # a wheel's name carries its version; its size catches a re-download
        digest.update(f"{wheel.name}\0{wheel.stat().st_size}\0".encode())
    for package in spec.local_packages:
        _hash_tree(digest, REPO_ROOT / package, package)
    return digest.hexdigest()


def _build(
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
        shutil.copytree(IMAGES_DIR / spec.name, context, dirs_exist_ok=True)
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
        labels = {INPUTS_LABEL: digest, ROLE_LABEL: spec.name, "org.harness.torch": torch_spec}
        return _build(client, context, spec.tag, buildargs, labels, log), True


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
    """Build (or reuse) the requested images and everything they stand on."""
    torch_spec = torch_spec or os.environ.get("HARNESS_TORCH_SPEC", DEFAULT_TORCH_SPEC)
    wanted = set(names or IMAGE_SPECS)
    for name in list(wanted):
        image_tag(name)  # validates the name
        parent = IMAGE_SPECS[name].parent
        while parent:
            wanted.add(parent)
            parent = IMAGE_SPECS[parent].parent
    client = docker_client()
    wheelhouse = CACHE_DIR / "wheelhouse"
    ensure_wheelhouse(wheelhouse, torch_spec, log)
    ids = {"rootfs": ensure_rootfs(client, log)}
    built = []
    for name, spec in IMAGE_SPECS.items():  # dict order is parent-before-child
        if name not in wanted:
            continue
        parent_name = spec.parent or "rootfs"
        parent_tag = IMAGE_SPECS[spec.parent].tag if spec.parent else ROOTFS_TAG
        ids[name], did_build = build_image(
            client, spec, ids[parent_name], parent_tag, wheelhouse, torch_spec, log, force
        )
        if did_build:
            built.append(name)
    return BuildReport(image_ids=ids, built=built)
