"""Task packets on the host: the public declaration plus the files an agent receives."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from grading.packet import PacketSpec, load_packet_spec
from harness.errors import HarnessError, validation_problem, yaml_problem


class TaskPacket(BaseModel):
    """A packet folder: ``packet.yaml``, ``TASK.md`` and the baseline ``repo/``."""

    root: Path
    spec: PacketSpec
    task_md: str

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def spec_path(self) -> Path:
        return self.root / "packet.yaml"


def load_packet(root: Path) -> TaskPacket:
    path = root / "packet.yaml"
    try:
        spec = load_packet_spec(path)
    except ValueError as exc:
        # The reader's message carries the parser's or pydantic's many lines: keep one.
        cause = exc.__cause__
        if isinstance(cause, ValidationError):
            problem = f"packet file {path}: {validation_problem(cause)}"
        elif isinstance(cause, yaml.YAMLError):
            problem = f"packet file {path} is {yaml_problem(cause)}"
        else:
            problem = str(exc).splitlines()[0]
        raise HarnessError(problem, "fix the task packet's packet.yaml") from exc
    for needed in ("TASK.md", "repo"):
        if not (root / needed).exists():
            raise HarnessError(f"task packet {root} has no {needed}", "complete the packet")
    return TaskPacket(root=root, spec=spec, task_md=(root / "TASK.md").read_text())
