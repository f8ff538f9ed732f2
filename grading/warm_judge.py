"""Warm judges: a mutant's judge forked from a daemon that imported pytest and torch once.

Why: every grade of a mutant runs the hidden checks in a new judge process (``python -m
pytest``), and before its first check runs, that process spends 3-5 s importing pytest, torch
and what the checks' conftest imports; a mutant killed by its first, short check took 9-12 s
in all. Mutation analysis
grades each mutant in its own ``grading.mutants`` process (``harness.mutant_pool``), so the
judge's imports cannot be kept in that process.

How: ``grading.mutants`` (mutant grades only, never the reference's or a session's) points this
module at the worker's root-only folder (``--warm-memory-dir``, kept between the worker's
mutants). A judge command ``python -m pytest ...`` then connects to the daemon listening in that
folder (``judge-<key>.sock``, ``key`` the digest of the judge's environment without its per-run
variables), starting it if none answers: a root process that imports :data:`PRELOAD`, listens,
and forks a *session* for each connection. The session is a warm server exactly as the
candidate's (``grading.warm_start._serve``): each request forks a child that becomes the
requested process (new session, stdio on the run's log, every other descriptor closed, the
environment, folder, ``sys.path``, ``__main__`` and random state of a fresh interpreter), only
here the uid, groups and umask stay the judge's own. The daemon outlives each
``grading.mutants`` process and ends with its container, or after :data:`IDLE_EXIT_S` unused.

The seal: the folder is root's and 0700, so the candidate uid cannot connect; the daemon holds
no candidate code or data and no descriptor of any grade; a session ends, killing whatever it
forked, when its connection closes. A session that dies under a running judge would look like a
crashed check (a kill): :func:`failure` reports it, and ``grading.mutants`` stops with a grader
error instead of recording a verdict.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import select
import socket
import subprocess
import sys
import time
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
# A daemon nobody connected to for this long exits (a worker grades a mutant every few seconds).
IDLE_EXIT_S = 1800.0
# The kernel's limit on a Unix socket's path (sun_path), terminator included.
_MAX_SOCKET_PATH = 107

_folder: Path | None = None
_sessions: dict[str, warm_start._Server] = {}
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
    identity = warm_start._identity_env(env)
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


def _session(folder: Path, identity: dict[str, str]) -> warm_start._Server | None:
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    server = _sessions.get(key)
    if server is not None:
        return None if server.dead else server
    if len(_sessions) >= MAX_SESSIONS:
        return None
    path = folder / f"judge-{key}.sock"
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
        return None
    sock = _connect_or_spawn(path, identity)
    if sock is None:
        return None
    server = _sessions[key] = warm_start._Server(identity, connected=sock,
                                                  log=path.with_suffix(".log"))
    return server


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def _connect_or_spawn(path: Path, identity: dict[str, str]) -> socket.socket | None:
    """A connection to the daemon at ``path``, started first if none answers (one process
    at a time: the lock keeps two grades from starting two daemons)."""
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = _connect(path)
        if sock is not None:
            return sock
        # Its temp folder is inside this root-only one, not the container's shared /tmp.
        tmp = path.parent / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        with open(path.with_suffix(".log"), "ab") as log:
            # Its own session, and no descriptor of this process's: it outlives this process
            # (the next mutant's grade connects to it) and is no part of any run's group.
            daemon = subprocess.Popen(
                [sys.executable, "-m", "grading.warm_judge", str(path), *PRELOAD], cwd="/",
                env=dict(warm_start.server_env(identity), TMPDIR=str(tmp)),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                close_fds=True)
        deadline = time.monotonic() + warm_start.READY_TIMEOUT_S
        while time.monotonic() < deadline and daemon.poll() is None:
            sock = _connect(path)
            if sock is not None:
                return sock
            time.sleep(0.05)
        with contextlib.suppress(OSError):
            daemon.kill()
        daemon.wait()
        return None


@atexit.register
def _close_sessions() -> None:
    for server in _sessions.values():
        server.close()
    _sessions.clear()


# ---------------------------------------------------------------------------------------------
# The daemon


def _daemon(path: str, preload: Sequence[str]) -> None:
    for name in preload:
        # Only a head start: a module this torch lacks is imported (or not) by the judge.
        with contextlib.suppress(ImportError):
            __import__(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # Bound under a name of its own, then moved into place: a client connects only once it
    # listens, and a stale socket of a dead daemon is replaced in one step.
    staging = f"{path}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(staging)
    listener.bind(staging)
    listener.listen(8)
    ours = os.stat(staging).st_ino
    os.replace(staging, path)
    sessions: set[int] = set()
    last_used = time.monotonic()
    while True:
        ready, _, _ = select.select([listener], [], [], 1.0)
        if ready:  # before any exit: a client that connected is served
            conn, _ = listener.accept()
            pid = os.fork()
            if pid == 0:
                listener.close()
                # Serves this connection until it closes; a judge forked from here leaves by
                # SystemExit, which must reach the interpreter's top (its exit code): no
                # handler between here and there.
                warm_start._serve(conn.detach(), ())
                raise SystemExit(0)
            conn.close()
            sessions.add(pid)
        for pid in list(sessions):
            if os.waitpid(pid, os.WNOHANG)[0]:
                sessions.discard(pid)
        if sessions or ready:
            last_used = time.monotonic()
        try:
            replaced = os.stat(path).st_ino != ours
        except FileNotFoundError:
            replaced = True
        if replaced:
            return  # another daemon took the path: its clients are its own
        if not sessions and time.monotonic() - last_used > IDLE_EXIT_S:
            os.unlink(path)
            return


if __name__ == "__main__":
    _daemon(sys.argv[1], sys.argv[2:])
