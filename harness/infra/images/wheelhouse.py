"""Exact pins and the host-side wheelhouse every image installs from (no build touches the
network)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from harness.errors import HarnessError
from harness.infra.images.specs import IMAGE_SPECS, ImageSpec, Log
from harness.paths import IMAGES_DIR

# Wheel platforms for CPython 3.11 on x86_64 glibc (bookworm has glibc 2.36).
WHEEL_PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any"]


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
