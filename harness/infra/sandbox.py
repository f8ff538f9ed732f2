"""One hardened Docker container per session, through the docker SDK.

Lifecycle (plain and explicit, as in SWE-bench's harness): ``start`` creates a fresh named
volume for ``/workspace`` and a fresh container, ``put_archive``/``get_archive`` move files,
``exec`` runs commands under a host-held deadline, ``close`` removes container and volume on
every path out. Nothing from the host is bind-mounted, but for a coding-agent CLI's session
the one folder that holds the model gateway's unix socket (read-only; harness/agent/gateway/).

Why a volume for ``/workspace``: with a read-only root filesystem ``put_archive`` fails on
every path that is not a volume, tmpfs included, and ``get_archive`` cannot see a container's
tmpfs mounts (both measured on Docker 20.10). The volume is itself a size-limited tmpfs
(the local driver's ``type=tmpfs``): the daemon mounts it on the host, so both archive calls
see it (measured on Docker 20.10/overlay2), and filling it stops at its size instead of on
the host's disk. Two costs follow: what the agent writes there counts against the
container's memory limit, and the content is gone once the container stops, so the final
copy-out happens while it runs (``stop_processes`` first).

PID 1 (``harness-init``) runs as root keeping only CAP_KILL; every command runs as uid 1000
with no capability at all, so the agent can neither signal nor trace PID 1.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors
from docker.types import DeviceRequest
from pydantic import BaseModel, Field

from harness.errors import HarnessError
from harness.infra.job_cgroups import JobCgroups, kept_thawed
from harness.records.processes import ProcessInfo, StopReport

MANAGED_LABEL = "org.harness.managed"
OWNER_PID_LABEL = "org.harness.owner-pid"
OWNER_HOST_LABEL = "org.harness.owner-host"
RUNS_LABEL = "org.harness.runs"
WORKSPACE = "/workspace"
AGENT_USER = "1000:1000"
# PID 1 as root, out of the agent's reach; CAP_KILL lets it kill the agent's processes when
# no exec can start (SIGUSR1).
INIT_USER = "0:0"
INIT_CAPABILITIES = ("KILL",)
KILL_COMMAND = "/usr/local/bin/harness-kill"
# A workspace with less room than this (or no free inode) is full.
WORKSPACE_FULL_MARGIN_BYTES = 1024**2
SLURM_JOB_LABEL = "org.harness.slurm-job"

# Labels every container and volume this process creates carries besides its own: a matrix
# worker adds its study and run, and under Slurm its job id, so that the grader and
# diagnostics containers it starts are found by the same labels as the agent's (the Slurm
# Epilog removes a cancelled job's containers by the job label).
PROCESS_LABELS: dict[str, str] = {}


# What one read of a container's tar stream pulls (the docker SDK's default).
ARCHIVE_CHUNK_BYTES = 2 * 1024**2


class SandboxLimits(BaseModel):
    """Resource limits of one container; every agent and grader container has all of them."""

    memory_bytes: int = 6 * 1024**3
    cpus: float = 2.0
    pids: int = 512
    tmp_bytes: int = 2 * 1024**3
    shm_bytes: int = 256 * 1024**2
    # What one exec returns inline (head + tail); the whole output goes to an artifact file.
    shown_output_bytes: int = 64 * 1024
    # Past this, an exec's output is no longer written to its artifact (the cut is recorded).
    artifact_output_bytes: int = 256 * 1024**2
    # The /workspace tmpfs volume: bytes and files (RAM-backed, see the module docstring).
    workspace_bytes: int = 2 * 1024**3
    workspace_inodes: int = 1024**2


class ExecResult(BaseModel):
    """What one command did. ``output`` is capped; ``artifact`` holds everything printed."""

    call_id: str
    command: list[str]
    exit_code: int | None
    timed_out: bool = False
    duration_s: float
    output: str
    output_bytes: int
    output_truncated: bool
    artifact: Path | None = None
    artifact_truncated: bool = False
    # What the artifact holds: all of ``output_bytes``, or the first ``artifact_output_bytes``.
    artifact_bytes: int = 0
    kill: Literal["none", "marker", "init"] = "none"
    kill_note: str = ""


class SandboxLost(HarnessError):
    """The container stopped or vanished under the session; the harness did not do it."""


class WorkspaceUsage(BaseModel):
    bytes_total: int
    bytes_free: int
    inodes_free: int

    @property
    def full(self) -> bool:
        return self.bytes_free < WORKSPACE_FULL_MARGIN_BYTES or self.inodes_free == 0


class _OutputSink:
    """Keeps the head and tail of a stream in memory and the whole of it (to a cap) on disk."""

    def __init__(self, artifact: Path | None, head: int, tail: int, artifact_cap: int) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.head_cap, self.tail_cap, self.artifact_cap = head, tail, artifact_cap
        self.total = 0
        self.artifact_truncated = False
        self._file = artifact.open("wb") if artifact is not None else None

    def write(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self._file is not None:
            room = self.artifact_cap - self._file.tell()
            if len(chunk) > room:
                self.artifact_truncated = True
            if room > 0:
                self._file.write(chunk[:room])
                # Flushed as it comes, so a long command's log can be followed while it runs.
                self._file.flush()
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    def close(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()


def artifact_note(artifact: Path | str | None, total: int, kept: int) -> str:
    """Where an output is kept, true at the artifact cap too: "" without an artifact."""
    if artifact is None:
        return ""
    if kept >= total:
        return f"the whole output is in {artifact}"
    return (f"only the first {kept} bytes are in {artifact} (the artifact cap); "
            f"the last {total - kept} bytes were not kept")


def render_capped(head: bytes, tail: bytes, total: int, artifact: Path | None,
                  kept: int | None = None) -> str:
    """Head and tail of an output with an explicit marker where the middle was cut.

    ``kept``: the bytes the artifact holds (default: all of them).
    """
    if total <= len(head) + len(tail):
        return (head + tail).decode("utf-8", errors="replace")
    cut = total - len(head) - len(tail)
    note = artifact_note(artifact, total, total if kept is None else kept)
    marker = (
        f"\n[... harness: {cut} bytes cut here, {total} bytes in all, "
        f"first {len(head)} and last {len(tail)} shown{'; ' + note if note else ''} ...]\n"
    )
    return head.decode("utf-8", errors="replace") + marker + tail.decode("utf-8", errors="replace")


def host_id() -> str:
    """Identifies this host's boot, so a cleanup never judges another machine's pids."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return os.uname().nodename


