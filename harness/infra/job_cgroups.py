"""The host's half of a kernel container per candidate job (``grading.jobcgroup``).

A grader container gets a folder of the host's cgroup v1 ``freezer`` hierarchy of its own,
bind-mounted read-write at ``CONTAINER_PATH``: the judge (root in the container) makes one
cgroup per job there and ends a job by freezing and killing it, with no process of the
candidate's uid involved. Only the host can make that folder, so it is made here, for each
grader container, when the harness is root on the engine's own host and the host runs cgroup
v1; otherwise the container is told why not, the judge ends jobs by its uid reaper alone, and
every grade says which (``SealInfo.job_kill``).

Why v1's freezer and not v2's ``cgroup.kill``: the hosts this harness is measured on run cgroup
v1. On v2, a container in its own cgroup namespace cannot move a process into a cgroup outside
it, and running the grader in the host's cgroup namespace is a trade not taken untested.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

FREEZER_ROOT = Path("/sys/fs/cgroup/freezer")
PARENT = "harness-grading"
CONTAINER_PATH = "/run/grading/job-cgroups"
# Names shared with grading.jobcgroup (which the harness does not import into the container).
JOB_CGROUPS_VAR = "GRADING_JOB_CGROUPS"
NO_JOB_CGROUPS_VAR = "GRADING_NO_JOB_CGROUPS"


class JobCgroupSupport(BaseModel):
    """Whether grader containers on this host get a cgroup per job, and if not, why."""

    available: bool
    reason: str = ""


def _engine_is_local(client: Any) -> bool:
    base = str(getattr(getattr(client, "api", None), "base_url", ""))
    return base.startswith("http+docker://local")


def support(client: Any = None) -> JobCgroupSupport:
    """What this host offers (``client``: the engine, when one is at hand)."""
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return JobCgroupSupport(available=False, reason=(
            "the host runs cgroup v2; job cgroups are made on cgroup v1's freezer only"))
    if not (FREEZER_ROOT / "cgroup.procs").is_file():
        return JobCgroupSupport(available=False,
                                reason=f"no cgroup v1 freezer hierarchy at {FREEZER_ROOT}")
    if client is not None and not _engine_is_local(client):
        return JobCgroupSupport(available=False, reason=(
            "the Docker engine is not on this host, where the harness would make the cgroups"))
    if os.geteuid() != 0:
        return JobCgroupSupport(available=False, reason=(
            "the harness is not root, and only root makes cgroups on the host"))
    return JobCgroupSupport(available=True)


def folder(container_name: str) -> Path:
    """Where the host makes the folder of the grader container ``container_name``."""
    return FREEZER_ROOT / PARENT / container_name


class JobCgroups:
    """One grader container's folder of the freezer hierarchy, from creation to removal."""

    def __init__(self, path: Path | None, reason: str = "") -> None:
        self.path = path
        self.reason = reason

    @classmethod
    def make(cls, name: str, client: Any = None) -> JobCgroups:
        """The folder for the grader container ``name``, made now; or none, with the reason."""
        found = support(client)
        if not found.available:
            return cls(None, found.reason)
        path = folder(name)
        try:
            path.mkdir(parents=True)
        except OSError as exc:
            return cls(None, f"cannot make {path} ({exc.strerror or exc})")
        return cls(path)

    def container_settings(self) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
        """(volumes, environment) for the container spec."""
        if self.path is None:
            return {}, {NO_JOB_CGROUPS_VAR: self.reason}
        return ({str(self.path): {"bind": CONTAINER_PATH, "mode": "rw"}},
                {JOB_CGROUPS_VAR: CONTAINER_PATH})

    def thaw(self) -> None:
        """Thaw every job cgroup: a task left frozen (a judge killed between its freeze and its
        thaw) does not die, and would keep the container's pid namespace from ending."""
        for job in self._jobs():
            with contextlib.suppress(OSError):
                (job / "freezer.state").write_text("THAWED")

    def remove(self, wait_s: float = 10.0) -> None:
        """After the container is gone (its processes with it): remove the folder."""
        if self.path is None:
            return
        deadline = time.monotonic() + wait_s
        for cgroup in [*self._jobs(), self.path]:
            while True:
                try:
                    cgroup.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # left for `harness cleanup`; an empty cgroup costs nothing
                    time.sleep(0.05)
        self.path = None

    def _jobs(self) -> list[Path]:
        if self.path is None:
            return []
        with contextlib.suppress(OSError):
            return [p for p in self.path.iterdir() if p.is_dir()]
        return []


@contextlib.contextmanager
def kept_thawed(container_name: str) -> Iterator[None]:
    """While the container ``container_name`` is removed, keep its job cgroups thawed: the
    judge may freeze a job until the moment it is killed, and a frozen task would keep the
    container's pid namespace, and its removal, from ending."""
    path = folder(container_name)
    if not path.is_dir():  # not a grader container, or a host without job cgroups
        yield
        return
    cgroups = JobCgroups(path)
    done = threading.Event()

    def keep() -> None:
        while not done.is_set():
            cgroups.thaw()
            done.wait(0.05)

    thread = threading.Thread(target=keep, name="thaw-job-cgroups", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        cgroups.thaw()


def remove_orphans(client: Any, min_age_s: float = 60.0) -> list[str]:
    """Remove the folders of grader containers that are gone (a harness killed before it could
    remove them), leaving any made in the last ``min_age_s`` (its container may be starting)
    and any that still holds a process after a thaw; the names removed."""
    parent = FREEZER_ROOT / PARENT
    try:
        folders = [p for p in parent.iterdir() if p.is_dir()]
    except OSError:
        return []
    existing = {c.name for c in client.containers.list(all=True)}
    removed = []
    for path in folders:
        with contextlib.suppress(OSError):
            if path.name in existing or time.time() - path.stat().st_mtime < min_age_s:
                continue
            cgroups = JobCgroups(path)
            # Its container is gone, so a task left is a frozen one, waiting for its SIGKILL.
            cgroups.thaw()
            cgroups.remove(wait_s=2.0)
            if not path.exists():
                removed.append(path.name)
    return removed
