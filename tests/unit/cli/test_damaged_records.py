"""Damaged records get one line, never a traceback, and nothing is written or changed.

Every record file of an attempt, and every input file of a study, is damaged in every way
(missing, empty, truncated, one byte flipped, not UTF-8, not JSON/YAML, the wrong types, a
directory or a symlink in its place), and every command that reads it runs on it: a non-zero
exit, at most one line on stderr (exactly one ``error:``/``FAILED`` line but for the timeline,
whose rows are the evidence), no traceback, and the folder exactly as it was.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli.main import main
from tests.attempts import finished_attempt
from tests.conftest import write_study

Damage = Callable[[Path], None]


def _replace(path: Path, data: bytes) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.write_bytes(data)


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    _replace(path, bytes(data))


def _as_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "x").write_text("x")


def _as_link(path: Path) -> None:
    # The same bytes, but through a link to a file outside the folder.
    outside = path.parent.parent / f"outside-{path.name}"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)


DAMAGES: dict[str, Damage] = {
    "missing": lambda p: p.unlink(),
    "empty": lambda p: _replace(p, b""),
    "truncated": lambda p: _replace(p, p.read_bytes()[: max(1, len(p.read_bytes()) // 2)]),
    "one_byte_flipped": _flip,
    "not_utf8": lambda p: _replace(p, b"\xff\xfe" + p.read_bytes()),
    "not_json": lambda p: _replace(p, b"this is {not json\n"),
    "wrong_types": lambda p: _replace(p, b'{"files": 3, "status": [], "schema_version": "x"}\n'),
    "a_directory": _as_dir,
    "a_symlink": _as_link,
}
ATTEMPT_FILES = ["session.json", "manifest.json", "transcript.jsonl", "submission.diff",
                 "snapshots/0001.diff", "final/a.py", "grades/grade-1/summary.json"]
READERS = [["verify"], ["replay", "timeline"], ["replay", "html", "--out", "{out}"],
           ["audit", "propose"], ["audit", "show"], ["grade"], ["grade", "--snapshots"]]


def _state(root: Path) -> dict[str, object]:
    found: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_file():
                found[rel] = path.read_bytes()
            else:
                found[rel] = "dir"
    return found


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str],
            monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["harness", *args])
    # The unit layer has no engine: a command that gets as far as Docker says so in a line.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def assert_refused(args: list[str], code: int, out: str, err: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0, (args, out[-500:], err)
    assert "Traceback" not in out + err, (args, err)
    if args[:2] == ["replay", "timeline"]:
        assert len(lines) <= 1, (args, lines)
    else:
        assert len(lines) == 1, (args, lines, out[-300:])
        assert lines[0].startswith(("error: ", "FAILED")), (args, lines)


@pytest.mark.parametrize("rel", ATTEMPT_FILES)
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_attempt_file(rel: str, damage: str, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    attempt = finished_attempt(tmp_path / "runs" / "s" / "t-pair1-control" / "attempt-1",
                               graded=True)
    DAMAGES[damage](attempt / rel)
    before = _state(tmp_path / "runs")
    out_page = tmp_path / "page.html"
    for reader in READERS:
        args = [a.replace("{out}", str(out_page)) for a in reader] + [str(attempt)]
        code, out, err = run_cli(args, capsys, monkeypatch)
        assert_refused(args, code, out, err)
        assert _state(tmp_path / "runs") == before, args
        assert not out_page.exists(), args


STUDY_READERS = [["freeze", "--verify"], ["matrix", "plan"], ["matrix", "status"],
                 ["session", "--pair", "1", "--arm", "control"]]


@pytest.mark.parametrize("damage", [d for d in DAMAGES if d != "wrong_types"] + ["yaml_types"])
def test_a_damaged_study_file(damage: str, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    study = write_study(tmp_path)
    if damage == "yaml_types":
        study.write_text("name: [1, 2]\ntasks: 3\n")
    elif damage == "not_json":
        study.write_text("name: x\ntasks: [\n")  # not YAML
    else:
        DAMAGES[damage](study)
    before = _state(tmp_path)
    for reader in STUDY_READERS:
        args = [*reader, "--study", str(study)]
        code, out, err = run_cli(args, capsys, monkeypatch)
        assert_refused(args, code, out, err)
        assert _state(tmp_path) == before, args


def test_a_wrong_kind_of_output_path_or_a_bad_number_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    attempt = finished_attempt(tmp_path / "runs" / "s" / "t-pair1-control" / "attempt-1")
    study = write_study(tmp_path)
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for args in (["replay", "html", str(attempt), "--out", str(tmp_path)],
                 ["replay", "index", "--study", str(study), "--out", str(a_file)],
                 ["matrix", "status", "--study", str(study), "--every", "-1"],
                 ["matrix", "status", "--study", str(study), "--watch", "--every", "0"]):
        before = _state(tmp_path)
        code, out, err = run_cli(args, capsys, monkeypatch)
        assert_refused(args, code, out, err)
        assert _state(tmp_path) == before, args
