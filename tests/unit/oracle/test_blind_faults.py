"""The blind-fault measurement's inputs: every kept round parses, and each fault's first hunk
locates it in the reference (the grader runs the contracts that executed those lines first)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from harness.paths import REPO_ROOT
from tests.helpers import load_script


def _script() -> ModuleType:
    return load_script("scripts/qualify/blind_faults.py")


PATCH = """diff --git a/tinylm/model.py b/tinylm/model.py
index 10b05cd..4d4603d 100644
--- a/tinylm/model.py
+++ b/tinylm/model.py
@@ -90,7 +90,7 @@ class MoEFeedForward(nn.Module):
-        return math.ceil(x)
+        return int(x)
"""


def test_a_fault_is_located_by_its_first_hunk_in_the_reference() -> None:
    spec = _script().spec_of("capacity-floor", PATCH)
    assert (spec.id, spec.path, spec.first_line, spec.last_line) == (
        "blind-capacity-floor", "tinylm/model.py", 90, 96)


def test_a_patch_without_a_hunk_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no file header or hunk"):
        _script().spec_of("empty", "not a diff\n")
    (tmp_path / "lone").mkdir()
    (tmp_path / "lone" / "fault.yaml").write_text("id: lone\n")
    with pytest.raises(SystemExit, match=r"without fault\.patch"):
        _script().blind_faults(tmp_path)


@pytest.mark.parametrize("task", ["moe-router", "hybrid-arch"])
def test_every_kept_round_is_complete(task: str) -> None:
    rounds = sorted((REPO_ROOT / "hidden" / task / "blind").glob("*/"))
    assert rounds, f"hidden/{task}/blind/ holds no measured round"
    for folder in rounds:
        faults = _script().blind_faults(folder)
        assert len(faults) >= 5
        for fault_id, source in faults:
            assert source.name == fault_id
            _script().spec_of(fault_id, (source / "fault.patch").read_text())


def test_the_oracle_report_names_the_latest_round_and_never_invents_one(tmp_path: Path) -> None:
    from harness.oracle.strength import blind_line

    assert blind_line(tmp_path, "t").startswith("Blind faults: no round measured yet")
    (tmp_path / "blind").mkdir()
    for day, caught in (("2026-12-01", 3), ("2026-12-05", 5)):
        (tmp_path / "blind" / f"t-{day}.json").write_text(
            f'{{"task": "t", "date": "{day}", "caught": {caught}, "total": 6, "faults": []}}')
    assert blind_line(tmp_path, "t") == (
        "Blind faults: caught 5 of 6 (2026-12-05; written from the packet and the reference "
        "only, [the round](blind/t-2026-12-05.md)).")
    (tmp_path / "blind" / "t-2026-12-06.json").write_text("{not json")
    assert "unreadable" in blind_line(tmp_path, "t")
