"""Warm starts: candidate Python processes forked from an interpreter that imported torch once.

Why: a mutant's grade starts forty-odd short candidate processes (training runs of 20 steps,
probes), and each spends most of its life importing torch and ``torch.distributed``
(2-2.5 s of a 3-4 s run on the 2-core reference machine). Mutation analysis grades hundreds
of trusted mutants of the reference, so ``grading.mutants`` switches this on for mutant grades
only (``GradeOptions.warm_start``); a session's grade and the reference's (whose coverage hook
must see each process start) always start fresh interpreters.

How: the judge uses a *warm server*: a root process with no candidate code in it that imported
torch and the distributed modules and then only forks. In mutation analysis it is a session of
the worker's daemon (:func:`connect_daemon`: imported once for all the worker's grades);
otherwise the judge starts one of its own (``python -m grading.warm_server FD``). For each
candidate command whose argv is ``python [-u] script ...`` or ``python [-u] -m module ...``
on this interpreter, the judge sends the request (argv, folder, environment, the write end of
the log pipe); the server forks, and the child does what
``subprocess.Popen(user=..., start_new_session=True, close_fds=True)`` and a fresh interpreter
would do: new session, stdin ``/dev/null``, stdout/stderr to the log, every other descriptor
closed, the candidate uid (groups dropped, ``umask``), the environment replaced, ``sys.path``,
``sys.argv`` and the standard streams rebuilt as the interpreter builds them, Python-level
random generators reseeded, then the script or module runs as ``__main__``. The seal is the
same as for a fresh process: the child holds the candidate uid and no capability, the server is
another uid it cannot signal or trace, and the socket to the server is closed before the
candidate's code runs. The server reports each child's exit and reaps it only when the judge
releases it, so (as with ``Popen``) its PID and process group stay reserved until the judge has
killed the group.

What stays different from a fresh interpreter, and why it cannot change a grade of the
reference's mutants: the process's initial environment block (``/proc/self/environ``) is the
server's, i.e. the same environment without the per-run variables (rank, rendezvous, home,
marker); ``sys.flags`` are the server's. Everything an import reads (every variable outside
:data:`PER_RUN_VARS`) is part of the server's identity: a request whose environment differs
there gets its own server (at most :data:`MAX_SERVERS`), or a fresh process beyond that.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from grading import jobcgroup, sealed, stacks

WARM_START_VAR = "GRADING_WARM_START"

# The judge's: the worker's folder (only root reaches it) where per-worker daemons listen
# (see :func:`connect_daemon`); unset, each judge starts servers of its own.
DAEMONS_VAR = "GRADING_WARM_DAEMONS"

# Read when a process starts a run, not when it imports: a server serves every value.
PER_RUN_VARS = frozenset({
    "GRADING_RUN_ID", "HOME", "TMPDIR", "PYTHONPATH", "RANK", "LOCAL_RANK", "WORLD_SIZE",
    "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "ROLE_RANK",
    "GLOO_SOCKET_IFNAME", WARM_START_VAR, DAEMONS_VAR, stacks.STACKS_DIR_VAR,
})

# The coverage hook (grading.trace) acts at interpreter start: such a process is never warm.
COLD_ONLY_PREFIXES = ("GRADING_TRACE_",)

# What every candidate process of a grade imports (measured: 2-2.5 s of each short run).
PRELOAD = ("torch", "torch.distributed", "torch.distributed.checkpoint",
           "torch.distributed.fsdp", "torch.nn.parallel", "torch.optim")

MAX_SERVERS = 3

# A daemon nobody connected to for this long exits (a worker grades a mutant every few seconds).
IDLE_EXIT_S = 1800.0

# The kernel's limit on a Unix socket's path (sun_path), terminator included.
_MAX_SOCKET_PATH = 107

# Imports take 3-10 s on a loaded 2-core host; well below a hidden check's own limit (>= 60 s),
# so a server that never comes up costs a check time, never its verdict.
READY_TIMEOUT_S = 45.0

MAX_MESSAGE = 1 << 20

# Below the kernel's limit for one datagram on a local socket (net.core.wmem_default, ~208 KiB).
MAX_REQUEST = 128 * 1024

POLL_S = 0.01


@dataclass(frozen=True)
class Entry:
    """What ``python [-u] (script | -m module) args...`` runs."""

    kind: str  # "script" or "module"
    target: str
    args: tuple[str, ...]
    unbuffered: bool


def entry_of(argv: Sequence[str]) -> Entry | None:
    """The entry point of ``argv`` when a warm server can run it, else None (start it fresh)."""
    # This interpreter exactly (a venv's python and the base python it links to differ in
    # what they can import, though they resolve to one file).
    if not argv or os.path.abspath(argv[0]) != os.path.abspath(sys.executable):
        return None
    rest = list(argv[1:])
    unbuffered = False
    if rest and rest[0] == "-u":
        unbuffered, rest = True, rest[1:]
    if len(rest) >= 2 and rest[0] == "-m" and not rest[1].startswith("-"):
        return Entry("module", rest[1], tuple(rest[2:]), unbuffered)
    if rest and not rest[0].startswith("-"):
        return Entry("script", rest[0], tuple(rest[1:]), unbuffered)
    return None


def enabled() -> bool:
    """Set in the judge's pytest by a mutant grade: "1", or the file that gets its tally."""
    return bool(os.environ.get(WARM_START_VAR))