def gpu_device_requests(gpu_ids: list[str]) -> list[DeviceRequest]:
    """Explicit device IDs only: never ``count=-1`` ("all"), so sessions never share a GPU."""
    if not gpu_ids:
        return []
    return [DeviceRequest(driver="nvidia", device_ids=list(gpu_ids), capabilities=[["gpu"]])]


class Sandbox:
    """A fresh, hardened container with its own ``/workspace`` volume."""

    def __init__(
        self,
        client: docker.DockerClient,
        image: str,
        *,
        labels: dict[str, str],
        limits: SandboxLimits | None = None,
        gpu_ids: list[str] | None = None,
        name_hint: str = "session",
        environment: dict[str, str] | None = None,
        user: str = INIT_USER,
        cap_add: tuple[str, ...] = INIT_CAPABILITIES,
        gateway_dir: tuple[Path, str] | None = None,
        sysctls: dict[str, str] | None = None,
        job_cgroups: bool = False,
    ) -> None:
        self.client = client
        # A grader container: a freezer cgroup folder of its own for the judge's candidate
        # jobs, when the host can give one (harness.infra.job_cgroups).
        self.want_job_cgroups = job_cgroups
        self.job_cgroups: JobCgroups | None = None
        # Settings of the container's own network namespace (the grader's, see
        # harness.oracle.grade.GRADER_SYSCTLS).
        self.sysctls = dict(sysctls or {})
        # (host folder, container path) of the model gateway's socket, bind-mounted read-only:
        # the container's one way out when a CLI agent runs in it (it has no network).
        self.gateway_dir = gateway_dir
        # The user PID 1 (and every exec that names no user) runs as, and the capabilities
        # it keeps; every other capability is dropped.
        self.user = user
        self.cap_add = tuple(cap_add)
        self.image = image
        self.limits = limits or SandboxLimits()
        self.gpu_ids = list(gpu_ids or [])
        self.environment = dict(environment or {})
        suffix = uuid.uuid4().hex[:8]
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name_hint)[:60]
        self.name = f"harness-{safe}-{suffix}"
        self.labels = {
            MANAGED_LABEL: "1",
            OWNER_PID_LABEL: str(os.getpid()),
            OWNER_HOST_LABEL: host_id(),
            **PROCESS_LABELS,
            **labels,
        }
        self.container: Any = None
        self.volume: Any = None
        self._started = False

    # --- lifecycle ---------------------------------------------------------------------

    def container_spec(self, volume_name: str) -> dict[str, Any]:
        """Keyword arguments of ``containers.create``; a pure function so tests can read it."""
        lim = self.limits
        cgroup_volumes, cgroup_env = (self.job_cgroups.container_settings()
                                      if self.job_cgroups is not None else ({}, {}))
        return {
            "image": self.image,
            "command": ["/usr/local/bin/harness-init"],
            "name": self.name,
            "hostname": "sandbox",
            "labels": self.labels,
            "user": self.user,
            "working_dir": WORKSPACE,
            "network_mode": "none",
            "cap_drop": ["ALL"],
            "cap_add": list(self.cap_add),
            "security_opt": ["no-new-privileges"],
            "read_only": True,
            "pids_limit": lim.pids,
            "mem_limit": lim.memory_bytes,
            "memswap_limit": lim.memory_bytes,  # no swap beyond the memory limit
            "nano_cpus": int(lim.cpus * 1e9),
            "shm_size": lim.shm_bytes,
            "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={lim.tmp_bytes},mode=1777"},
            "volumes": {volume_name: {"bind": WORKSPACE, "mode": "rw"},
                        **({str(self.gateway_dir[0]): {"bind": self.gateway_dir[1], "mode": "ro"}}
                           if self.gateway_dir else {}),
                        **cgroup_volumes},
            "device_requests": gpu_device_requests(self.gpu_ids),
            "environment": {**self.environment, **cgroup_env},
            **({"sysctls": self.sysctls} if self.sysctls else {}),
            "detach": True,
        }

    def volume_options(self) -> dict[str, str]:
        """The ``/workspace`` volume: a tmpfs bounded in bytes and files, owned by the agent."""
        lim = self.limits
        return {"type": "tmpfs", "device": "tmpfs",
                "o": f"size={lim.workspace_bytes},nr_inodes={lim.workspace_inodes},"
                     "uid=1000,gid=1000,mode=0755,nosuid,nodev"}

    def start(self) -> Sandbox:
        self._started = True
        try:
            if self.want_job_cgroups:
                self.job_cgroups = JobCgroups.make(self.name, self.client)
            self.volume = self.client.volumes.create(name=self.name, labels=self.labels,
                                                     driver="local",
                                                     driver_opts=self.volume_options())
            self.container = self.client.containers.create(**self.container_spec(self.volume.name))
            self.container.start()
        except docker.errors.ImageNotFound as exc:
            self.close()
            raise HarnessError(
                f"image {self.image} is missing", "build it with `harness images build`"
            ) from exc
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Remove the container and its volume; safe to call twice and on half-started ones."""
        if self._started and (self.container is None or self.volume is None):
            # A signal turned into an exception (harness.errors.Interrupted) can land inside
            # a create call after the daemon made the object but before the SDK returned it:
            # find both by their name, which only this sandbox uses.
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                self.container = self.container or self.client.containers.get(self.name)
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                self.volume = self.volume or self.client.volumes.get(self.name)
        self._started = False
        if self.container is not None:
            _remove_container(self.container)
            self.container = None
        if self.job_cgroups is not None:
            self.job_cgroups.remove()
            self.job_cgroups = None
        if self.volume is not None:
            with contextlib.suppress(docker.errors.NotFound):
                self.volume.remove(force=True)
            self.volume = None

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def container_id(self) -> str:
        return str(self.container.id) if self.container is not None else ""

    # --- files -------------------------------------------------------------------------

    def put_archive(self, path: str, data: bytes) -> None:
        if not self.container.put_archive(path, data):
            raise HarnessError(f"put_archive into {path} failed", "check the container is running")

    def get_archive(self, path: str) -> Iterator[bytes]:
        """The tar stream of ``path``. Closing the generator (or its end) closes the HTTP
        response at once: the daemon holds the container's lock while it streams, so a reader
        that stops early (a cap, an interrupt) must hang up, or the next pause, kill or removal
        of the container waits on that lock. The docker SDK's own generator never closes it."""
        api = self.client.api
        response = api._get(api._url("/containers/{0}/archive", self.container.id),
                            params={"path": path}, stream=True,
                            headers={"Accept-Encoding": "identity"})
        api._raise_for_status(response)

        def chunks() -> Iterator[bytes]:
            try:
                yield from response.iter_content(ARCHIVE_CHUNK_BYTES, False)
            finally:
                response.close()

        return chunks()

    def put_file(self, root: str, rel: str, content: bytes, mode: int = 0o644) -> None:
        """Write ``root/rel`` (root: a volume such as /workspace), creating parent folders;
        everything is owned by the agent (uid/gid 1000)."""
        buf = io.BytesIO()
        parts = rel.split("/")
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for depth in range(1, len(parts)):
                folder = tarfile.TarInfo("/".join(parts[:depth]))
                folder.type, folder.mode = tarfile.DIRTYPE, 0o755
                folder.uid = folder.gid = 1000
                tar.addfile(folder)
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(content), mode, int(time.time())
            info.uid = info.gid = 1000
            info.uname = info.gname = "agent"
            tar.addfile(info, io.BytesIO(content))
        self.put_archive(root, buf.getvalue())

    # --- commands ----------------------------------------------------------------------

    def exec(
        self,
        command: list[str] | str,
        *,
        timeout_s: float,
        artifact: Path | None = None,
        artifact_cap: int | None = None,
        env: dict[str, str] | None = None,
        workdir: str = WORKSPACE,
        user: str = AGENT_USER,
        on_output: Callable[[bytes], None] | None = None,
        call_id: str | None = None,
    ) -> ExecResult:
        """Run a command; past ``timeout_s`` every process it started is killed. ``artifact``
        keeps its whole output up to the smaller of ``artifact_cap`` and the limits' cap.

        The deadline is held here on the host. Each call's processes carry a marker in their
        environment; on timeout ``harness-kill`` kills every marked process (backgrounded and
        re-parented children included). When no exec can start at all (a fork bomb at the
        pids limit), PID 1 is signalled to kill everything but itself.
        """
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        # A caller that may have to stop the command before its deadline (kill_call) names it.
        call_id = call_id or uuid.uuid4().hex[:16]
        api = self.client.api
        environment = {**(env or {}), "HARNESS_CALL_ID": call_id}
        half = self.limits.shown_output_bytes // 2
        cap = self.limits.artifact_output_bytes
        sink = _OutputSink(artifact, half, half, cap if artifact_cap is None
                           else max(0, min(cap, artifact_cap)))
        started = time.monotonic()
        try:
            exec_id = api.exec_create(
                self.container.id, argv, user=user, workdir=workdir, environment=environment
            )["Id"]
            stream = api.exec_start(exec_id, stream=True)
        except docker.errors.APIError as exc:
            self.check_alive()
            raise HarnessError(
                f"cannot start a command in {self.name}: {exc.explanation or exc}",
                "the container may have died; see `docker logs` or rerun the session",
            ) from exc

        def pump() -> None:
            for chunk in stream:
                sink.write(chunk)
                if on_output is not None:  # a follower of the output as it comes
                    on_output(chunk)

        reader = threading.Thread(target=pump, name=f"exec-{call_id}", daemon=True)
        reader.start()
        reader.join(max(timeout_s, 0.0))
        timed_out = reader.is_alive()
        kill: Literal["none", "marker", "init"] = "none"
        note = ""
        if timed_out:
            kill, note = self.kill_call(call_id)
            reader.join(10)
            if reader.is_alive() and kill != "init":
                kill, note = "init", note + "; output stream stayed open, PID 1 killed the rest"
                self._signal_init()
                reader.join(10)
        sink.close()
        duration = time.monotonic() - started
        exit_code = None
        if not timed_out:
            try:
                exit_code = api.exec_inspect(exec_id).get("ExitCode")
            except docker.errors.APIError:
                self.check_alive()
                raise
        kept = min(sink.total, sink.artifact_cap) if artifact else 0
        return ExecResult(
            call_id=call_id,
            command=argv,
            exit_code=exit_code,
            timed_out=timed_out,
            duration_s=round(duration, 4),
            output=render_capped(bytes(sink.head), bytes(sink.tail), sink.total, artifact, kept),
            output_bytes=sink.total,
            output_truncated=sink.total > len(sink.head) + len(sink.tail),
            artifact=artifact,
            artifact_truncated=sink.artifact_truncated,
            artifact_bytes=kept,
            kill=kill,
            kill_note=note,
        )

    def kill_call(self, call_id: str) -> tuple[Literal["marker", "init"], str]:
        """Kill every process of one exec (those carrying its marker), as at its deadline."""
        for attempt in range(5):
            try:
                out = self.container.exec_run([KILL_COMMAND, call_id], user=AGENT_USER)
                if out.exit_code == 0:
                    return "marker", f"killed {out.output.decode().strip()} processes"
            except docker.errors.APIError:
                pass  # typically: no pid left to start the killer (pids limit reached)
            time.sleep(0.2 * (attempt + 1))
        self._signal_init()
        return "init", "the killer could not start; PID 1 killed every other process"

    def _signal_init(self) -> None:
        with contextlib.suppress(docker.errors.APIError):
            self.container.kill(signal="SIGUSR1")
        time.sleep(0.5)

    # --- state -------------------------------------------------------------------------

    def check_alive(self) -> None:
        """Raise SandboxLost when the container is no longer running (the harness never
        stops it before ``close``, so whatever stopped it was not the harness)."""
        fix = "the session ends as sandbox_lost; see the transcript for the last commands"
        try:
            self.container.reload()
        except docker.errors.NotFound:
            raise SandboxLost(f"container {self.name} is gone (removed)", fix) from None
        state = self.container.attrs.get("State", {})
        if not state.get("Running"):
            oom = ", killed for memory (OOM)" if state.get("OOMKilled") else ""
            raise SandboxLost(f"container {self.name} stopped: PID 1 exited with code "
                              f"{state.get('ExitCode')}{oom}", fix)

    def processes(self) -> list[ProcessInfo]:
        """Every process in the container, PID 1 included (``docker top``; works paused)."""
        top = self.client.api.top(self.container.id, ps_args="-eo pid,uid,etimes,args")
        column = {title: i for i, title in enumerate(top.get("Titles") or [])}
        return [ProcessInfo(pid=int(row[column["PID"]]), uid=int(row[column["UID"]]),
                            elapsed_s=int(row[column["ELAPSED"]]), command=row[column["COMMAND"]])
                for row in top.get("Processes") or []]

    def stop_processes(self, *, wait_s: float = 10.0) -> StopReport:
        """Freeze the container, list what runs beside PID 1, kill all of it, thaw.

        Killed while frozen, no process runs another instruction after the freeze, so a copy
        taken afterwards is the tree as it was at that instant; when the freezer refuses, the
        report says so. Raises SandboxLost when the container no longer runs.
        """
        self.check_alive()
        init_pid = int(self.container.attrs["State"]["Pid"])
        frozen = self.freeze()
        try:
            running = [p for p in self.processes() if p.pid != init_pid]
            unreachable = [p for p in running if not self._kill(p.pid)]
        finally:
            if frozen:
                self.thaw()
        method: Literal["none", "sigkill_while_frozen", "init_after_thaw", "killed_unfrozen"]
        method = "none"
        if running:
            method = "sigkill_while_frozen" if frozen else "killed_unfrozen"
        if unreachable and frozen:
            method = "init_after_thaw"
        if unreachable or (running and not frozen):
            self._signal_init()
        deadline = time.monotonic() + wait_s
        while True:
            survivors = [p for p in self.processes() if p.pid != init_pid]
            if not survivors or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return StopReport(frozen=frozen, processes=running, method=method, survivors=survivors)

    def freeze(self, attempts: int = 5) -> bool:
        """``docker pause``; False when the freezer keeps refusing (the container runs on).
        Raises SandboxLost when the container no longer runs."""
        for attempt in range(attempts):
            try:
                self.container.pause()
                return True
            except docker.errors.APIError:
                self.check_alive()
                time.sleep(0.1 * (attempt + 1))
        return False

    def thaw(self) -> None:
        """``docker unpause`` after :meth:`freeze`."""
        self.container.unpause()

    def _kill(self, pid: int) -> bool:
        """SIGKILL a process by its host pid, once it is sure to be this container's."""
        try:
            # A harness in another pid namespace would name some other process by this pid.
            if self.container.id not in Path(f"/proc/{pid}/cgroup").read_text():
                return False
            os.kill(pid, signal.SIGKILL)
        except OSError:
            return False
        return True

    def workspace_usage(self) -> WorkspaceUsage | None:
        """Room left on the /workspace tmpfs: read on the host when the harness shares the
        daemon's mounts (microseconds), else with ``stat -f`` inside the container; None when
        neither can tell (no exec can start, e.g. at the pids limit)."""
        mountpoint = (self.volume.attrs or {}).get("Mountpoint", "")
        with contextlib.suppress(OSError):
            st = os.statvfs(mountpoint)
            # Only our tmpfs has this size; an unmounted folder reports the host's disk.
            page = os.sysconf("SC_PAGE_SIZE")
            expected = -(-self.limits.workspace_bytes // page) * page
            if os.path.ismount(mountpoint) and st.f_blocks * st.f_frsize == expected:
                return WorkspaceUsage(bytes_total=st.f_blocks * st.f_frsize,
                                      bytes_free=st.f_bavail * st.f_frsize,
                                      inodes_free=st.f_favail)
        try:
            result = self.exec(["stat", "-f", "-c", "%b %a %d %S", WORKSPACE], timeout_s=30)
            total, free, inodes, size = (int(x) for x in result.output.split()[:4])
        except SandboxLost:
            raise
        except (HarnessError, ValueError):
            return None
        return WorkspaceUsage(bytes_total=total * size, bytes_free=free * size,
                              inodes_free=inodes)


# What to do about a container that would not go.
_REMOVAL_FIX = "check `docker ps -a` and the daemon's log, then run `harness cleanup` again"


def _remove_container(container: Any, wait_s: float = 60.0) -> bool:
    """Remove ``container``; True once it is gone, False when it already was.

    Two cleanups can run at once (two operators, a study's housekeeping and a host-wide
    ``harness cleanup``): the daemon answers the second with 409 "removal of container ... is
    already in progress", which is not a failure, so wait for the first removal to end. If it
    ends with the container still there (that removal failed), remove it again, so that the
    caller sees the daemon's own error rather than a wait that never ends."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with kept_thawed(container.name):
                container.remove(force=True, v=True)
            return True
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError as exc:
            if exc.status_code != 409 or "already in progress" not in str(exc.explanation):
                raise
        while True:
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"container {container.name} is still being removed after {wait_s:.0f} s",
                    _REMOVAL_FIX)
            time.sleep(0.5)
            try:
                container.reload()
            except docker.errors.NotFound:
                return True
            if container.status != "removing":
                break  # the other removal ended and left it: try again


class OrphanReport(BaseModel):
    """What a cleanup found gone: removed by it, or by a cleanup that ran at the same time."""

    containers: list[str] = Field(default_factory=list)
    volumes: list[str] = Field(default_factory=list)


def process_alive(pid: int, host: str) -> bool:
    """True when ``pid`` runs on this host's current boot (``host`` is its boot id)."""
    if host != host_id() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_alive(labels: dict[str, str]) -> bool:
    """True when the harness process that created a resource still runs on this host."""
    try:
        pid = int(labels.get(OWNER_PID_LABEL, "0"))
    except ValueError:
        return False
    return process_alive(pid, labels.get(OWNER_HOST_LABEL, ""))


def cleanup_orphans(client: docker.DockerClient, *, include_live: bool = False,
                    labels: dict[str, str] | None = None) -> OrphanReport:
    """Remove containers and volumes left by harness processes that no longer run (only
    those that also carry ``labels``, when given)."""
    report = OrphanReport()
    wanted = [MANAGED_LABEL, *(f"{k}={v}" for k, v in (labels or {}).items())]
    failed: list[Exception] = []
    for container in client.containers.list(all=True, filters={"label": wanted}):
        if include_live or not owner_alive(container.labels):
            # One container that cannot go must not keep the others (and the volumes) here.
            try:
                if _remove_container(container):
                    report.containers.append(container.name)
            except (HarnessError, docker.errors.APIError) as exc:
                failed.append(exc)
    for volume in client.volumes.list(filters={"label": wanted}):
        labels = volume.attrs.get("Labels") or {}
        if include_live or not owner_alive(labels):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                volume.remove(force=True)
                report.volumes.append(volume.name)
    if failed:
        raise HarnessError(f"{len(failed)} container(s) could not be removed (first: "
                           f"{failed[0]})", _REMOVAL_FIX)
    return report
