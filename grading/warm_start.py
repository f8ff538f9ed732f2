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
otherwise the judge starts one of its own (``python -m grading.warm_start FD``). For each
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
import gc
import hashlib
import json
import os
import select
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

from grading import sealed

WARM_START_VAR = "GRADING_WARM_START"
# The judge's: the worker's folder (only root reaches it) where per-worker daemons listen
# (see :func:`connect_daemon`); unset, each judge starts servers of its own.
DAEMONS_VAR = "GRADING_WARM_DAEMONS"
# Read when a process starts a run, not when it imports: a server serves every value.
PER_RUN_VARS = frozenset({
    "GRADING_RUN_ID", "HOME", "TMPDIR", "PYTHONPATH", "RANK", "LOCAL_RANK", "WORLD_SIZE",
    "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "ROLE_RANK",
    "GLOO_SOCKET_IFNAME", WARM_START_VAR, DAEMONS_VAR,
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
_MAX_MESSAGE = 1 << 20
# Below the kernel's limit for one datagram on a local socket (net.core.wmem_default, ~208 KiB).
_MAX_REQUEST = 128 * 1024
_POLL_S = 0.01


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


def _identity_env(env: Mapping[str, str]) -> dict[str, str] | None:
    """The part of ``env`` a server is started with (None: this environment must start cold)."""
    if any(k.startswith(COLD_ONLY_PREFIXES) for k in env):
        return None
    return {k: v for k, v in env.items() if k not in PER_RUN_VARS}


# ---------------------------------------------------------------------------------------------
# The judge's side


class WarmProcess:
    """A child of a warm server, driven like a ``Popen`` whose exit is reported by the server."""

    def __init__(self, server: _Server, pid: int) -> None:
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


class _Server:
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
                    [sys.executable, "-m", "grading.warm_start", str(theirs.fileno())],
                    cwd="/", env=server_env(identity), stdin=subprocess.DEVNULL, stdout=fh,
                    stderr=fh, pass_fds=[theirs.fileno()], start_new_session=True)
            theirs.close()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                data = self.sock.recv(_MAX_MESSAGE)
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
        }
        with self.reply_ready:
            self.next_id += 1
            request["id"] = rid = self.next_id
            data = json.dumps(request).encode()
            if len(data) > _MAX_REQUEST:
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


_servers: dict[str, _Server] = {}
_servers_lock = threading.Lock()


def _server_for(env: Mapping[str, str]) -> _Server | None:
    identity = _identity_env(env)
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


def _new_server(identity: dict[str, str]) -> _Server:
    """A session of the worker's daemon for ``identity`` when there are worker daemons (its
    imports were done once, by an earlier grade), else a server process of this judge's own."""
    folder = os.environ.get(DAEMONS_VAR, "")
    if os.path.isabs(folder):
        connected = connect_daemon(Path(folder), "server", identity, PRELOAD)
        if connected is not None:
            sock, log = connected
            return _Server(identity, connected=sock, log=log)
    return _Server(identity)


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


# ---------------------------------------------------------------------------------------------
# Worker daemons


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
    judge's own (:func:`_serve`); closing the connection ends the session and what it forked.
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
                [sys.executable, "-m", "grading.warm_start", "--daemon", str(path), *preload],
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


# ---------------------------------------------------------------------------------------------
# The server


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.send(json.dumps(msg).encode())


