"""The command line's faces: multi-mode commands as subcommands, their old spellings still
accepted with one deprecation line, usage mistakes as one error line, and --version."""

from __future__ import annotations

import re
from pathlib import Path

from harness.cli.main import app
from tests.helpers import harness, one_error_line, run_cli


def test_version_names_the_package_and_the_checkout() -> None:
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"harness \S+ \(checkout ([0-9a-f]{40}(\+dirty)?|unknown)\)\n",
                        result.stdout), result.stdout


def test_the_cli_in_a_child_process_agrees(tmp_path: Path) -> None:
    """The unit layer runs the CLI in its own process (``run_cli``); here a child process,
    as a user runs it, gives the same exit status and the same bytes on both streams: a
    success, a usage mistake, a deprecated spelling and a bad-input error."""
    for args in (["--version"], ["session", "--pair", "x", "--arm", "control"],
                 ["audit", str(tmp_path / "missing"), "--show"],
                 ["report", "--study", str(tmp_path / "nope.yaml")]):
        child, here = harness(*args), run_cli(*args)
        assert (child.returncode, child.stdout, child.stderr) == \
            (here.returncode, here.stdout, here.stderr), args
        assert child.returncode == 0 or child.stderr.startswith(("error: ", "note: ")), args


def test_usage_mistakes_are_one_error_line(tmp_path: Path) -> None:
    one_error_line(run_cli("session", "--pair", "x", "--arm", "control"), "--pair")
    one_error_line(run_cli("no-such-command"), "no-such-command")
    one_error_line(run_cli("audit", "judge", str(tmp_path), "--chain", "c1"), "--category")
    one_error_line(run_cli("audit", str(tmp_path)), "propose, judge, show")


def test_old_spellings_map_to_the_subcommands(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    for old, new in (
        (["audit", missing, "--propose"], "harness audit propose"),
        (["audit", missing, "--judge", "c1", "--category", "helped", "--auditor", "a"],
         "harness audit judge"),
        (["audit", missing, "--show"], "harness audit show"),
        (["replay", missing, "--reexecute"], "harness replay reexecute"),
        (["replay", missing, "--html", str(tmp_path / "p.html")], "harness replay html"),
    ):
        result = run_cli(*old)
        assert result.returncode == 2, (old, result.stdout, result.stderr)
        note, error = [line for line in result.stderr.splitlines() if line.strip()]
        assert note.startswith("note: `") and "is deprecated; this is `" + new in note, note
        assert error.startswith("error: no session found") and "fix:" in error, error
    # The timeline needs no subcommand at all.
    one_error_line(run_cli("replay", missing), "no session found")


def test_every_use_is_registered() -> None:
    names = {c.name for c in app.registered_commands} | {
        g.name for g in app.registered_groups}
    assert names == {"session", "grade", "cleanup", "demo", "doctor", "freeze", "matrix", "verify",
                     "replay", "audit", "validate", "oracle-strength", "calibrate",
                     "traincheck", "images", "report"}
