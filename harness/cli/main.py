"""The ``harness`` command line: this file only registers the faces, one module per use."""

from __future__ import annotations

from typing import Annotated

import typer

# Typer 0.2x carries its own copy of click, whose exceptions are not click's; older Typer
# raises click's own.
try:
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - depends on the installed Typer
    from click.exceptions import UsageError  # type: ignore[assignment]

from harness.cli import audit, images, oracle, report, session, study, traincheck
from harness.cli.common import console, fail

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Run, grade and audit agent sessions on PyTorch training tasks.")


def _version(value: bool) -> None:
    if value:
        from harness.cli.version import describe

        console.print(describe(), markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="print the package version and the checkout's commit, and exit")] = False) -> None:
    """Run, grade and audit agent sessions on PyTorch training tasks."""


# One session, by hand.
app.command("session")(session.session)
app.command("grade")(session.grade_cmd)
app.command("cleanup")(session.cleanup)
app.command("demo")(session.demo)
# A study.
app.command("freeze")(study.freeze_cmd)
app.add_typer(study.matrix, name="matrix")
app.command("report")(report.report)
# Reading an attempt back.
app.command("verify")(audit.verify)
app.add_typer(audit.replay, name="replay")
app.add_typer(audit.audit, name="audit")
# The oracle and the diagnostic track.
app.command("validate")(oracle.validate)
app.command("oracle-strength")(oracle.oracle_strength_cmd)
app.command("calibrate")(traincheck.calibrate)
app.add_typer(traincheck.app, name="traincheck")
app.add_typer(images.app, name="images")
app.command("doctor")(images.doctor)


def main() -> None:
    """The entry point: Typer's app, with a usage mistake (an unknown option, a missing or
    malformed value) shown as one line naming the problem and where help is, like every
    other error."""
    command = typer.main.get_command(app)
    try:
        code = command.main(prog_name="harness", standalone_mode=False)
    except UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "harness"
        fail(f"error: {exc.format_message()} (fix: see `{where} --help`)", 2)
    except typer.Abort:
        fail("stopped", 130)
    raise SystemExit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
