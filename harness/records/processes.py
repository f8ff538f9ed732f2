"""What was still running in a container when its processes were stopped, and how they died."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ProcessInfo(BaseModel):
    pid: int  # in the host's pid namespace, as ``docker top`` reports it
    uid: int
    elapsed_s: int
    command: str


class StopReport(BaseModel):
    """What still ran beside PID 1 when the container was frozen, and how it was killed.

    ``sigkill_while_frozen``: every process got SIGKILL from the host while frozen and died on
    thawing without running another instruction. ``init_after_thaw``: the host could not
    signal them (no access to the host's pids), so PID 1 killed them right after thawing.
    ``killed_unfrozen``: the freezer refused (runc's "unable to freeze", seen under load), so
    they were killed running, the host first and then PID 1 for anything forked meanwhile;
    ``frozen`` is then false.
    """

    frozen: bool
    processes: list[ProcessInfo] = Field(default_factory=list)
    method: Literal["none", "sigkill_while_frozen", "init_after_thaw", "killed_unfrozen"] = "none"
    survivors: list[ProcessInfo] = Field(default_factory=list)
