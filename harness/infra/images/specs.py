"""The images: names, parents, tags, labels and the torch pin."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel

from harness.errors import HarnessError

INPUTS_LABEL = "org.harness.inputs"
ROLE_LABEL = "org.harness.image"

ROOTFS_TAG = "harness-rootfs:bookworm"
DEFAULT_TORCH_SPEC = "torch==2.13.0"

Log = Callable[[str], None]

# The coding-agent CLIs an image can carry (images/cli/binaries.yaml pins each).
CliKind = Literal["claude-code", "codex"]
CLI_KINDS: tuple[CliKind, ...] = ("claude-code", "codex")


class ImageSpec(BaseModel):
    """One image: its Dockerfile folder, parent and the pinned packages it installs."""

    name: str
    parent: str | None  # name of the parent ImageSpec; None means the rootfs image
    requirements: str | None = None  # file under images/requirements/
    with_torch: bool = False
    # Project packages (top-level folders) copied into the build context, e.g. `grading`.
    local_packages: tuple[str, ...] = ()
    # The Dockerfile folder under images/ when it is not the image's name (the CLI images
    # share one), and the coding-agent CLI the image adds to its parent.
    folder: str | None = None
    cli: CliKind | None = None

    @property
    def dockerfile_dir(self) -> str:
        return self.folder or self.name

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


def cli_image_name(arm_image: str, cli: CliKind) -> str:
    """The image an arm of a study whose agent is ``cli`` runs in: the arm's image plus the
    CLI layer (``control-claude-code``)."""
    return f"{arm_image}-{cli}"


# One layer on top of each arm's image: the CLI's binaries, the gateway forwarder and the
# harness commands. Built only on request (`harness images build --agent KIND`), so the four
# images above, and their digests, do not change for studies that run the loop agent.
CLI_IMAGE_SPECS: dict[str, ImageSpec] = {
    cli_image_name(arm, cli): ImageSpec(name=cli_image_name(arm, cli), parent=arm, folder="cli",
                                        cli=cli)
    for cli in CLI_KINDS for arm in ("control", "treatment")
}
ALL_IMAGE_SPECS: dict[str, ImageSpec] = {**IMAGE_SPECS, **CLI_IMAGE_SPECS}


def image_tag(name: str) -> str:
    if name not in ALL_IMAGE_SPECS:
        raise HarnessError(f"unknown image {name!r}", f"use one of {sorted(ALL_IMAGE_SPECS)}")
    return ALL_IMAGE_SPECS[name].tag