# Candidate processes this judge process started warm and fresh (written at its exit to the
# file WARM_START_VAR names, as evidence of what a grade ran).
_tally = {"warm": 0, "fresh": 0}


def count(child: WarmProcess | None) -> None:
    _tally["warm" if child is not None else "fresh"] += 1


class Tally(NamedTuple):
    warm: int = 0
    fresh: int = 0


def read_tally(path: Path) -> Tally:
    """The counts summed over the judge processes that wrote to ``path``."""
    total = Tally()
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return total
    for line in lines:
        with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError):
            counts = json.loads(line)
            total = Tally(total.warm + int(counts["warm"]), total.fresh + int(counts["fresh"]))
    return total


def identity_env(env: Mapping[str, str]) -> dict[str, str] | None:
    """The part of ``env`` a server is started with (None: this environment must start cold)."""
    if any(k.startswith(COLD_ONLY_PREFIXES) for k in env):
        return None
    return {k: v for k, v in env.items() if k not in PER_RUN_VARS}


class WarmProcess:
    """A child of a warm server, driven like a ``Popen`` whose exit is reported by the server."""

    def __init__(self, server: Server, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None
        self._exited = threading.Event()
        self._released = False

    def _set_exit(self, returncode: int) -> None:
        self.returncode = returncode
        self._exited.set()

    def exited(self) -> bool:
        """True once the child has exited (it stays unreaped until :meth:`wait`)."""
        return self._exited.is_set()

    def wait(self) -> int:
        self._exited.wait()
        if not self._released:
            self._released = True
            self.server.release(self.pid)
        assert self.returncode is not None
        return self.returncode


def server_env(identity: Mapping[str, str]) -> dict[str, str]:
    """The environment a server starts with: ``identity``, and a HOME with no user site (as a
    candidate process's fresh, empty folder has none)."""
    return dict(identity, HOME="/nonexistent", TMPDIR=tempfile.gettempdir())


class Server:
    """The judge's end of one server: its own process (``connected`` None), or a session a
    worker's daemon forked for this connection (:func:`connect_daemon`)."""

    def __init__(self, identity: dict[str, str], *, connected: socket.socket | None = None,
                 log: Path | None = None) -> None:
        self.identity = identity
        self.lock = threading.Lock()
        self.children: dict[int, WarmProcess] = {}
        self.replies: dict[int, WarmProcess | None] = {}
        self.reply_ready = threading.Condition(self.lock)
        self.ready = threading.Event()
        self.dead = False
        self.closing = False
        self.lost_children = False
        # Requests sent and not answered yet: each may have forked a child the judge never
        # heard of.
        self.outstanding: set[int] = set()
        self.next_id = 0
        self.proc: subprocess.Popen[bytes] | None = None
        if connected is not None:
            self.sock = connected
            self.log = log or Path("/dev/null")
        else:
            self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            # The judge's own temp folder (closed to the candidate); the server's log goes there.
            self.log = Path(tempfile.mkdtemp(prefix="warm-server-")) / "server.log"
            with open(self.log, "wb") as fh:
                # Its own session: a signal to the judge's group does not reach it; it exits
                # when the judge's end of the socket closes.
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "grading.warm_server", str(theirs.fileno())],
                    cwd="/", env=server_env(identity), stdin=subprocess.DEVNULL, stdout=fh,
                    stderr=fh, pass_fds=[theirs.fileno()], start_new_session=True)
            theirs.close()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                data = self.sock.recv(MAX_MESSAGE)
                if not data:
                    break
                msg = json.loads(data)
                with self.reply_ready:
                    if msg.get("ready"):
                        self.ready.set()
                    elif "exited" in msg:
                        child = self.children.get(int(msg["exited"]))
                        if child is not None:
                            child._set_exit(int(msg["returncode"]))
                    elif "id" in msg:
                        self.outstanding.discard(int(msg["id"]))
                        # Registered here, before the next message (its exit) is read.
                        if "pid" in msg:
                            child = WarmProcess(self, int(msg["pid"]))
                            self.children[child.pid] = child
                            self.replies[int(msg["id"])] = child
                        else:
                            self.replies[int(msg["id"])] = None
                        self.reply_ready.notify_all()
        except Exception:  # whatever ends the reader, the waiters must learn of it
            pass
        self._died()

    def _died(self) -> None:
        """The server is gone: its unreported children were reparented; kill their sessions.
        Starts after this go fresh; a death the judge did not cause is a grader defect."""
        with self.reply_ready:
            self.dead = True
            self.reply_ready.notify_all()
            pending = [c for c in self.children.values() if not c.exited()]
            # A child still running when its server went, or perhaps forked and never
            # reported: its result is void.
            self.lost_children = self.lost_children or bool(pending) or bool(self.outstanding)
        self.ready.set()  # wakes a start() waiting for a server that never came up
        if not self.closing:
            sealed.flag_grader_defect(f"the warm-start server died; see {self.log}")
        for child in pending:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
            child._released = True  # nobody is left to reap it but init
            child._set_exit(-signal.SIGKILL)

    def start(self, entry: Entry, cwd: Path, env: Mapping[str, str], log_fd: int,
              identity: Mapping[str, Any]) -> WarmProcess | None:
        if not self.ready.wait(READY_TIMEOUT_S):
            # Alive but never ready: stop it (the reader thread then marks it dead).
            sealed.flag_grader_defect(
                f"the warm-start server was not ready after {READY_TIMEOUT_S:g} s; see {self.log}")
            self._stop()
            return None
        if self.dead:
            return None
        request = {
            "kind": entry.kind, "target": entry.target, "args": list(entry.args),
            "unbuffered": entry.unbuffered, "cwd": str(cwd), "env": dict(env),
            "uid": identity["user"], "gid": identity["group"], "umask": identity["umask"],
            "groups": list(identity.get("extra_groups", [])),
            "cgroup_procs": None if (cgroup := sealed.job_cgroup()) is None
            else jobcgroup.procs_file(cgroup),
        }
        with self.reply_ready:
            self.next_id += 1
            request["id"] = rid = self.next_id
            data = json.dumps(request).encode()
            if len(data) > MAX_REQUEST:
                return None  # a huge environment: started fresh
            self.outstanding.add(rid)
            try:
                socket.send_fds(self.sock, [data], [log_fd])
            except OSError:
                self.outstanding.discard(rid)
                return None  # the server is going; the reader thread marks it dead
            while rid not in self.replies and not self.dead:
                self.reply_ready.wait(1.0)
            return self.replies.pop(rid, None)

    def release(self, pid: int) -> None:
        with self.lock:
            self.children.pop(pid, None)
            if self.dead:
                return
            with contextlib.suppress(OSError):
                self.sock.send(json.dumps({"op": "release", "pid": pid}).encode())

    def close(self) -> None:
        self.closing = True
        # shutdown, not only close: the reader thread is blocked in recv() on this socket,
        # which keeps it open (and the server waiting for its EOF) until the recv returns.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def _stop(self) -> None:
        """End it now (the reader thread then marks it dead): its process, or the session, by
        closing this end (the daemon's session then kills what it forked)."""
        if self.proc is not None:
            self.proc.kill()
        else:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)


