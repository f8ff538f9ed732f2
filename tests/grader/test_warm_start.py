"""Warm starts (mutation analysis): a forked candidate process is the fresh one, sealed alike.

Runs inside the grader image (tests/test_grader_image.py): the judge is root, candidate code
runs as the candidate uid. Each fact a candidate process can observe about itself is taken from
the same command started fresh and started warm, and compared.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grading import launch, sealed, warm_start
from grading.run import RunResult, run_command

FACTS = '''
import json, os, random, sys, tempfile
import torch
out = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Linear(3, 2)
loss = model(torch.ones(4, 3)).pow(2).mean()
loss.backward()
try:
    dumpable = bool(open("/proc/self/environ", "rb").read())
except OSError:
    dumpable = False
facts = {
    "uids": os.getresuid(), "gids": os.getresgid(), "groups": os.getgroups(),
    "umask": os.umask(0o077), "cwd": os.getcwd(), "argv": sys.argv,
    "path_head": sys.path[:3], "main_file": __file__, "name": __name__,
    "env": dict(os.environ), "tempdir": tempfile.gettempdir(),
    "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
    "pgid_is_pid": os.getpgid(0) == os.getpid(), "sid_is_pid": os.getsid(0) == os.getpid(),
    "dumpable": dumpable, "threads": torch.get_num_threads(), "loss": loss.item(),
    "grad": model.weight.grad.tolist(), "random": random.random(),
    "stdout_write_through": sys.stdout.write_through, "stdin": sys.stdin.read(),
    "hash": hash("warm"),
}
with open(out, "w") as fh:
    json.dump(facts, fh)
print("to stdout")
print("to stderr", file=sys.stderr)
code = int(sys.argv[2]) if len(sys.argv) > 2 else 0
if code == 99:
    raise RuntimeError("the candidate raised")
sys.exit(code)
'''


@pytest.fixture()
def warm(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(warm_start.WARM_START_VAR, "1")
    yield
    warm_start._close_servers()  # a later test must not find this test's server


def script(name: str = "facts.py", text: str = FACTS) -> Path:
    """A script in a root-owned folder the candidate can read (as a graded tree is)."""
    folder = sealed.job_dir("script")
    (folder / name).write_text(text)
    sealed.make_readable_tree(folder)
    return folder / name


def run(prefix: list[str], tmp_path: Path, name: str, *extra: str,
        env: dict[str, str] | None = None) -> tuple[RunResult, Path]:
    """``prefix OUT extra...`` as the candidate, in its own job folder; OUT its facts file."""
    job = sealed.job_dir(f"out-{name}")
    env = env or {"PATH": os.environ["PATH"], "PYTHONHASHSEED": "0", "LANG": "C.UTF-8",
                  "PYTHONPATH": "/nonexistent-a"}
    res = run_command([*prefix, str(job / "facts.json"), *extra], job, env, 60,
                      tmp_path / f"{name}.log")
    sealed.seal(job)
    return res, job / "facts.json"


def facts_of(path: Path) -> dict[str, Any]:
    facts = json.loads(path.read_text())
    facts["env"] = {k: v for k, v in facts["env"].items()
                    if k not in ("GRADING_RUN_ID", "HOME", "TMPDIR")}
    for key in ("cwd", "tempdir", "main_file", "random"):
        facts.pop(key)
    facts["argv"] = facts["argv"][:1] + facts["argv"][2:]
    return facts


def warm_started(log: Path) -> bool:
    return "[grading] warm start" in log.read_text()


def test_a_warm_process_observes_what_a_fresh_one_does(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = script()
    cold, cold_out = run([sys.executable, str(path)], tmp_path, "cold", "3")
    assert not warm_started(tmp_path / "cold.log")
    monkeypatch.setenv(warm_start.WARM_START_VAR, "1")
    try:
        hot, hot_out = run([sys.executable, str(path)], tmp_path, "warm", "3")
        again, again_out = run([sys.executable, str(path)], tmp_path, "again", "3")
    finally:
        warm_start._close_servers()
    assert warm_started(tmp_path / "warm.log") and warm_started(tmp_path / "again.log")
    assert cold.exit_code == hot.exit_code == again.exit_code == 3
    cold_facts, hot_facts = facts_of(cold_out), facts_of(hot_out)
    assert hot_facts == cold_facts
    assert hot_facts["uids"] == [sealed.candidate().uid] * 3 and hot_facts["groups"] == []
    assert hot_facts["fds"] == [0, 1, 2, 3]  # 3: the listing itself
    assert hot_facts["dumpable"] and hot_facts["pgid_is_pid"] and hot_facts["sid_is_pid"]
    # Each process draws its own random numbers, as fresh ones do.
    assert json.loads(hot_out.read_text())["random"] != json.loads(again_out.read_text())["random"]
    log = (tmp_path / "warm.log").read_text()
    assert "to stdout" in log and "to stderr" in log


def test_a_module_its_exceptions_and_signals(tmp_path: Path, warm: None) -> None:
    path = script("factsmod.py")
    env = {"PATH": os.environ["PATH"], "PYTHONHASHSEED": "0", "PYTHONPATH": str(path.parent)}
    res, out = run([sys.executable, "-m", "factsmod"], tmp_path, "module", "99", env=env)
    assert warm_started(tmp_path / "module.log")
    assert res.exit_code == 1
    assert "RuntimeError: the candidate raised" in (tmp_path / "module.log").read_text()
    facts = json.loads(out.read_text())
    assert facts["name"] == "__main__" and facts["path_head"][0] == str(out.parent)

    killer = script("k.py", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    res = run_command([sys.executable, str(killer)], killer.parent,
                      {"PATH": os.environ["PATH"]}, 60, tmp_path / "k.log")
    assert warm_started(tmp_path / "k.log") and res.signal == signal.SIGSEGV


def test_a_warm_hang_is_killed_with_what_it_started(tmp_path: Path, warm: None) -> None:
    hang = script("h.py", "import subprocess, time\n"
                          "subprocess.Popen(['sleep', '1000'], start_new_session=True)\n"
                          "time.sleep(1000)\n")
    started = time.monotonic()
    res = run_command([sys.executable, str(hang)], hang.parent, {"PATH": os.environ["PATH"]},
                      8, tmp_path / "h.log")
    assert warm_started(tmp_path / "h.log")
    assert res.timed_out and res.signal == signal.SIGKILL
    assert time.monotonic() - started < 60
    assert sealed.candidate_pids() == []


def test_a_warm_process_cannot_reach_the_server(tmp_path: Path, warm: None) -> None:
    """The server is root's: the candidate can neither signal nor read it, and holds no
    descriptor of it."""
    attack = script("a.py",
        "import os, sys, json\n"
        "server = os.getppid()\n"
        "result = {}\n"
        "for what, act in [('kill', lambda: os.kill(server, 9)),\n"
        "                  ('mem', lambda: open(f'/proc/{server}/mem', 'rb').read(1)),\n"
        "                  ('environ', lambda: open(f'/proc/{server}/environ', 'rb').read())]:\n"
        "    try:\n"
        "        act(); result[what] = 'done'\n"
        "    except OSError as exc:\n"
        "        result[what] = type(exc).__name__\n"
        "result['fds'] = sorted(os.listdir('/proc/self/fd'))\n"
        "print(json.dumps(result))\n")
    res = run_command([sys.executable, str(attack)], attack.parent,
                      {"PATH": os.environ["PATH"]}, 60, tmp_path / "a.log")
    assert warm_started(tmp_path / "a.log") and res.exit_code == 0
    line = [ln for ln in (tmp_path / "a.log").read_text().splitlines() if ln.startswith("{")]
    result = json.loads(line[0])
    assert result["kill"] == "PermissionError"
    assert result["mem"] == result["environ"] == "PermissionError"
    assert result["fds"] == ["0", "1", "2", "3"]
    # The server lives on and serves the next run.
    res = run_command([sys.executable, str(attack)], attack.parent,
                      {"PATH": os.environ["PATH"]}, 60, tmp_path / "b.log")
    assert warm_started(tmp_path / "b.log") and res.exit_code == 0, (tmp_path / "b.log").read_text()


def test_two_warm_ranks_train_together(tmp_path: Path, warm: None) -> None:
    job_script = Path(__file__).parents[1] / "fixtures" / "dist" / "allreduce_job.py"
    out = sealed.job_dir("launch-warm")
    result = launch.launch([sys.executable, str(job_script), "ok", str(out)], nproc=2, cwd=out,
                           env={"PATH": os.environ["PATH"], "GLOO_SOCKET_IFNAME": "lo"},
                           timeout_s=60, log_dir=tmp_path / "logs", grace_s=3,
                           expected_outputs=lambda r: [out / f"rank{r}.txt"])
    assert result.outcome == "ok", result.detail
    assert all(warm_started(Path(r.log)) for r in result.ranks)
    assert (out / "rank0.txt").read_text() == (out / "rank1.txt").read_text() == "3.0\n"


def test_commands_a_server_cannot_run_start_fresh(tmp_path: Path, warm: None) -> None:
    job = sealed.job_dir("fresh")
    res = run_command("echo shell", job, {"PATH": os.environ["PATH"]}, 30, tmp_path / "s.log")
    assert res.exit_code == 0 and not warm_started(tmp_path / "s.log")
    res = run_command([sys.executable, "-c", "print(1)"], job, {"PATH": os.environ["PATH"]}, 30,
                      tmp_path / "c.log")
    assert res.exit_code == 0 and not warm_started(tmp_path / "c.log")
    traced = {"PATH": os.environ["PATH"], "GRADING_TRACE_DIR": str(job)}
    plain = script("t.py", "print('traced')\n")
    res = run_command([sys.executable, str(plain)], job, traced, 30, tmp_path / "t.log")
    assert res.exit_code == 0 and not warm_started(tmp_path / "t.log")
