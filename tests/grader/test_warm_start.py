"""Warm starts (mutation analysis): a forked candidate process is the fresh one, sealed alike.

Runs inside the grader image (tests/integration/test_grader_image.py): the judge is root,
candidate code
runs as the candidate uid. Each fact a candidate process can observe about itself is taken from
the same command started fresh and started warm, and compared.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import daemon_pids, processes_with

from grading import launch, sealed, warm_start
from grading.run import run_command

FACTS = r'''
import sys, os
early_torch = "torch" in sys.modules
early_top = sorted({m.split(".")[0] for m in sys.modules})
import json, atexit, threading, pickle, inspect, signal, resource, time, gc, locale, warnings
import multiprocessing, multiprocessing.process, getpass, tempfile, faulthandler
outdir = sys.argv[1]
f = {"tmp": tempfile.gettempdir()}
f["early_torch"] = early_torch
f["early_top_count"] = len(early_top)
f["argv0"] = sys.argv[0]
f["orig_argv"] = getattr(sys, "orig_argv", None)
f["cmdline"] = open("/proc/self/cmdline", "rb").read().decode(errors="replace").split("\0")
f["builtins_type"] = type(__builtins__).__name__
f["loader"] = type(globals().get("__loader__")).__name__
f["package"] = repr(globals().get("__package__"))
f["spec"] = repr(globals().get("__spec__"))
f["cached"] = repr(globals().get("__cached__", "<absent>"))
f["stack_depth"] = len(inspect.stack())
f["flags"] = str(sys.flags)
def stream(s):
    return [s.name, s.encoding, s.errors, s.line_buffering, s.write_through,
            type(s.buffer).__name__, getattr(s.buffer, "buffer_size", None), s.fileno()]
f["streams"] = [stream(sys.stdin), stream(sys.stdout), stream(sys.stderr)]
f["dunder_streams"] = [sys.__stdout__ is sys.stdout, sys.__stderr__ is sys.stderr]
f["mp_original_dir"] = multiprocessing.process.ORIGINAL_DIR
f["mp_authkey"] = multiprocessing.current_process().authkey.hex()
f["mp_start"] = multiprocessing.get_start_method(allow_none=True)
f["rlimits"] = {n: resource.getrlimit(getattr(resource, n))
                for n in dir(resource) if n.startswith("RLIMIT_")}
f["affinity"] = sorted(os.sched_getaffinity(0))
f["nice"] = os.nice(0)
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
f["status"] = {k: st[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
                                           "NoNewPrivs", "Seccomp", "SigBlk", "SigIgn",
                                           "Threads") if k in st}
f["shared_writable_maps"] = [l.strip() for l in open("/proc/self/maps")
                             if l.split()[1][1] == "w" and l.split()[1][3] == "s"]
try:
    f["parent_threads"] = len(os.listdir(f"/proc/{os.getppid()}/task"))
except OSError as e:
    f["parent_threads"] = repr(e)
f["parent_cmdline"] = open(f"/proc/{os.getppid()}/cmdline", "rb").read().decode().split("\0")
blk = open("/proc/self/environ", "rb").read()
f["environ_block_keys"] = sorted(k.split(b"=")[0].decode() for k in blk.split(b"\0") if k)
sigs = {}
for s in signal.Signals:
    try:
        sigs[s.name] = str(signal.getsignal(s))
    except (ValueError, OSError):
        pass
f["signals"] = sigs
f["user"] = getpass.getuser()
f["sys_path_tail"] = sys.path[1:]
f["recursionlimit"] = sys.getrecursionlimit()
f["locale"] = [locale.setlocale(locale.LC_ALL, None), locale.getpreferredencoding(False),
               sys.getfilesystemencoding()]
f["gc"] = [gc.isenabled(), gc.get_threshold()]
f["gc_frozen"] = gc.get_freeze_count() > 0
f["faulthandler"] = faulthandler.is_enabled()
f["meta_path"] = [type(x).__name__ for x in sys.meta_path]
f["excepthook"] = repr(sys.excepthook)
f["main_is_module"] = sys.modules["__main__"].__dict__ is globals()
# What the server preloads (a training run imports as much): from here on both must agree.
import torch, torch.distributed, torch.distributed.checkpoint, torch.distributed.fsdp
import torch.nn.parallel, torch.optim
f["torch_threads"] = [torch.get_num_threads(), torch.get_num_interop_threads()]
f["warnings_filters"] = [str(w) for w in warnings.filters]  # torch adds its own
f["initial_seed"] = torch.initial_seed()
f["rand"] = torch.rand(2).tolist()
f["env_after_import_torch"] = sorted(os.environ)
errs = {}
try:
    m = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(m.parameters(), lr=0.1)
    m(torch.ones(1, 2)).sum().backward()
    opt.step()
    f["adamw"] = m.weight.tolist()
except Exception as e:
    errs["adamw"] = repr(e)
try:
    import torch.distributed.checkpoint as dcp
    dcp.save({"m": m.state_dict()}, checkpoint_id=os.path.join(outdir, "ckpt"))
    f["dcp"] = sorted(os.listdir(os.path.join(outdir, "ckpt")))
except Exception as e:
    errs["dcp"] = repr(e)
f["errors"] = errs
f["env_after_opt_dcp"] = {k: v for k, v in os.environ.items() if k.startswith(("TORCH", "TRITON"))}
f["env_keys_after"] = sorted(os.environ)
f["inductor_dir_exists"] = [p for p in os.listdir(tempfile.gettempdir())]
f["torch_in_sys_modules_count"] = len([m for m in sys.modules if m.startswith("torch")])

class Thing:
    pass

MARK = 1

def at_exit():
    import __main__
    r = {"main_has_mark": hasattr(__main__, "MARK")}
    try:
        pickle.dumps(Thing()); r["pickle"] = "ok"
    except Exception as e:
        r["pickle"] = repr(e)
    with open(os.path.join(outdir, "atexit.json"), "w") as fh:
        json.dump(r, fh)

atexit.register(at_exit)

def late():
    time.sleep(0.5)
    try:
        pickle.dumps(Thing()); r = "ok"
    except Exception as e:
        r = repr(e)
    with open(os.path.join(outdir, "thread.txt"), "w") as fh:
        fh.write(r)

threading.Thread(target=late).start()
with open(os.path.join(outdir, "facts.json"), "w") as fh:
    json.dump(f, fh)
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


def base_env(**more: str) -> dict[str, str]:
    """What a check's run environment holds that matters here (see oracle_lib.run_env)."""
    return {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": "lo", **more}


def warm_started(log: Path) -> bool:
    return "[grading] warm start" in log.read_text()


def facts_of(tmp_path: Path, name: str, path: Path) -> dict[str, Any]:
    """FACTS of one run of ``path``, started as ``python facts.py OUT`` in its folder."""
    job = sealed.job_dir(f"out-{name}")
    res = run_command([sys.executable, path.name, str(job)], path.parent,
                      base_env(PYTHONPATH=str(path.parent)), 120, tmp_path / f"{name}.log")
    sealed.seal(job)
    assert res.exit_code == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    # The run's own scratch folder (HOME, TMPDIR) differs by name from run to run.
    text = (job / "facts.json").read_text()
    scratch = json.loads(text)["tmp"]
    facts = json.loads(text.replace(scratch, "<scratch>"))
    facts["at_exit"] = json.loads((job / "atexit.json").read_text())
    facts["late_thread"] = (job / "thread.txt").read_text()
    return facts


# What a warm process may see differently, and why none of it can change a grade: its command
# line and the initial environment block are the server's (the live environment is the
# run's), its parent is the server, its stack has the server's frames below __main__, and the
# preloaded modules are imported already (the same files, from the same site-packages), their
# objects frozen out of the cyclic collector's sight (gc.freeze: never collected, not listed
# by gc.get_objects; no check or task uses gc).
# The random draws differ between any two processes, fresh or warm (compared separately).
SERVERS_OWN = ("gc_frozen", "cmdline", "orig_argv", "parent_threads", "parent_cmdline",
               "environ_block_keys", "stack_depth",
               # the preloaded modules are in sys.modules before the script imports them
               "early_torch", "early_top_count")
PER_PROCESS = ("initial_seed", "rand", "mp_authkey", "adamw")


def test_a_warm_process_observes_what_a_fresh_one_does(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = script("facts.py", FACTS)
    cold = facts_of(tmp_path, "cold", path)
    assert not warm_started(tmp_path / "cold.log")
    monkeypatch.setenv(warm_start.WARM_START_VAR, "1")
    try:
        hot = facts_of(tmp_path, "warm", path)
        again = facts_of(tmp_path, "again", path)
    finally:
        warm_start._close_servers()
    assert warm_started(tmp_path / "warm.log") and warm_started(tmp_path / "again.log")
    differ = {k: (cold.get(k), hot.get(k)) for k in set(cold) | set(hot)
              if cold.get(k) != hot.get(k) and k not in SERVERS_OWN + PER_PROCESS}
    assert differ == {}, json.dumps(differ, indent=1)
    assert hot["at_exit"] == {"main_has_mark": True, "pickle": "ok"}
    assert hot["late_thread"] == "ok" and hot["builtins_type"] == "module"
    # The server's own objects are out of the collector's sight (gc.freeze before forking);
    # the process's own are collected as ever (the gc facts above are the same).
    assert hot["gc_frozen"] and not cold["gc_frozen"]
    assert hot["status"]["CapEff"] == "0000000000000000" and hot["shared_writable_maps"] == []
    # Each process draws its own random numbers and auth key, as fresh ones do.
    for key in PER_PROCESS:
        assert hot[key] != again[key] and hot[key] != cold[key], key


def test_uncaught_errors_end_a_warm_process_as_they_end_a_fresh_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = {
        "kbd": "raise KeyboardInterrupt\n",
        "via_builtins": "__builtins__.print('via the module')\n",
        "exc": "def f():\n    raise ValueError('boom')\nf()\n",
        # The server's own `from __future__ import annotations` must not reach a script.
        "annotations": "def f(a: Undefined):\n    pass\n",
        "missing": None,
    }
    seen: dict[str, dict[str, Any]] = {"cold": {}, "warm": {}}
    targets = {name: script(f"{name}.py", text) for name, text in cases.items() if text}
    targets["missing"] = targets["exc"].parent / "nope.py"
    for mode in ("cold", "warm"):
        if mode == "warm":
            monkeypatch.setenv(warm_start.WARM_START_VAR, "1")
        try:
            for name, target in targets.items():
                log = tmp_path / f"{mode}-{name}.log"
                res = run_command([sys.executable, str(target)], target.parent, base_env(), 60,
                                  log)
                body = [ln for ln in log.read_text().splitlines()
                        if not ln.startswith("[grading]")]
                seen[mode][name] = (res.exit_code, res.signal, body)
                assert warm_started(log) == (mode == "warm"), name
        finally:
            warm_start._close_servers()
    assert seen["warm"] == seen["cold"], json.dumps(seen, indent=1)
    assert seen["warm"]["kbd"][1] == signal.SIGINT and seen["warm"]["missing"][0] == 2


def test_a_module_runs_as_with_dash_m_and_a_signal_is_reported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = script("factsmod.py", "import sys\n"
                    "print('main', __name__, sys.argv, sys.path[0], __spec__.name)\n"
                    "raise RuntimeError('the candidate raised')\n")
    env = base_env(PYTHONPATH=str(module.parent))
    cwd = sealed.job_dir("cwd")
    seen = {}
    for mode in ("cold", "warm"):
        if mode == "warm":
            monkeypatch.setenv(warm_start.WARM_START_VAR, "1")
        log = tmp_path / f"{mode}.log"
        res = run_command([sys.executable, "-m", "factsmod", "x"], cwd, env, 60, log)
        assert warm_started(log) == (mode == "warm")
        seen[mode] = (res.exit_code, [ln for ln in log.read_text().splitlines()
                                      if not ln.startswith("[grading]")])
    assert seen["warm"] == seen["cold"] and seen["warm"][0] == 1
    assert f"main __main__ ['{module}', 'x'] {cwd} factsmod" in seen["warm"][1]
    assert "RuntimeError: the candidate raised" in seen["warm"][1]

    killer = script("k.py", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    res = run_command([sys.executable, str(killer)], killer.parent, base_env(), 60,
                      tmp_path / "k.log")
    warm_start._close_servers()
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


def test_a_stuck_warm_process_leaves_its_own_stacks(tmp_path: Path, warm: None) -> None:
    """A warm-started process answers the grader's request for its stacks as a fresh one does
    (grading.stacks, installed in the child once it has its run's environment)."""
    hang = script("stuck.py", "import time\n"
                              "def waiting_in_a_warm_child():\n"
                              "    time.sleep(1000)\n"
                              "waiting_in_a_warm_child()\n")
    res = run_command([sys.executable, str(hang)], hang.parent, {"PATH": os.environ["PATH"]},
                      8, tmp_path / "s.log")
    log = (tmp_path / "s.log").read_text()
    assert warm_started(tmp_path / "s.log") and res.timed_out
    assert "in its own words (faulthandler):" in log, log
    assert "waiting_in_a_warm_child" in log.split("still running when it was killed:", 1)[1]


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
        "result['fds'] = {fd: os.readlink(f'/proc/self/fd/{fd}')\n"
        "                 for fd in os.listdir('/proc/self/fd')\n"
        "                 if os.path.exists(f'/proc/self/fd/{fd}')}\n"
        "result['stacks'] = os.environ['GRADING_STACKS_DIR'] + f'/stacks-{os.getpid()}.txt'\n"
        "print(json.dumps(result))\n")
    res = run_command([sys.executable, str(attack)], attack.parent,
                      {"PATH": os.environ["PATH"]}, 60, tmp_path / "a.log")
    assert warm_started(tmp_path / "a.log") and res.exit_code == 0
    line = [ln for ln in (tmp_path / "a.log").read_text().splitlines() if ln.startswith("{")]
    result = json.loads(line[0])
    assert result["kill"] == "PermissionError"
    assert result["mem"] == result["environ"] == "PermissionError"
    # Beyond stdio it holds only the file its stacks would go to (grading.stacks); the
    # listing's own descriptor is closed by the time it is read.
    beyond = [target for fd, target in result["fds"].items() if fd not in ("0", "1", "2")]
    assert beyond == [result["stacks"]], result
    # The server lives on and serves the next run.
    res = run_command([sys.executable, str(attack)], attack.parent,
                      {"PATH": os.environ["PATH"]}, 60, tmp_path / "b.log")
    assert warm_started(tmp_path / "b.log") and res.exit_code == 0, (tmp_path / "b.log").read_text()
    # At the judge's exit the server sees the socket close and ends on its own (it was once
    # left waiting, then killed after a timeout, at the end of every grade).
    servers = list(warm_start._servers.values())
    warm_start._close_servers()
    assert servers and [s.proc.returncode for s in servers] == [0] * len(servers)


def test_two_warm_ranks_train_together(tmp_path: Path, warm: None) -> None:
    job_script = Path(__file__).parents[1] / "fixtures" / "dist" / "allreduce_job.py"
    out = sealed.job_dir("launch-warm")
    result = launch.launch([sys.executable, str(job_script), "ok", str(out)], nproc=2, cwd=out,
                           env={"PATH": os.environ["PATH"], "GLOO_SOCKET_IFNAME": "lo"},
                           timeout_s=60, log_dir=tmp_path / "logs", grace_s=3,
                           expected_outputs=lambda r: [out / f"rank{r}.txt"])
    logs = "\n".join(Path(r.log).read_text()[-1500:] for r in result.ranks)
    servers = "\n".join(s.log.read_text()[-1500:] for s in warm_start._servers.values())
    assert result.outcome == "ok", f"{result.detail}\n{logs}\nservers:\n{servers}"
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


def test_what_a_server_cannot_serve_starts_fresh_at_once(
        tmp_path: Path, warm: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that fails to start, a request too large to send, and a candidate module that
    would shadow a preloaded one: each run starts fresh, without waiting for the server."""
    monkeypatch.setattr(warm_start, "READY_TIMEOUT_S", 300.0)
    hello = script("hello.py", "import os\nprint('hello', len(os.environ))\n")
    # An environment under which the server's `import torch` fails (hello.py imports nothing).
    broken = base_env(TORCH_LOGS="not_a_log_component")
    for n in range(2):
        started = time.monotonic()
        res = run_command([sys.executable, str(hello)], hello.parent, broken, 60,
                          tmp_path / f"broken{n}.log")
        assert res.exit_code == 0 and not warm_started(tmp_path / f"broken{n}.log")
        assert time.monotonic() - started < 120  # not READY_TIMEOUT_S
    assert all(server.dead for server in warm_start._servers.values())

    big = base_env(**{f"BIG_{i}": "x" * 60_000 for i in range(4)})
    res = run_command([sys.executable, str(hello)], hello.parent, big, 60, tmp_path / "big.log")
    assert res.exit_code == 0 and not warm_started(tmp_path / "big.log")

    shadow = script("sh.py", "import typing_extensions\n")
    (shadow.parent / "typing_extensions.py").write_text("print('the candidate module')\n")
    sealed.make_readable_tree(shadow.parent)
    res = run_command([sys.executable, str(shadow)], shadow.parent, base_env(), 60,
                      tmp_path / "sh.log")
    assert res.exit_code == 0 and not warm_started(tmp_path / "sh.log")
    assert "the candidate module" in (tmp_path / "sh.log").read_text()


def test_concurrent_warm_starts_keep_their_own_exit(tmp_path: Path, warm: None) -> None:
    exits = script("exit.py", "import sys, time\ntime.sleep(0.2)\nsys.exit(int(sys.argv[1]))\n")
    results: dict[int, tuple[int | None, bool]] = {}

    def one(code: int) -> None:
        log = tmp_path / f"c{code}.log"
        res = run_command([sys.executable, str(exits), str(code)], exits.parent, base_env(), 120,
                          log, reap_candidate=False)
        results[code] = (res.exit_code, warm_started(log))

    threads = [threading.Thread(target=one, args=(code,)) for code in range(10, 16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sealed.end_job()
    assert results == {code: (code, True) for code in range(10, 16)}


def test_relative_python_paths_and_a_folder_script_as_the_interpreter_has_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here = script("incwd.py", "VALUE = 'from the working folder'\n").parent
    (here / "rel").mkdir()
    (here / "rel" / "inrel.py").write_text("VALUE = 'from rel'\n")
    (here / "app").mkdir()
    (here / "app" / "__main__.py").write_text("print('the folder ran')\n")
    sealed.make_readable_tree(here)
    main = script("main.py", "import sys, incwd, inrel\nprint(sys.path[1:3], incwd.VALUE, "
                  "inrel.VALUE)\n")
    env = base_env(PYTHONPATH=f"rel{os.pathsep}")
    seen: dict[str, list[Any]] = {"cold": [], "warm": []}
    for mode in ("cold", "warm"):
        if mode == "warm":
            monkeypatch.setenv(warm_start.WARM_START_VAR, "1")
        try:
            for n, argv in enumerate([[sys.executable, str(main)],
                                      [sys.executable, str(here / "app")]]):
                log = tmp_path / f"{mode}{n}.log"
                res = run_command(argv, here, env, 60, log)
                seen[mode].append((res.exit_code, warm_started(log), [
                    ln for ln in log.read_text().splitlines() if not ln.startswith("[grading]")]))
        finally:
            warm_start._close_servers()
    assert [(code, lines) for code, _, lines in seen["warm"]] == [
        (code, lines) for code, _, lines in seen["cold"]], json.dumps(seen, indent=1)
    assert seen["warm"][0][0] == 0 and seen["warm"][0][1]  # the script started warm
    assert seen["warm"][1][2][0] == "the folder ran" and not seen["warm"][1][1]  # fresh


def test_a_worker_daemon_serves_the_next_grade_without_importing_again(
        tmp_path: Path, warm: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """With worker daemons (grading.mutants --warm-daemon-dir), a judge's server is a session of
    the worker's daemon: a later judge (here, after the first closed its servers, as at its
    exit) is served by the same daemon, and its process observes what a fresh one does."""
    folder = Path(tempfile.mkdtemp(prefix="wd-", dir="/tmp"))  # short: a socket path's limit
    folder.chmod(0o700)
    monkeypatch.setenv(warm_start.DAEMONS_VAR, str(folder))
    path = script("facts.py", FACTS)
    try:
        first = facts_of(tmp_path, "first", path)
        (sock,) = folder.glob("server-*.sock")
        daemon = daemon_pids(sock)
        warm_start._close_servers()  # the first judge's exit
        second = facts_of(tmp_path, "second", path)
        assert daemon_pids(sock) == daemon and len(daemon) == 1
        assert warm_started(tmp_path / "first.log") and warm_started(tmp_path / "second.log")
        cold = facts_of_cold(tmp_path, path, monkeypatch)
        for facts in (first, second):
            differ = {k: (cold.get(k), facts.get(k)) for k in set(cold) | set(facts)
                      if cold.get(k) != facts.get(k) and k not in SERVERS_OWN + PER_PROCESS}
            assert differ == {}, json.dumps(differ, indent=1)
        assert first["rand"] != second["rand"]
    finally:
        warm_start._close_servers()
        for pid in processes_with(str(folder)):
            os.kill(pid, signal.SIGKILL)


def facts_of_cold(tmp_path: Path, path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.delenv(warm_start.WARM_START_VAR)
    try:
        return facts_of(tmp_path, "cold", path)
    finally:
        monkeypatch.setenv(warm_start.WARM_START_VAR, "1")