_servers: dict[str, Server] = {}

_servers_lock = threading.Lock()


def _server_for(env: Mapping[str, str]) -> Server | None:
    identity = identity_env(env)
    if identity is None:
        return None
    key = json.dumps(identity, sort_keys=True)
    with _servers_lock:
        server = _servers.get(key)
        if server is None:
            if len(_servers) >= MAX_SERVERS:
                return None
            server = _servers[key] = _new_server(identity)
        return server


def _new_server(identity: dict[str, str]) -> Server:
    """A session of the worker's daemon for ``identity`` when there are worker daemons (its
    imports were done once, by an earlier grade), else a server process of this judge's own."""
    folder = os.environ.get(DAEMONS_VAR, "")
    if os.path.isabs(folder):
        connected = connect_daemon(Path(folder), "server", identity, PRELOAD)
        if connected is not None:
            sock, log = connected
            return Server(identity, connected=sock, log=log)
    return Server(identity)


def start(argv: Sequence[str], cwd: Path, env: Mapping[str, str], log_fd: int,
          identity: Mapping[str, Any]) -> WarmProcess | None:
    """Start ``argv`` as a warm child, or None when it must start fresh (not a plain Python
    command, an environment no server has room for, or no server answered)."""
    entry = entry_of(argv)
    if entry is None:
        return None
    server = _server_for(env)
    return None if server is None else server.start(entry, cwd, env, log_fd, identity)


