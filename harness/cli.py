"""The ``harness`` command line. Each command is a thin call into one module."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import typer
from rich.console import Console

from harness.errors import HarnessError

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
images_app = typer.Typer(no_args_is_help=True, help="Build and inspect the harness images.")
app.add_typer(images_app, name="images")
console = Console()
err_console = Console(stderr=True)


def clear_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a HarnessError into one line on stderr and exit code 2."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except HarnessError as exc:
            err_console.print(exc.line(), markup=False, highlight=False, soft_wrap=True)
            sys.exit(2)

    return wrapper


@images_app.command("build")
@clear_errors
def images_build(
    names: list[str] = typer.Argument(None, help="images to build (default: all)"),
    torch: str = typer.Option(None, help="torch pin, e.g. torch==2.13.0 (default: HARNESS_TORCH_SPEC or the CPU pin)"),
    force: bool = typer.Option(False, help="rebuild even when inputs did not change"),
) -> None:
    """Build the rootfs, base, control, treatment and grader images (offline)."""
    from harness.images import build_images

    report = build_images(names or None, torch_spec=torch, force=force, log=console.print)
    for name, image in report.image_ids.items():
        state = "built" if name in report.built else "up to date"
        console.print(f"{name:<10} {image[:19]}  {state}")
