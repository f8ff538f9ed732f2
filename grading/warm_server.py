"""The warm server: a root process that imported torch once and then only forks; each child
becomes one candidate process (``grading.warm_start`` is the judge's side). Run as
``python -m grading.warm_server FD`` (one judge's server) or ``--daemon PATH PRELOAD...`` (a
mutation-analysis worker's)."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from grading import stacks
from grading.warm_start import IDLE_EXIT_S, MAX_MESSAGE, POLL_S, PRELOAD


def send_message(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.send(json.dumps(msg).encode())


def child_returncode(pid: int) -> int | None:
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


def freeze_heap() -> None:
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


def serve(fd: int, preload: Sequence[str] = PRELOAD) -> None:
    sock = socket.socket(fileno=fd)
    for name in preload:
        __import__(name)
    # Forking is safe only from a single-threaded process (and torch must not have started its
    # thread pools: nothing here runs an op).
    if threading.active_count() != 1:
        raise SystemExit(f"warm server: {threading.active_count()} threads after the imports")
    freeze_heap()
    base_path = [p for p in sys.path[1:] if p not in _pythonpath(os.environ)]
    children: dict[int, bool] = {}  # pid -> its exit was reported
    server = os.getpid()
    try:
        send_message(sock, {"ready": True})
        while True:
            ready, _, _ = select.select([sock], [], [], POLL_S)
            if ready:
                data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 1)
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
                if not reported and (code := child_returncode(pid)) is not None:
                    send_message(sock, {"exited": pid, "returncode": code})
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
        send_message(sock, {"id": msg["id"], "error": why})
        return None
    send_message(sock, {"id": msg["id"], "pid": pid})
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
        if msg.get("cgroup_procs"):  # into the job's own cgroup while still root
            with open(msg["cgroup_procs"], "w") as fh:
                fh.write(str(os.getpid()))
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
        stacks.install()  # what the interpreter's start does for a cold process (a .pth file)
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


def daemon(path: str, preload: Sequence[str]) -> None:
    """A worker daemon (:func:`connect_daemon`): import, listen, fork a session per client."""
    for name in preload:
        # Only a head start: a module this torch lacks is imported (or not) by the process.
        with contextlib.suppress(ImportError):
            __import__(name)
    # Its sessions fork from it, and their children from them (each session freezes again
    # what it added).
    freeze_heap()
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
                serve(conn.detach(), ())
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
        daemon(sys.argv[2], sys.argv[3:])
    else:
        serve(int(sys.argv[1]))