@atexit.register
def _close_servers() -> None:
    with _servers_lock:
        for server in _servers.values():
            server.close()
        _servers.clear()
    target = os.environ.get(WARM_START_VAR, "")
    if os.path.isabs(target) and any(_tally.values()):
        with contextlib.suppress(OSError), open(target, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(_tally) + "\n")


def connect_daemon(folder: Path, kind: str, identity: dict[str, str],
                   preload: Sequence[str]) -> tuple[socket.socket, Path] | None:
    """A connection to the worker's daemon of this ``kind`` and ``identity`` in ``folder``
    (and its log), started first if none answers; None when it cannot be reached.

    Why: a server of the judge's own imports torch again in every grade (3 s of CPU, as much
    as a short kill's own work, on two cores that two workers share). Mutation analysis grades
    each mutant in its own ``grading.mutants`` process, several in a row in one container:
    the daemon outlives them. It imports ``preload`` once with ``identity`` as its environment
    (so its key: ``<kind>-<digest>.sock``), listens in ``folder`` (root's, 0700: the candidate
    uid cannot connect), and forks a *session* per connection that is a server exactly like a
    judge's own (:func:`serve`); closing the connection ends the session and what it forked.
    It exits after :data:`IDLE_EXIT_S` unused, or with its container.
    """
    path = daemon_path(folder, kind, identity, preload)
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
        return None
    log = path.with_suffix(".log")
    # One client at a time starts a daemon (two grades must not start two).
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = _connect(path)
        if sock is not None:
            return sock, log
        # Its temp folder is inside the root-only one, not the container's shared /tmp.
        tmp = folder / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        with open(log, "ab") as fh:
            # Its own session, and no descriptor of this process's: it outlives this process
            # (the next mutant's grade connects to it) and is no part of any run's group.
            daemon = subprocess.Popen(
                [sys.executable, "-m", "grading.warm_server", "--daemon", str(path), *preload],
                cwd="/", env=dict(server_env(identity), TMPDIR=str(tmp)),
                stdin=subprocess.DEVNULL, stdout=fh, stderr=fh, start_new_session=True,
                close_fds=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and daemon.poll() is None:
            sock = _connect(path)
            if sock is not None:
                return sock, log
            time.sleep(0.05)
        with contextlib.suppress(OSError):
            daemon.kill()
        daemon.wait()
        return None


def daemon_path(folder: Path, kind: str, identity: Mapping[str, str],
                preload: Sequence[str]) -> Path:
    """Where the daemon for these listens: one per kind, environment and preload list."""
    digest = hashlib.sha256(json.dumps([kind, dict(identity), list(preload)],
                                       sort_keys=True).encode()).hexdigest()[:16]
    return folder / f"{kind}-{digest}.sock"


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock
