"""Task packets on the host: the public declaration plus the files an agent receives."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from grading.packet import PacketSpec, load_packet_spec
from grading.yamlfile import YamlFileError
from harness.errors import HarnessError


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
    except YamlFileError as exc:
        raise HarnessError(str(exc), "fix the task packet's packet.yaml") from None
    for needed in ("TASK.md", "repo"):
        if not (root / needed).exists():
            raise HarnessError(f"task packet {root} has no {needed}", "complete the packet")
    return TaskPacket(root=root, spec=spec, task_md=(root / "TASK.md").read_text())
