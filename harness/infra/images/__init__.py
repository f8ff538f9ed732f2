"""Building the harness images offline: rootfs -> base -> control -> treatment, base -> grader.

No container registry is assumed. The root filesystem comes from a registry image when one
can be pulled, and otherwise from debootstrap + ``docker import``. Python packages come from
a wheelhouse the host downloads with exact pins, so no image build touches the network.
Every image carries a label with the hash of its inputs (Dockerfile folder, pins, wheels,
parent image ID); a build whose inputs did not change is skipped, which is what makes a
second ``harness images build`` nearly free.

The package's parts: ``specs`` (names, tags, labels), ``runtime`` (the engine and built
images), ``wheelhouse`` (pins and wheels), ``rootfs``, ``dockerbuild`` and ``build``.
"""

from __future__ import annotations

from harness.infra.images.build import BuildReport, build_image, build_images, inputs_hash
from harness.infra.images.runtime import docker_client, image_id
from harness.infra.images.specs import (
    ALL_IMAGE_SPECS,
    CLI_IMAGE_SPECS,
    CLI_KINDS,
    DEFAULT_TORCH_SPEC,
    IMAGE_SPECS,
    INPUTS_LABEL,
    ROOTFS_TAG,
    CliKind,
    ImageSpec,
    cli_image_name,
    image_tag,
)
from harness.infra.images.wheelhouse import find_wheels, image_pins, read_pins

__all__ = [
    "ALL_IMAGE_SPECS",
    "CLI_IMAGE_SPECS",
    "CLI_KINDS",
    "DEFAULT_TORCH_SPEC",
    "IMAGE_SPECS",
    "INPUTS_LABEL",
    "ROOTFS_TAG",
    "BuildReport",
    "CliKind",
    "ImageSpec",
    "build_image",
    "build_images",
    "cli_image_name",
    "docker_client",
    "find_wheels",
    "image_id",
    "image_pins",
    "image_tag",
    "inputs_hash",
    "read_pins",
]
