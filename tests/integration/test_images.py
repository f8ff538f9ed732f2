"""The images: built offline, arms differ only by the TrainCheck layer, rebuilds are skipped."""

from __future__ import annotations

import docker

from harness.infra import images
from harness.paths import IMAGES_DIR


def _run(client: docker.DockerClient, name: str, command: str) -> str:
    out = client.containers.run(images.image_tag(name), ["bash", "-c", command], remove=True,
                                network_mode="none")
    return out.decode()


def _packages(client: docker.DockerClient, name: str) -> set[str]:
    out = _run(client, name, "python -m pip list --format=freeze --disable-pip-version-check")
    return {line.strip().lower() for line in out.splitlines() if "==" in line}


def test_treatment_is_control_plus_exactly_the_traincheck_layer(
    client: docker.DockerClient,
) -> None:
    control, treatment = _packages(client, "control"), _packages(client, "treatment")
    assert control < treatment
    pins = images.read_pins(IMAGES_DIR / "requirements" / "treatment.txt")
    expected = {f"{name}=={version}".lower().replace("_", "-") for name, version in pins}
    added = {p.replace("_", "-") for p in treatment - control}
    assert added == expected
    # The filesystem too: every control layer is a treatment layer, in order.
    control_layers = client.images.get(images.image_tag("control")).attrs["RootFS"]["Layers"]
    treatment_layers = client.images.get(images.image_tag("treatment")).attrs["RootFS"]["Layers"]
    assert treatment_layers[: len(control_layers)] == control_layers


def test_traincheck_runs_in_treatment_only(client: docker.DockerClient) -> None:
    assert "usage" in _run(client, "treatment", "traincheck-collect --help 2>&1").lower()
    assert "not found" in _run(client, "control", "traincheck-collect --help 2>&1 || true")


def test_base_pins_torch_and_a_non_root_agent(client: docker.DockerClient) -> None:
    out = _run(client, "control", "python -c 'import torch; print(torch.__version__)'; id -u")
    version, uid = out.split()
    assert version.startswith(images.DEFAULT_TORCH_SPEC.split("==")[1]) and uid == "1000"


def test_second_build_rebuilds_nothing() -> None:
    report = images.build_images(log=lambda _m: None)
    assert report.built == []
    assert set(report.image_ids) == {"rootfs", "base", "control", "treatment", "grader"}


