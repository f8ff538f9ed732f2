"""Faces of the host and its images: what this host can run, and building the images offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from harness.cli.common import DEFAULT_RUNS, clear_errors, console, log
from harness.errors import HarnessError
from harness.paths import REPO_ROOT

app = typer.Typer(no_args_is_help=True, help="Build and inspect the harness images.")


@app.command("build")
@clear_errors
def images_build(
    names: Annotated[list[str] | None, typer.Argument(
        metavar="IMAGE", help="images (default: all)")] = None,
    torch: Annotated[str | None, typer.Option(
        metavar="SPEC", help="torch pin, e.g. torch==2.13.0")] = None,
    force: Annotated[bool, typer.Option(help="rebuild even if inputs did not change")] = False,
    agent: Annotated[list[str] | None, typer.Option(
        metavar="KIND", help="also build a coding-agent CLI's images (claude-code or codex): "
        "its pinned binary is fetched with npm pack into .cache/cli-agents/ once")] = None,
) -> None:
    """Build the rootfs, base, control, treatment and grader images (offline), and with
    --agent the images of a coding-agent CLI (one layer over control and treatment)."""
    from harness.infra.images import CLI_KINDS, build_images, cli_image_name, image_tag

    wanted = list(names or [])
    for kind in agent or []:
        if kind not in CLI_KINDS:
            raise HarnessError(f"unknown agent {kind!r}",
                               f"use --agent {' or --agent '.join(CLI_KINDS)}")
        wanted += [cli_image_name(arm, kind) for arm in ("control", "treatment")]
    if agent and not names:
        wanted += ["base", "control", "treatment", "grader"]
    for name in wanted:
        image_tag(name)  # an unknown name is one line
    report = build_images(wanted or None, torch_spec=torch, force=force, log=log)
    for name, image in report.image_ids.items():
        state = "built" if name in report.built else "up to date"
        console.print(f"{name:<10} {image[:19]}  {state}")


@clear_errors
def doctor(
    runs: Annotated[Path, typer.Option(metavar="DIR", help="runs folder (its free disk)")]
    = DEFAULT_RUNS,
) -> None:
    """What this host can run: the Docker engine and its runtimes, GPUs, cores, memory, free
    disk, a Slurm controller, the torch the images carry, and which declared configurations of
    each task will run here and which will be not_run (with the reason)."""
    from harness.infra.host import configuration_support, host_facts
    from harness.infra.images import docker_client
    from harness.infra.images.specs import image_tag
    from harness.records.packets import load_packet

    try:
        client = docker_client()
    except HarnessError:
        client = None  # the facts say the engine is unreachable
    facts = host_facts(client, runs_root=runs, image_tags=[image_tag("control")])
    table = Table(title="this host")
    table.add_column("fact")
    table.add_column("value", overflow="fold")
    d = facts.docker
    rows = [
        ("Docker engine", f"{d.version}, runtimes {', '.join(d.runtimes) or '-'} (default "
         f"{d.default_runtime})" if d.reachable else f"not reachable: {d.problem}"),
        ("GPUs", f"{len(facts.gpu_ids)}" + (f": {', '.join(facts.gpu_names)} (driver "
                                           f"{facts.gpu_driver})" if facts.gpu_names else "")),
        ("cores", str(facts.cores)),
        ("memory", f"{facts.memory_gib} GiB"),
        *((f"free disk {where}", f"{gib} GiB") for where, gib in facts.disk_free_gib.items()),
        ("Slurm", facts.slurm or "no controller (scontrol not found)"),
        ("candidate jobs end by", "a freezer cgroup per job, then the uid reaper"
         if facts.job_cgroups.available else f"the uid reaper ({facts.job_cgroups.reason})"),
        *((f"image {i.image}", (f"torch {i.torch}, CUDA {i.cuda or 'none (CPU build)'}"
                                if i.torch else i.problem or "-")) for i in facts.images),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    configs = Table(title="declared configurations on this host")
    for column in ("task", "configuration", "here"):
        configs.add_column(column, overflow="fold")
    for packet_yaml in sorted((REPO_ROOT / "task_packets").glob("*/packet.yaml")):
        packet = load_packet(packet_yaml.parent)
        for config, why in configuration_support(facts, list(packet.spec.configurations)).items():
            configs.add_row(packet.spec.id, config, "runs" if why is None else f"not_run: {why}")
    console.print(configs)
