"""The images: names, parents, tags, labels and the torch pin."""

from __future__ import annotations

import os
from collections.abc import Callable

from pydantic import BaseModel

from harness.errors import HarnessError

INPUTS_LABEL = "org.harness.inputs"
ROLE_LABEL = "org.harness.image"

ROOTFS_TAG = "harness-rootfs:bookworm"
DEFAULT_TORCH_SPEC = "torch==2.13.0"

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