def _returncode(pid: int) -> int | None:
    """The exit of child ``pid`` as ``Popen.returncode`` words it, leaving it unreaped."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None:
        return None
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status


def _shadowed(msg: dict[str, Any]) -> list[str]:
    """Modules this server imported that the request's own path would import from elsewhere:
    a fresh interpreter would pick the candidate's file, a warm one has the server's."""
    loaded = {name for name in sys.modules if "." not in name}
    found = []
    for folder in [_first_path_entry(msg), *_pythonpath(msg["env"], msg["cwd"])]:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            stem = name.split(".", 1)[0]
            top = (name.endswith((".py", ".pyc", ".so"))
                   or os.path.isfile(os.path.join(folder, name, "__init__.py")))
            if top and stem in loaded:
                found.append(os.path.join(folder, name))
    return found


def _freeze_heap() -> None:
    """What the imports made, out of the cyclic collector's sight, as the ``gc`` module's
    documentation advises before forking without exec: no collection in a child walks those
    objects, so none copies their pages. Measured in the grader image (a child forked from a
    server holding torch, then exiting as the interpreter does): 1.3-1.7 s from fork to exit
    without it, 0.5-0.7 s with it, most of it Python's finalization. A child's own objects are
    collected as ever. What differs for the child: the cyclic collector never collects the
    server's objects (a cycle through one of them waits for the exit), and ``gc.get_objects``
    and ``gc.get_referrers`` do not list them; no hidden check or task uses ``gc``."""
    gc.collect()
    gc.freeze()


def _serve(fd: int, preload: Sequence[str] = PRELOAD) -> None:
    sock = socket.socket(fileno=fd)
    for name in preload:
        __import__(name)
    # Forking is safe only from a single-threaded process (and torch must not have started its
    # thread pools: nothing here runs an op).
    if threading.active_count() != 1:
        raise SystemExit(f"warm server: {threading.active_count()} threads after the imports")
    _freeze_heap()
    base_path = [p for p in sys.path[1:] if p not in _pythonpath(os.environ)]
    children: dict[int, bool] = {}  # pid -> its exit was reported
    server = os.getpid()
    try:
        _send(sock, {"ready": True})
        while True:
            ready, _, _ = select.select([sock], [], [], _POLL_S)
            if ready:
                data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 1)
                if not data:
                    break
                msg = json.loads(data)
                op = msg.get("op", "start")
                if op == "start":
                    pid = _fork(sock, msg, fds[0], base_path)
                    if pid is not None:
                        children[pid] = False
                elif op == "release" and int(msg["pid"]) in children:
                    os.waitpid(int(msg["pid"]), 0)
                    del children[int(msg["pid"])]
                for extra in fds[1 if op == "start" else 0:]:
                    os.close(extra)
            for pid, reported in children.items():
                if not reported and (code := _returncode(pid)) is not None:
                    _send(sock, {"exited": pid, "returncode": code})
                    children[pid] = True
    finally:
        # A child's exit unwinds through here too (it never returns, it raises SystemExit
        # out of _become): only the server itself may clean up. The judge is gone, or this
        # server failed: nothing it started may outlive it.
        if os.getpid() == server:
            for pid in children:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)


def _fork(sock: socket.socket, msg: dict[str, Any], log_fd: int,
          base_path: list[str]) -> int | None:
    """Fork the requested child and tell the judge its pid, or why it must start fresh."""
    why = None
    if msg["kind"] == "script" and _not_source(_script_path(msg)):
        why = "the script is a folder or a zip archive (the interpreter runs its __main__)"
    elif shadowed := _shadowed(msg):
        why = f"the request's path shadows a preloaded module ({shadowed[0]})"
    else:
        sys.stdout.flush()
        sys.stderr.flush()
        server = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:  # e.g. the pids limit
            why = f"fork failed: {exc}"
        else:
            if pid == 0:
                _become(msg, log_fd, sock, base_path, server)  # never returns
    os.close(log_fd)
    if why is not None:
        _send(sock, {"id": msg["id"], "error": why})
        return None
    _send(sock, {"id": msg["id"], "pid": pid})
    return pid


def _env_flag(env: Mapping[str, str], name: str) -> bool:
    """A PYTHON* switch as the interpreter reads it: a number is its level, other text is on."""
    value = env.get(name, "")
    try:
        return int(value) > 0 if value else False
    except ValueError:
        return True


def _not_source(path: str) -> bool:
    import zipfile

    if not os.path.exists(path):
        return False  # the child reports it as the interpreter does
    return not os.path.isfile(path) or zipfile.is_zipfile(path)


def _pythonpath(env: Mapping[str, str], cwd: str = "/") -> list[str]:
    """PYTHONPATH's entries as the interpreter puts them on sys.path: relative ones (an empty
    one is the working folder) made absolute against ``cwd``."""
    raw = env.get("PYTHONPATH", "")
    return [os.path.abspath(os.path.join(cwd, p)) for p in raw.split(os.pathsep)] if raw else []


def _script_path(msg: dict[str, Any]) -> str:
    # As CPython names a script run as __main__: joined to the working folder, not normalised.
    target: str = msg["target"]
    return target if os.path.isabs(target) else os.path.join(msg["cwd"], target)


def _first_path_entry(msg: dict[str, Any]) -> str:
    """sys.path[0] of the interpreter: the working folder for ``-m``, else the script's own
    folder (links resolved)."""
    if msg["kind"] == "module":
        return str(msg["cwd"])
    return os.path.dirname(os.path.realpath(_script_path(msg)))


def _set_dumpable() -> None:
    # Changing uid without exec leaves the process non-dumpable (its /proc files root's): exec
    # would have made it dumpable again, so do what exec does.
    import ctypes

    pr_set_dumpable = 4
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 1, 0, 0, 0)


def _die_with(server: int) -> None:
    """SIGKILL when the server goes. A child forked but not yet reported to the judge (the
    server died in between) is known to nobody: no judge would kill it, and a warm process
    carries no run marker in its initial environment for the sweep to find. Set after the
    credentials change (which clears it); the parent may already be gone."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != server:
        os._exit(127)


