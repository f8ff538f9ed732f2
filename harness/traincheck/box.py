"""A treatment-image container for diagnostic work, with trees placed under /workspace.

Operator-side runs (reference build, capabilities, transparency, calibration) use one box
per task and configuration; every tree and every run gets its own folder inside it, and the
in-container runner refuses to reuse an output folder.
"""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
import uuid
from pathlib import Path
from typing import Any

import docker

from harness.errors import HarnessError
from harness.infra import images
from harness.infra.sandbox import Sandbox, SandboxLimits
from harness.infra.workspace import tar_inputs

ROLE_LABEL = "org.harness.role"
TREES = "/workspace/trees"
RUNS = "/workspace/runs"


class DiagnosticsBox:
    """``with DiagnosticsBox(client, "moe-router-ddp") as box: box.call([...])``."""

    def __init__(self, client: docker.DockerClient, name_hint: str,
                 limits: SandboxLimits | None = None) -> None:
        self.sandbox = Sandbox(client, images.image_tag("treatment"),
                               labels={ROLE_LABEL: "diagnostics"},
                               limits=limits or SandboxLimits(memory_bytes=12 * 1024**3),
                               name_hint=f"diag-{name_hint}")

    def __enter__(self) -> DiagnosticsBox:
        self.sandbox.start()
        self.sandbox.exec(["mkdir", "-p", TREES, RUNS], timeout_s=30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.sandbox.close()

    def put_tree(self, name: str, tree: Path) -> str:
        """Copy a host tree into the container; returns its path there."""
        self.sandbox.put_archive(TREES, tar_inputs({name: tree}))
        return f"{TREES}/{name}"

    def call(self, args: list[str], *, timeout_s: float) -> dict[str, Any]:
        """Run ``python -m diagnostics ARGS`` and return the JSON object it printed last."""
        result_file = f"{RUNS}/.result-{uuid.uuid4().hex[:12]}.json"
        result = self.sandbox.exec(["python", "-m", "diagnostics", *args], timeout_s=timeout_s,
                                   env={"DIAGNOSTICS_RESULT": result_file})
        text: str | None = None
        if not result.timed_out:
            with contextlib.suppress(docker.errors.NotFound, HarnessError):
                text = self.read_bytes(result_file).decode(errors="replace").strip()
        try:
            payload: dict[str, Any] = json.loads(text or "")
        except json.JSONDecodeError:
            # No file, or one cut short: a full /workspace leaves an empty one (the runner's
            # write fails after the file was opened).
            what = ("no result file" if text is None else
                    "an empty result file" if not text else "a result cut short")
            raise HarnessError(
                f"diagnostics {args[0]} gave no result (exit {result.exit_code}"
                f"{', timed out' if result.timed_out else ''}, {what}): "
                f"{result.output[-300:]!r}",
                "see the container output; rerun with a longer wall limit if it timed out, "
                "and check the box's free /workspace if it is full") from None
        if "error" in payload:
            raise HarnessError(f"diagnostics {args[0]} failed: {payload['error']}",
                               "check the arguments and the frozen reference files")
        return payload

    def clean(self, prefix: str) -> None:
        """Remove a finished run's folders: ``prefix`` and ``prefix-*`` (its traces, checks
        and probe). /workspace is a 2 GiB volume, and a long plan fills it when runs are kept.
        Calibration's 22 regressions and 4 healthy runs of moe-router filled it at the 19th
        row. The reference build's gloo-fsdp-2, with its resume probes, filled it too (both
        tasks, 2026-12-06). Each time the runner's result came back empty."""
        self.sandbox.exec(["bash", "-c", 'rm -rf -- "$1" "$1"-*', "clean", prefix],
                          timeout_s=120)

    def read_bytes(self, path: str) -> bytes:
        """One file from the container's /workspace volume."""
        buf = io.BytesIO(b"".join(self.sandbox.get_archive(path)))
        with tarfile.open(fileobj=buf) as tar:
            member = tar.next()
            handle = tar.extractfile(member) if member is not None else None
            if handle is None:
                raise HarnessError(f"{path} is not a file in the container", "check the path")
            return handle.read()
