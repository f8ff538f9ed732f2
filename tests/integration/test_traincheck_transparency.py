"""The transparency check, for real: plain vs traced healthy runs of moe-router on cpu-1.

One fresh treatment container runs the seven runs of the baseline tree (4 steps, a
checkpoint every 2) and compares them in the container; the host writes the report.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import docker
import pytest

from diagnostics.transparency import PAIRS
from harness.traincheck.reference import load_frozen
from harness.traincheck.transparency import (
    SAVE_EVERY,
    TRANSPARENCY_STEPS,
    TransparencyReport,
    run_transparency,
)
from harness.traincheck.variants import task_files
from tests.helpers import HARNESS


@pytest.fixture(scope="module")
def report_dir(client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("transparency")
    run_transparency(task_files("moe-router"), ["cpu-1"], command="pytest", dest=dest,
                     client=client, log=lambda _m: None)
    return dest


@pytest.fixture(scope="module")
def report(report_dir: Path) -> TransparencyReport:
    return TransparencyReport.model_validate_json((report_dir / "transparency.json").read_text())


def test_every_comparison_row_is_reported(report: TransparencyReport) -> None:
    cfg = report.configs["cpu-1"]
    expected = {(run, aspect) for run, _q, aspects, _e in PAIRS for aspect in aspects}
    got = [(row.run, row.aspect) for row in cfg.comparisons]
    assert len(got) == len(set(got))
    assert set(got) == expected
    assert {"plain", "traced", "plain_from_traced", "traced_from_plain"} <= set(cfg.runs)
    assert cfg.steps == TRANSPARENCY_STEPS and cfg.save_every == SAVE_EVERY
    for label, run in cfg.runs.items():
        assert run.outcome == "ok", (label, run.cause, run.output_tail)
    assert cfg.runs["traced"].traced and not cfg.runs["plain"].traced
    # The traced runs really were traced (API calls and parameter dumps), the plain ones not.
    for label in ("traced", "traced_from_plain"):
        assert cfg.runs[label].trace_records["0"]["api"] > 0
    assert cfg.runs["traced"].trace_records["0"]["var"] > 0
    assert not cfg.runs["plain"].trace_records
    assert cfg.runs["plain_from_traced"].resume_from == "traced"
    assert cfg.runs["traced_from_plain"].resume_from == "plain"
    assert cfg.costs.plain_s and cfg.costs.traced_s and cfg.costs.traced_over_plain
    # The traced runs collected as the agent's tool collects for this configuration.
    manifest, _ = load_frozen(task_files("moe-router"), "cpu-1")
    assert cfg.selective == (manifest.configs["cpu-1"].collection == "selective")


def test_tracing_does_not_change_a_cpu_run(report: TransparencyReport) -> None:
    rows = {(row.run, row.aspect): row for row in report.configs["cpu-1"].comparisons}
    # Tracing must not change numerics: bitwise equal model, optimizer, losses, RNG.
    for run, aspect in [("traced", "final_model"), ("traced", "final_optimizer"),
                        ("traced", "metrics"), ("traced", "rng"), ("traced", "exceptions"),
                        ("traced", "checkpoint_mid"), ("traced", "checkpoint_final")]:
        row = rows[(run, aspect)]
        assert row.status == "identical", row
        assert row.n_compared > 0
    assert rows[("traced", "final_model")].max_abs_diff == 0
    # A checkpoint written under tracing resumes a plain run and vice versa, exactly.
    for run in ("plain_from_traced", "traced_from_plain"):
        for aspect in ("final_model", "final_optimizer", "metrics", "rng"):
            assert rows[(run, aspect)].status == "identical", rows[(run, aspect)]


def test_a_resumed_traced_run_dumps_parameters(report: TransparencyReport) -> None:
    """Resuming runs a zero-lr optimizer.step() before any forward (DCP initialises the
    optimizer state); the entry must not take that for the first training step."""
    cfg = report.configs["cpu-1"]
    assert cfg.runs["traced_from_plain"].trace_records["0"]["var"] > 0
    assert not cfg.trace_gaps


def test_a_different_run_is_reported_as_differs(report: TransparencyReport) -> None:
    rows = [row for row in report.configs["cpu-1"].comparisons if row.run == "plain_other_seed"]
    assert rows
    for row in rows:
        assert row.expected == "differs"
        assert row.status == "differs", row
        assert row.n_differing > 0 and row.differing
    model = next(row for row in rows if row.aspect == "final_model")
    assert model.max_abs_diff and model.max_abs_diff > 0


def test_report_files(report_dir: Path, report: TransparencyReport) -> None:
    text = (report_dir / "transparency.md").read_text()
    assert "## cpu-1" in text and "Command: `pytest`" in text
    for aspect in ("final_model", "final_optimizer", "checkpoint_final", "rng", "exceptions"):
        assert f"| {aspect} |" in text
    assert "traced / plain" in text
    raw = json.loads((report_dir / "transparency.json").read_text())
    assert raw["task"] == "moe-router" and list(raw["configs"]) == ["cpu-1"]


def _harness(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HARNESS, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


@pytest.mark.parametrize(("args", "env", "words"), [
    (["--task", "nope"], {}, ["unknown task"]),
    (["--task", "moe-router", "--config", "cuda-ddp-2"], {}, ["cuda-ddp-2"]),
    (["--task", "moe-router", "--config", "cpu-1"], {"HARNESS_IMAGE_TAG": "no-such-tag"},
     ["harness-treatment:no-such-tag", "missing"]),
    (["--task", "moe-router", "--config", "cpu-1"],
     {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}, ["Docker daemon"]),
])
def test_errors_are_one_line(args: list[str], env: dict[str, str], words: list[str]) -> None:
    result = _harness("traincheck", "transparency", *args, env=env)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert "Traceback" not in result.stderr
