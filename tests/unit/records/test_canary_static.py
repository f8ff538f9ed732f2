"""The hidden canary appears nowhere an agent can see: packets, images, workspaces, transcripts."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.paths import REPO_ROOT
from tests.helpers import canaries, contains_any


def test_every_hidden_file_that_can_carry_a_comment_repeats_the_canary() -> None:
    """Except the probes: candidate code reads them at grading time (grading/probe.py), so a
    canary there could come back in a candidate's output and would prove nothing."""
    for task_dir in sorted(REPO_ROOT.glob("hidden/*/")):
        token = (task_dir / "CANARY").read_text().strip()
        for path in task_dir.rglob("*"):
            if path.is_file() and path.suffix in (".py", ".yaml", ".yml", ".md", ".sh"):
                in_probes = path.relative_to(task_dir).parts[0] == "probes"
                carries = token in path.read_text()
                assert carries != in_probes, f"{path}: canary {'in' if carries else 'missing'}"


def test_no_tracked_file_outside_hidden_holds_a_canary() -> None:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")
    needles = canaries()
    for rel in tracked:
        if not rel or rel.startswith("hidden/"):
            continue
        path = REPO_ROOT / rel
        if path.is_file() and not path.is_symlink():
            assert contains_any([path.read_bytes()], needles) is None, rel


def test_frozen_traincheck_invariants_leak_no_hidden_text() -> None:
    """What the treatment tool uploads into an agent's container: no canary, no reference code.

    (What the invariants do reveal is written down in harness/traincheck/reference.py.)"""
    import gzip

    needles = canaries()
    checked = 0
    for task_dir in sorted(REPO_ROOT.glob("hidden/*/")):
        frozen = REPO_ROOT / "reports" / "traincheck" / task_dir.name / "reference"
        reference_lines = _added_reference_lines(task_dir)
        for path in sorted(frozen.glob("*.invariants.json.gz")) + sorted(
                frozen.glob("*.control.json")):
            content = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else (
                path.read_bytes())
            assert contains_any([content], needles) is None, path
            leaked = [line for line in reference_lines if line in content]
            assert not leaked, f"{path} holds reference code: {leaked[:3]}"
            checked += 1
    assert checked, "no frozen TrainCheck reference is committed"


def _added_reference_lines(task_dir: Path) -> list[bytes]:
    """Distinctive code lines the hidden reference solution adds (long enough to be unique)."""
    patch = (task_dir / "reference" / "solution.patch").read_text()
    lines = []
    for line in patch.splitlines():
        code = line[1:].strip()
        if line.startswith("+") and not line.startswith("+++") and len(code) >= 40:
            lines.append(code.encode())
    return lines