_kept_streams: list[Any] = []


def _stdio(unbuffered: bool) -> None:
    """The standard streams as the interpreter makes them (``create_stdio``)."""
    import io

    # The server's stream objects own fds 0-2; keep them alive so that collecting them never
    # closes the descriptors the child now writes to.
    _kept_streams.extend([sys.stdin, sys.stdout, sys.stderr])
    encoding, errors = sys.stdout.encoding, sys.stdout.errors or "strict"

    def stream(fd: int, name: str, mode: str, err: str, line: bool) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        raw.name = name  # as create_stdio names it
        size = os.fstat(fd).st_blksize or io.DEFAULT_BUFFER_SIZE
        buffer: Any
        if mode == "r":
            buffer = io.BufferedReader(raw, size)
        else:
            buffer = raw if unbuffered else io.BufferedWriter(raw, size)
        return io.TextIOWrapper(buffer, encoding=encoding, errors=err, line_buffering=line,
                                write_through=unbuffered)

    sys.stdin = stream(0, "<stdin>", "r", errors, False)
    sys.stdout = stream(1, "<stdout>", "w", errors, False)
    # stderr is line-buffered unless the streams are unbuffered altogether.
    sys.stderr = stream(2, "<stderr>", "w", "backslashreplace", not unbuffered)
    # The interpreter's own handles too (a fresh process has them equal to the streams).
    setattr(sys, "__stdin__", sys.stdin)  # noqa: B010 - they are Final to type checkers
    setattr(sys, "__stdout__", sys.stdout)  # noqa: B010
    setattr(sys, "__stderr__", sys.stderr)  # noqa: B010


def _fresh_state(cwd: str) -> None:
    """What each fresh interpreter draws anew: Python's, numpy's and torch's default random
    generators, multiprocessing's auth key and starting folder."""
    import random

    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].default_generator.seed()
    if "multiprocessing.process" in sys.modules:
        mp = sys.modules["multiprocessing.process"]
        mp.current_process().authkey = os.urandom(32)
        setattr(mp, "ORIGINAL_DIR", cwd)  # noqa: B010 - not in the stubs


def _main_module(msg: dict[str, Any]) -> Any:
    """A new ``__main__`` module, installed for good (as the interpreter's own is)."""
    import builtins
    import types

    main = types.ModuleType("__main__")
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    if msg["kind"] == "script":
        from importlib.machinery import SourceFileLoader

        path = _script_path(msg)
        main.__file__ = path
        main.__loader__ = SourceFileLoader("__main__", path)
        main.__package__ = None
        main.__spec__ = None
        main.__cached__ = None  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    if "__mp_main__" in sys.modules:  # multiprocessing's alias of the interpreter's __main__
        sys.modules["__mp_main__"] = main
    return main


