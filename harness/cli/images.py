"""Faces of the images: build them offline."""

from __future__ import annotations

from typing import Annotated

import typer

from harness.cli.common import (
    clear_errors,
    console,
    log,
)

app = typer.Typer(no_args_is_help=True, help="Build and inspect the harness images.")


@app.command("build")
@clear_errors
def images_build(
    names: Annotated[list[str] | None, typer.Argument(
        metavar="IMAGE", help="images (default: all)")] = None,
    torch: Annotated[str | None, typer.Option(
        metavar="SPEC", help="torch pin, e.g. torch==2.13.0")] = None,
    force: Annotated[bool, typer.Option(help="rebuild even if inputs did not change")] = False,
) -> None:
    """Build the rootfs, base, control, treatment and grader images (offline)."""
    from harness.infra.images import build_images

    report = build_images(names or None, torch_spec=torch, force=force, log=log)
    for name, image in report.image_ids.items():
        state = "built" if name in report.built else "up to date"
        console.print(f"{name:<10} {image[:19]}  {state}")
