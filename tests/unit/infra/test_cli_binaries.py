"""The CLIs' pinned binaries: only the pinned files leave the tarball, byte for byte; the CLI
images are a layer over the arms' images and leave the four images' inputs alone."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.infra import images
from harness.infra.images import cli_binaries
from harness.infra.images.cli_binaries import PinnedCli, PinnedFile


def tarball(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def spec(files: dict[str, bytes]) -> PinnedCli:
    return PinnedCli(npm_package="x", version="1.0.0", platform_package="x-linux@1.0.0",
                     tarball_sha256="0" * 64, entrypoint="bin/x",
                     files={name: PinnedFile(to=f"bin/{Path(name).name}",
                                             sha256=hashlib.sha256(data).hexdigest())
                            for name, data in files.items()})


def test_only_the_pinned_files_are_extracted(tmp_path: Path) -> None:
    pinned = spec({"vendor/x": b"binary"})
    tarball(tmp_path / "p.tgz", {"package/vendor/x": b"binary",
                                 "package/../../etc/evil": b"no",
                                 "package/README.md": b"readme"})
    cli_binaries._extract(pinned, tmp_path / "p.tgz", tmp_path / "tree")
    assert sorted(p.name for p in (tmp_path / "tree").rglob("*") if p.is_file()) == ["x"]
    assert (tmp_path / "tree/bin/x").read_bytes() == b"binary"


def test_a_package_without_a_pinned_file_is_refused(tmp_path: Path) -> None:
    tarball(tmp_path / "p.tgz", {"package/other": b"?"})
    with pytest.raises(HarnessError, match="lacks"):
        cli_binaries._extract(spec({"vendor/x": b"binary"}), tmp_path / "p.tgz", tmp_path / "t")


def test_the_manifest_pins_both_clis_at_the_studied_versions() -> None:
    manifest = cli_binaries.read_manifest()
    assert manifest["claude-code"].version == "2.1.328"
    assert manifest["codex"].version == "0.169.0"


def test_the_cli_images_are_a_layer_over_each_arm() -> None:
    assert list(images.IMAGE_SPECS) == ["base", "control", "treatment", "grader"]
    for kind in images.CLI_KINDS:
        for arm in ("control", "treatment"):
            spec = images.ALL_IMAGE_SPECS[images.cli_image_name(arm, kind)]
            assert spec.parent == arm and spec.cli == kind and spec.dockerfile_dir == "cli"
    # A CLI image's inputs include its pinned binary; the arms' own images do not see it.
    control = images.IMAGE_SPECS["control"]
    assert control.cli is None and control.dockerfile_dir == "control"
    a = images.inputs_hash(images.ALL_IMAGE_SPECS["control-claude-code"], "p", [], "t")
    b = images.inputs_hash(images.ALL_IMAGE_SPECS["control-codex"], "p", [], "t")
    assert a != b