def _print_uncaught(exc: BaseException) -> None:
    """``sys.excepthook`` on ``exc`` without this module's frames in front, as a fresh
    interpreter shows it (runpy's stay: ``python -m`` shows them too)."""
    ours = _print_uncaught.__code__.co_filename
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == ours:
        tb = tb.tb_next
    # The hook prints the exception's own traceback, whatever it is passed: trim that.
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)


def _become(msg: dict[str, Any], log_fd: int, sock: socket.socket,
            base_path: list[str], server: int) -> None:
    """In the forked child: become the candidate process ``msg`` asks for, run it, exit."""
    try:
        sock.close()
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        for name in os.listdir("/proc/self/fd"):
            if int(name) > 2:
                with contextlib.suppress(OSError):
                    os.close(int(name))
        os.chdir(msg["cwd"])
        os.setgroups(msg.get("groups", []))
        os.setresgid(msg["gid"], msg["gid"], msg["gid"])
        os.setresuid(msg["uid"], msg["uid"], msg["uid"])
        os.umask(msg["umask"])
        _set_dumpable()
        _die_with(server)
        env: dict[str, str] = msg["env"]
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # computed again from this TMPDIR
        # The server's flags come from the same variables (they are part of its identity).
        sys.dont_write_bytecode = bool(sys.flags.dont_write_bytecode)
        _stdio(msg["unbuffered"] or _env_flag(env, "PYTHONUNBUFFERED"))
        _fresh_state(msg["cwd"])
        sys.path[:] = [_first_path_entry(msg), *_pythonpath(env, msg["cwd"]), *base_path]
        main = _main_module(msg)
    except BaseException as exc:  # the child must never return into the server loop
        # Said in the run's log (fd 2, if it got that far): the run then reads as a crash.
        with contextlib.suppress(BaseException):
            os.write(2, f"[grading] warm start failed in the child: {exc!r}\n".encode())
        os._exit(127)
    try:
        if msg["kind"] == "module":
            import runpy

            sys.argv = ["-m", *msg["args"]]  # argv[0] becomes the module's file, as with -m
            runpy._run_module_as_main(msg["target"], True)  # type: ignore[attr-defined]
        else:
            path = _script_path(msg)
            try:
                with open(path, "rb") as fh:
                    source = fh.read()
            except OSError as exc:
                print(f"{sys.executable}: can't open file {path!r}: [Errno {exc.errno}] "
                      f"{exc.strerror}", file=sys.stderr)
                raise SystemExit(2) from None
            sys.argv = [msg["target"], *msg["args"]]
            # dont_inherit: this module's own __future__ imports must not reach the script.
            exec(compile(source, path, "exec", dont_inherit=True), main.__dict__)
    except SystemExit:
        raise
    except KeyboardInterrupt as exc:
        # As the interpreter ends on an uncaught KeyboardInterrupt: by SIGINT, after its report.
        _print_uncaught(exc)
        import atexit as exit_handlers

        exit_handlers._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        os._exit(130)
    except BaseException as exc:
        _print_uncaught(exc)
        raise SystemExit(1) from None
    raise SystemExit(0)


def _daemon(path: str, preload: Sequence[str]) -> None:
    """A worker daemon (:func:`connect_daemon`): import, listen, fork a session per client."""
    for name in preload:
        # Only a head start: a module this torch lacks is imported (or not) by the process.
        with contextlib.suppress(ImportError):
            __import__(name)
    # Its sessions fork from it, and their children from them (each session freezes again
    # what it added).
    _freeze_heap()
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
                # Serves this connection until it closes; a process forked from here leaves by
                # SystemExit, which must reach the interpreter's top (its exit code): no
                # handler between here and there.
                _serve(conn.detach(), ())
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
    if sys.argv[1] == "--daemon":
        _daemon(sys.argv[2], sys.argv[3:])
    else:
        _serve(int(sys.argv[1]))
