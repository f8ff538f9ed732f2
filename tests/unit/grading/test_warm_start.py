"""What a warm server is asked to run, and with what (the forking itself is tested in the
grader image: tests/grader/test_warm_start.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from grading import warm_server, warm_start


def test_only_this_interpreter_running_a_script_or_a_module_starts_warm() -> None:
    entry = warm_start.entry_of
    assert entry([sys.executable, "train.py", "--steps", "2"]) == warm_start.Entry(
        "script", "train.py", ("--steps", "2"), False)
    assert entry([sys.executable, "-u", "-m", "grading.probe_runner", "a"]) == warm_start.Entry(
        "module", "grading.probe_runner", ("a",), True)
    for argv in ([sys.executable, "-c", "print(1)"], [sys.executable, "-X", "dev", "t.py"],
                 [sys.executable], [sys.executable, "-m"], ["/usr/bin/env", "python", "t.py"],
                 ["/bin/sh", "-c", "python t.py"]):
        assert entry(argv) is None, argv


def test_a_server_is_told_only_what_an_import_could_read() -> None:
    env = {"PATH": "/bin", "PYTHONHASHSEED": "0", "RANK": "1", "MASTER_PORT": "29500",
           "HOME": "/scratch", "GRADING_RUN_ID": "x", "PYTHONPATH": "/tree",
           warm_start.WARM_START_VAR: "1"}
    assert warm_start.identity_env(env) == {"PATH": "/bin", "PYTHONHASHSEED": "0"}
    # The coverage hook acts at interpreter start: such a process must start fresh.
    assert warm_start.identity_env({**env, "GRADING_TRACE_DIR": "/t"}) is None


def test_python_path_entries_and_switches_read_as_the_interpreter_reads_them() -> None:
    env = {"PYTHONPATH": os.pathsep.join(["/abs", "rel", ""])}
    assert warm_server._pythonpath(env, "/work") == ["/abs", "/work/rel", "/work"]
    assert warm_server._pythonpath({}, "/work") == []
    flag = warm_server._env_flag
    assert [flag({"V": v}, "V") for v in ("", "0", "1", "2", "yes")] == [
        False, False, True, True, True]
    assert flag({}, "V") is False


def test_a_tally_is_summed_and_damaged_lines_are_skipped(tmp_path: Path) -> None:
    tally = tmp_path / "warm.jsonl"
    assert warm_start.read_tally(tally) == (0, 0)
    tally.write_text('{"warm": 3, "fresh": 1}\nnot json\n{"warm": 2}\n[1]\n'
                     '{"warm": 4, "fresh": 0}\n')
    assert warm_start.read_tally(tally) == warm_start.Tally(warm=7, fresh=1)


def test_each_kind_environment_and_preload_list_has_its_own_daemon(tmp_path: Path) -> None:
    path = warm_start.daemon_path
    one = path(tmp_path, "server", {"PATH": "/bin"}, ["torch"])
    assert one.parent == tmp_path and one.name.startswith("server-") and one.suffix == ".sock"
    assert one == path(tmp_path, "server", {"PATH": "/bin"}, ["torch"])
    assert len({one, path(tmp_path, "judge", {"PATH": "/bin"}, ["torch"]),
                path(tmp_path, "server", {"PATH": "/usr/bin"}, ["torch"]),
                path(tmp_path, "server", {"PATH": "/bin"}, ["torch", "pytest"])}) == 4
