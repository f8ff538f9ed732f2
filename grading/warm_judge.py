"""Warm judges: a mutant's judge forked from a daemon that imported pytest and torch once.

Why: every grade of a mutant runs the hidden checks in a new judge process (pytest, as
``python -m grading.judge_main``), and before its first check runs, that process spends 3-5 s
importing pytest, torch and what the checks' conftest imports; a mutant killed by its first,
short check took 9-12 s in all. Mutation analysis grades each mutant in its own
``grading.mutants`` process (``harness.oracle.mutant_pool``), so the judge's imports cannot be kept
in that process.

How: ``grading.mutants`` (mutant grades only, never the reference's or a session's) points this
module at the worker's root-only folder (``--warm-daemon-dir``, kept between the worker's
mutants). A judge command (``python -m grading.judge_main``: pytest) then connects to the
worker's judge daemon there (``grading.warm_start.connect_daemon``: one per judge environment
without its per-run variables, started if none answers), which imported :data:`PRELOAD` once
and forks a *session* for each connection. The session is a warm server exactly as the candidate's
(``grading.warm_server.serve``): each request forks a child that becomes the requested process
(new session, stdio on the run's log, every other descriptor closed, the environment, folder,
``sys.path``, ``__main__`` and random state of a fresh interpreter), only here the uid, groups
and umask stay the judge's own. The daemon outlives each ``grading.mutants`` process and ends
with its container, or after ``IDLE_EXIT_S`` unused.

The seal: the folder is root's and 0700, so the candidate uid cannot connect; the daemon holds
no candidate code or data and no descriptor of any grade; a session ends, killing whatever it
forked, when its connection closes. A session that dies under a running judge would look like a
crashed check (a kill): :func:`failure` reports it, and ``grading.mutants`` stops with a grader
error instead of recording a verdict.
"""

from __future__ import annotations

import atexit
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from grading import warm_start

# What a judge imports before its first check (measured with -X importtime: pytest, torch,
# DCP, torch.func), and the grader's own modules the checks use. Not the judge plugin: pytest
# could not rewrite the asserts of a ``-p`` plugin imported before it starts (and would warn).
# Not torch._dynamo (nor the export serialiser, which imports it): its first import sets
# TORCHINDUCTOR_CACHE_DIR in the importing process's environment, which a fresh judge's checks
# must guard against (hidden checks' kept_environment) and a warm one would never see.
PRELOAD = (
    "pytest", "_pytest.junitxml", "_pytest.python", "torch", "torch.func", "torch.optim",
    "torch.distributed", "torch.distributed.checkpoint", "grading.launch", "grading.probe",
    "grading.compare",
)
MAX_SESSIONS = 2

_folder: Path | None = None
_sessions: dict[str, warm_start.Server] = {}
_started = 0


def configure(folder: Path | None) -> None:
    """Judge commands from now on start warm from the daemon in ``folder`` (None: fresh)."""
    global _folder
    _folder = folder


def started() -> int:
    """Judge processes this process has started warm so far."""
    return _started


def failure() -> str | None:
    """Why a session died while it was not being closed (its judge's result is void)."""
    for server in _sessions.values():
        if server.lost_children and not server.closing:
            return f"a warm judge's session died under it; see {server.log}"
    return None


def start(argv: Sequence[str], cwd: Path, env: Mapping[str, str],
          log_fd: int) -> warm_start.WarmProcess | None:
    """Start the judge command ``argv`` forked from the daemon, or None (start it fresh)."""
    global _started
    entry = warm_start.entry_of(argv)
    identity = warm_start.identity_env(env)
    if _folder is None or entry is None or identity is None:
        return None
    server = _session(_folder, identity)
    if server is None:
        return None
    child = server.start(entry, cwd, env, log_fd, {
        "user": os.getuid(), "group": os.getgid(), "extra_groups": os.getgroups(),
        "umask": _umask()})
    _started += child is not None
    return child


def _umask() -> int:
    # os.umask() can only be read by setting it, which would race the log pump's opens.
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def _session(folder: Path, identity: dict[str, str]) -> warm_start.Server | None:
    key = json.dumps(identity, sort_keys=True)
    server = _sessions.get(key)
    if server is not None:
        return None if server.dead else server
    if len(_sessions) >= MAX_SESSIONS:
        return None
    connected = warm_start.connect_daemon(folder, "judge", identity, PRELOAD)
    if connected is None:
        return None
    sock, log = connected
    server = _sessions[key] = warm_start.Server(identity, connected=sock, log=log)
    return server


@atexit.register
def _close_sessions() -> None:
    for server in _sessions.values():
        server.close()
    _sessions.clear()
