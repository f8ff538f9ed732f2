"""What every face shares: the consoles, the one-line error rule, and common options."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, ClassVar

import typer
from rich.console import Console

from harness.errors import HarnessError, Interrupted, signals_as_interrupt
from harness.paths import REPO_ROOT

# Logs and CI are not terminals: give tables room instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 150)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 300)

DEFAULT_RUNS = REPO_ROOT / "runs"
# The default study is set in harness/records/study.py (DEFAULT_STUDY, STUDY_ENV); every command
# that takes --study resolves it at run time, so HARNESS_STUDY set later is honoured.
STUDY_HELP = "study file (default: $HARNESS_STUDY, else studies/pilot.yaml, the pilot)"
StudyOption = Annotated[Path | None, typer.Option(metavar="FILE", help=STUDY_HELP,
                                                  show_default=False)]
RunsOption = Annotated[Path, typer.Option(metavar="DIR", help="runs folder")]
AttemptArgument = Annotated[str, typer.Argument(
    metavar="ATTEMPT", help="attempt folder, or STUDY/SESSION (the attempt the study counts)")]
TaskOption = Annotated[str, typer.Option(metavar="TASK", help="task id")]


def study_path(study: Path | None) -> Path:
    from harness.records.study import default_study_path

    return study if study is not None else default_study_path()


def clear_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a HarnessError into one line on stderr and exit code 2, and a stopping signal
    into one line and exit code 128 + its number (cleanup has run by then)."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            # SIGTERM/SIGHUP stop every command like Ctrl-C: the containers it holds are
            # removed on the way out (a killed `oracle-strength` once left its grader up).
            with signals_as_interrupt():
                return func(*args, **kwargs)
        except HarnessError as exc:
            err_console.print(exc.line(), markup=False, highlight=False, soft_wrap=True)
            sys.exit(2)
        except (Interrupted, KeyboardInterrupt) as exc:
            stop = exc if isinstance(exc, Interrupted) else Interrupted(signal.SIGINT)
            err_console.print(stop.line(), markup=False, highlight=False, soft_wrap=True)
            sys.exit(128 + stop.signum)

    return wrapper


def log(message: str) -> None:
    console.print(message, markup=False, highlight=False)


def fail(message: str, code: int = 1) -> None:
    """One plain line on stderr, then exit ``code``."""
    err_console.print(message, markup=False, highlight=False, soft_wrap=True)
    sys.exit(code)


class LegacyFlagsGroup(typer.core.TyperGroup):
    """A command group that still accepts an older single-command spelling.

    ``legacy`` maps an old flag to the subcommand it stands for and, when the flag took a
    value, the subcommand's option that takes it now; ``default`` is the subcommand run when
    the first word names none. The old spelling prints one deprecation line.
    """

    legacy: ClassVar[dict[str, tuple[str, str | None]]] = {}
    default: ClassVar[str | None] = None

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = self._translate(list(args))
        return super().parse_args(ctx, args)

    def _translate(self, args: list[str]) -> list[str]:
        for flag, (command, option) in self.legacy.items():
            for i, arg in enumerate(args):
                if arg != flag and not (option and arg.startswith(flag + "=")):
                    continue
                if option is None:
                    new = [command, *args[:i], *args[i + 1:]]
                elif "=" in arg:
                    new = [command, *args[:i], *args[i + 1:], option, arg.split("=", 1)[1]]
                else:
                    new = [command, *args[:i], *args[i + 2:], option, *args[i + 1:i + 2]]
                err_console.print(
                    f"note: `{flag}` is deprecated; this is `harness {self.name} "
                    f"{' '.join(new)}`", markup=False, highlight=False, soft_wrap=True)
                return new
        if self.default:
            return [self.default, *args]
        fail(f"error: `harness {self.name}` needs one of: {', '.join(self.commands)} (fix: "
             f"e.g. `harness {self.name} {next(iter(self.commands))} ...`; see "
             f"`harness {self.name} --help`)", 2)
        return args


def legacy_group(name: str, help_text: str, *, legacy: dict[str, tuple[str, str | None]],
                 default: str | None = None) -> typer.Typer:
    """A Typer sub-app whose group accepts the old spelling (see LegacyFlagsGroup)."""
    group = type(f"{name.title()}Group", (LegacyFlagsGroup,),
                 {"legacy": legacy, "default": default})
    return typer.Typer(name=name, cls=group, no_args_is_help=True, help=help_text)
