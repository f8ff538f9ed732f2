"""The images: built offline, arms differ only by the TrainCheck layer, rebuilds are skipped."""

from __future__ import annotations

from harness.infra import images


def test_inputs_hash_changes_with_the_parent() -> None:
    spec = images.IMAGE_SPECS["control"]
    assert images.inputs_hash(spec, "sha256:a", [], "torch==1") != images.inputs_hash(
        spec, "sha256:b", [], "torch==1"
    )
