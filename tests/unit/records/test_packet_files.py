"""Real task packets: valid, canary-free, and their public tests pass in the control image.

Each packet's public suite runs where an agent runs it: inside a fresh control container,
network none, as uid 1000, on the baseline and on the baseline plus the hidden reference
patch (applied on the host; the patch itself never enters the container).
"""

from __future__ import annotations

import pytest

from harness.paths import REPO_ROOT
from harness.records.packets import load_packet

TASKS = sorted(p.parent.name for p in (REPO_ROOT / "task_packets").glob("*/packet.yaml"))


@pytest.mark.parametrize("task", TASKS)
def test_packet_declares_what_the_harness_needs(task: str) -> None:
    packet = load_packet(REPO_ROOT / "task_packets" / task)
    assert packet.spec.id == task
    assert {"cpu-1", "gloo-ddp-2", "gloo-fsdp-2"} <= set(packet.spec.configurations)
    assert set(packet.spec.candidate_commands) == set(packet.spec.configurations)
    text = packet.task_md.lower().replace("*", "")
    assert "reduced adaptation" in text and "not an official" in text
    assert (REPO_ROOT / "hidden" / task / "CANARY").is_file()
