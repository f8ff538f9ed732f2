"""What this host can run: the facts, and which declared configurations a grade will run."""

from __future__ import annotations

from harness.infra.host import DockerFacts, HostFacts, ImageFacts, configuration_support
from tests.helpers import run_cli

CONFIGS = ["cpu-1", "gloo-ddp-2", "gloo-fsdp-2", "cuda-ddp-2", "cuda-fsdp-2"]


def facts(**kw: object) -> HostFacts:
    base: dict[str, object] = {
        "cores": 2, "memory_gib": 24.0, "disk_free_gib": {}, "gpu_ids": [],
        "docker": DockerFacts(reachable=True, runtimes=["runc"])}
    return HostFacts.model_validate({**base, **kw})


def test_a_cpu_host_runs_the_cpu_configurations_and_says_why_not_the_cuda_ones() -> None:
    support = configuration_support(facts(images=[ImageFacts(
        image="c", present=True, torch="2.13.0+cpu", cuda=None)]), CONFIGS)
    assert [c for c, why in support.items() if why is None] == CONFIGS[:3]
    assert "needs 2 GPUs, this host has 0" in (support["cuda-ddp-2"] or "")
    assert "CPU torch" in (support["cuda-ddp-2"] or "")


def test_even_a_gpu_host_reports_cuda_as_not_run_while_the_grader_gets_no_gpus() -> None:
    support = configuration_support(facts(
        gpu_ids=["0", "1"], docker=DockerFacts(reachable=True, runtimes=["nvidia", "runc"]),
        images=[ImageFacts(image="c", present=True, torch="2.13.0+cu128", cuda="12.8")]),
        CONFIGS)
    assert support["cuda-fsdp-2"] == "the grader container gets no GPUs"


def test_no_engine_means_nothing_runs() -> None:
    support = configuration_support(facts(docker=DockerFacts(reachable=False)), CONFIGS)
    assert all(why for why in support.values())


def test_doctor_without_an_engine_says_so_and_lists_every_task() -> None:
    result = run_cli("doctor", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert result.returncode == 0, result.stderr
    assert "not reachable" in result.stdout
    for task in ("moe-router", "hybrid-arch"):
        assert task in result.stdout
    assert "not_run" in result.stdout and "Traceback" not in result.stderr
