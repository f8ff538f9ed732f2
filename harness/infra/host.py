"""What this host can run: the Docker engine and its runtimes, GPUs, cores, memory, disk, a
Slurm controller, and the torch build the images carry; from that, which declared
configurations of a task can run here and which will be ``not_run`` (with the reason).

``harness doctor`` prints all of it; ``freeze`` and ``matrix plan`` use the same facts to say,
before any session starts, which configurations a grade will report as not run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import docker
from pydantic import BaseModel, Field

from grading.packet import CUDA_CONFIGURATIONS
from harness.infra.gpu_slots import detect_gpus
from harness.infra.job_cgroups import JobCgroupSupport
from harness.infra.job_cgroups import support as job_cgroup_support

# What the probe container prints: the torch build and, where it sees GPUs, CUDA and NCCL.
TORCH_PROBE = (
    "import json, torch\n"
    "cuda = torch.cuda.is_available()\n"
    "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda,\n"
    "  'gpus': torch.cuda.device_count() if cuda else 0,\n"
    "  'nccl': '.'.join(map(str, torch.cuda.nccl.version())) if cuda else None}))\n"
)


class DockerFacts(BaseModel):
    reachable: bool
    version: str | None = None
    runtimes: list[str] = Field(default_factory=list)
    default_runtime: str | None = None
    root_dir: str | None = None
    problem: str | None = None

    @property
    def nvidia(self) -> bool:
        return "nvidia" in self.runtimes


class ImageFacts(BaseModel):
    """The torch an image carries, as a container of it sees it (no network, no GPU)."""

    image: str
    present: bool
    torch: str | None = None
    cuda: str | None = None  # the CUDA version torch was built for; None: a CPU build
    problem: str | None = None


class HostFacts(BaseModel):
    cores: int
    memory_gib: float
    disk_free_gib: dict[str, float]
    docker: DockerFacts
    gpu_ids: list[str]
    gpu_names: list[str] = Field(default_factory=list)
    gpu_driver: str | None = None
    slurm: str | None = None  # the controller's answer to `scontrol ping`, when there is one
    images: list[ImageFacts] = Field(default_factory=list)
    # Whether grader containers get a cgroup per candidate job (harness.infra.job_cgroups).
    job_cgroups: JobCgroupSupport = Field(
        default_factory=lambda: JobCgroupSupport(available=False, reason="not probed"))


def _docker_facts(client: docker.DockerClient | None) -> DockerFacts:
    if client is None:
        return DockerFacts(reachable=False, problem="no client")
    try:
        info = client.info()
    except docker.errors.DockerException as exc:
        return DockerFacts(reachable=False, problem=str(exc).splitlines()[0][:200])
    return DockerFacts(reachable=True, version=info.get("ServerVersion"),
                       runtimes=sorted((info.get("Runtimes") or {}).keys()),
                       default_runtime=info.get("DefaultRuntime"),
                       root_dir=info.get("DockerRootDir"))


def _gpu_details() -> tuple[list[str], str | None]:
    if shutil.which("nvidia-smi") is None:
        return [], None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return [], None
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    return [r[0] for r in rows], (rows[0][1] if rows and len(rows[0]) > 1 else None)


def _slurm() -> str | None:
    if shutil.which("scontrol") is None:
        return None
    try:
        result = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"scontrol failed: {exc}"
    said = (result.stdout or result.stderr).strip().splitlines()
    answer = said[0][:200] if said else f"exit {result.returncode}"
    return answer if result.returncode == 0 else f"no controller reachable ({answer})"


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return 0.0


def image_facts(client: docker.DockerClient, tag: str) -> ImageFacts:
    """The torch build of an image, from a short container of it (no network)."""
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return ImageFacts(image=tag, present=False, problem="not built (harness images build)")
    except docker.errors.DockerException as exc:
        return ImageFacts(image=tag, present=False, problem=str(exc)[:200])
    try:
        out = client.containers.run(tag, ["python", "-c", TORCH_PROBE], network_mode="none",
                                    remove=True, stdout=True, stderr=False,
                                    labels={"org.harness.role": "doctor"})
        data = json.loads(out.decode().strip().splitlines()[-1])
        return ImageFacts(image=tag, present=True, torch=str(data.get("torch")),
                          cuda=data.get("cuda"))
    except (docker.errors.DockerException, ValueError, IndexError) as exc:
        return ImageFacts(image=tag, present=True, problem=str(exc).splitlines()[0][:200])


def host_facts(client: docker.DockerClient | None, *, runs_root: Path,
               image_tags: list[str] | None = None) -> HostFacts:
    """This host's facts; ``image_tags``: the images whose torch build to probe."""
    disks: dict[str, float] = {}
    engine = _docker_facts(client)
    for where in {str(runs_root.parent if not runs_root.exists() else runs_root),
                  engine.root_dir or ""} - {""}:
        try:
            disks[where] = round(shutil.disk_usage(where).free / 1024**3, 1)
        except OSError:
            continue
    names, driver = _gpu_details()
    images = ([image_facts(client, t) for t in image_tags]
              if client is not None and engine.reachable and image_tags else [])
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return HostFacts(cores=affinity or os.cpu_count() or 1, memory_gib=_memory_gib(),
                     disk_free_gib=disks, docker=engine, gpu_ids=detect_gpus(),
                     gpu_names=names, gpu_driver=driver, slurm=_slurm(), images=images,
                     job_cgroups=job_cgroup_support(client))


def configuration_support(facts: HostFacts, configurations: list[str]) -> dict[str, str | None]:
    """Each declared configuration: None when a grade on this host runs it, else why it will
    be ``not_run``."""
    support: dict[str, str | None] = {}
    for config in configurations:
        if config not in CUDA_CONFIGURATIONS:
            support[config] = None if facts.docker.reachable else "no Docker engine"
            continue
        reasons = []
        if len(facts.gpu_ids) < 2:
            reasons.append(f"needs 2 GPUs, this host has {len(facts.gpu_ids)}")
        if not facts.docker.nvidia:
            reasons.append("the Docker engine has no nvidia runtime")
        builds = [i for i in facts.images if i.present and i.torch]
        if builds and not any(i.cuda for i in builds):
            reasons.append(f"the images carry a CPU torch ({builds[0].torch})")
        # The grader container is started without GPUs: a grade runs the CPU configurations
        # only, whatever the host has (a CUDA configuration is reported not_run, never passed).
        reasons.append("the grader container gets no GPUs")
        support[config] = "; ".join(reasons)
    return support
