"""The code variants the calibration track traces, built on the host from the task files.

``baseline`` is the packet's repo; ``reference`` is the baseline plus the hidden reference
solution (the legitimately changed control); ``fault:<id>`` is the reference plus one
documented fault. Held-out repair variants (``hidden/<task>/heldout/``) are never built here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from harness.errors import HarnessError
from harness.infra.workspace import apply_patch, snapshot_baseline
from harness.paths import REPO_ROOT
from harness.records.packets import TaskPacket, load_packet
from harness.records.tasks import FaultSpec, default_hidden_dir, default_packet_dir, load_yaml

REPORTS_ROOT = REPO_ROOT / "reports" / "traincheck"
VALIDATION_ROOT = REPO_ROOT / "reports" / "validation"


class Variant(BaseModel):
    name: str
    kind: Literal["baseline", "reference", "fault", "regression"]
    tree: Path
    feature: bool  # whether the feature flags apply (the baseline does not accept them)
    fault: FaultSpec | None = None
    patch_sha256: str = ""


class TaskFiles(BaseModel):
    task: str
    packet: TaskPacket
    hidden: Path
    reports_root: Path = REPORTS_ROOT
    validation_dir: Path = VALIDATION_ROOT

    @property
    def reports(self) -> Path:
        return self.reports_root / self.task

    @property
    def validation_summary(self) -> Path:
        """The gold validation summary (the grader's verdicts), written by `harness validate`."""
        return self.validation_dir / f"{self.task}.json"


def task_files(task: str, *, packet_dir: Path | None = None, hidden_dir: Path | None = None,
               reports_root: Path = REPORTS_ROOT,
               validation_dir: Path = VALIDATION_ROOT) -> TaskFiles:
    """A task's files; the defaults are the repository's (tests point them elsewhere)."""
    packet_dir = packet_dir or default_packet_dir(task)
    hidden = hidden_dir or default_hidden_dir(task)
    if not (packet_dir / "packet.yaml").exists() or not hidden.is_dir():
        raise HarnessError(f"unknown task {task!r}",
                           "use a task with task_packets/<task>/ and hidden/<task>/")
    packet = load_packet(packet_dir)
    if packet.spec.diagnostics is None:
        raise HarnessError(f"task {task} declares no diagnostics runs",
                           "add a `diagnostics:` section to its packet.yaml")
    return TaskFiles(task=task, packet=packet, hidden=hidden, reports_root=reports_root,
                     validation_dir=validation_dir)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_variants(files: TaskFiles, work: Path, *, faults: bool,
                   regressions: bool = False) -> list[Variant]:
    """Trees under ``work`` (which must be empty or missing): the baseline, the reference,
    and with ``faults`` each calibration fault, with ``regressions`` each oracle regression
    (``regressions/<id>/``, the same two files as a fault), all applied to the reference."""
    baseline = work / "baseline"
    snapshot_baseline(files.packet.repo, baseline)
    reference_patch = (files.hidden / "reference" / "solution.patch").read_bytes()
    reference = work / "reference"
    apply_patch(baseline, reference_patch, reference)
    variants = [
        Variant(name="baseline", kind="baseline", tree=baseline, feature=False),
        Variant(name="reference", kind="reference", tree=reference, feature=True,
                patch_sha256=_sha(reference_patch)),
    ]
    kinds: list[tuple[Literal["fault", "regression"], str]] = []
    if faults:
        kinds.append(("fault", "faults"))
    if regressions:
        kinds.append(("regression", "regressions"))
    for kind, folder in kinds:
        for fault_yaml in sorted(files.hidden.glob(f"{folder}/*/fault.yaml")):
            spec = load_yaml(fault_yaml, FaultSpec)
            assert isinstance(spec, FaultSpec)
            patch = (fault_yaml.parent / "fault.patch").read_bytes()
            tree = work / f"{kind}-{spec.id}"
            apply_patch(reference, patch, tree)
            variants.append(Variant(name=f"{kind}:{spec.id}", kind=kind, tree=tree,
                                    feature=True, fault=spec, patch_sha256=_sha(patch)))
    return variants
