"""The transparency check: does tracing change a healthy run?

Per task and CPU configuration, in one fresh treatment container, the in-container runner
(``python -m diagnostics transparency``, see ``diagnostics/transparency.py``) trains the
task's BASELINE tree (the packet's repo: the healthy code TrainCheck learns its invariants
from) with the packet's diagnostic arguments, ``TRANSPARENCY_STEPS`` steps and a checkpoint
every ``SAVE_EVERY`` steps, as seven runs: plain, traced, two controls (a plain repeat and a
plain resume from plain's mid checkpoint), the two cross resumes (plain from the traced run's
mid checkpoint, traced from plain's) and a sensitivity control (plain with seed + 1). Every
run is compared with the plain one on exceptions, per-step metrics, the summary, the final
model and optimizer state, the DCP checkpoints' contents and the per-rank RNG states.

Each row is ``identical``, ``differs`` (with numbers) or ``failed`` (with the cause), and the
report keeps every row: a deviation is a finding to read, never turned into a pass.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import docker
from pydantic import BaseModel, Field

from grading.hashing import reference_tree_sha256
from harness.infra import images
from harness.paths import REPO_ROOT
from harness.traincheck.box import RUNS, DiagnosticsBox
from harness.traincheck.reference import ReferenceManifest, load_frozen, traincheck_version
from harness.traincheck.variants import TaskFiles, build_variants

TRANSPARENCY_STEPS = 4
SAVE_EVERY = 2
# plain, traced, 2 controls, 2 cross resumes, the sensitivity control (diagnostics.transparency)
RUN_ORDER = ("plain", "traced", "plain_repeat", "plain_from_plain", "plain_from_traced",
             "traced_from_plain", "plain_other_seed")
N_RUNS = len(RUN_ORDER)
VARIANT = "baseline"
Status = Literal["identical", "differs", "failed"]

# The pairs in the order the report shows them, with a short name for tables.
PAIR_NAMES = {
    "traced": "traced",
    "plain_repeat": "control: plain again",
    "plain_from_traced": "plain resumed from traced ckpt",
    "traced_from_plain": "traced resumed from plain ckpt",
    "plain_from_plain": "control: plain resumed from plain ckpt",
    "plain_other_seed": "sensitivity: plain, seed + 1",
}


class RunRecord(BaseModel):
    traced: bool
    seed: int
    resume_from: str | None = None
    resume_step: int | None = None
    outcome: str
    cause: str = ""
    wall_s: float | None = None
    exceptions: list[str] = Field(default_factory=list)
    warnings: int = 0
    checkpoints: list[str] = Field(default_factory=list)
    train_args: list[str] = Field(default_factory=list)
    # rank -> {"api": records, "var": records} of a traced run's TrainCheck trace
    trace_records: dict[str, dict[str, int]] = Field(default_factory=dict)
    output_tail: str = ""


class Difference(BaseModel):
    key: str
    max_abs_diff: float | None = None
    note: str = ""


class Comparison(BaseModel):
    """One row: ``run`` against the plain run on one aspect."""

    pair: str
    run: str
    question: str
    aspect: str
    expected: Literal["identical", "differs"]
    status: Status
    n_compared: int = 0
    n_differing: int = 0
    max_abs_diff: float | None = None
    differing: list[Difference] = Field(default_factory=list)
    only_in_a: list[str] = Field(default_factory=list)
    only_in_b: list[str] = Field(default_factory=list)
    detail: str = ""

    @property
    def as_expected(self) -> bool:
        return self.status == self.expected


class Costs(BaseModel):
    plain_s: float | None
    traced_s: float | None
    traced_over_plain: float | None
    resumed_plain_s: float | None  # plain_from_traced
    resumed_traced_s: float | None  # traced_from_plain
    resumed_traced_over_plain: float | None
    container_s: float  # the whole check: seven runs and the comparisons
    compare_s: float


class ConfigTransparency(BaseModel):
    config: str
    command: str
    generated_at: str
    variant: str
    traincheck_version: str
    torch_version: str
    image_id: str = ""  # the treatment image the container ran (diagnostics code included)
    packet_repo_sha256: str
    diagnostics_sha256: str
    train_args: list[str]
    steps: int
    save_every: int
    mid_step: int
    final_step: int
    # The traced runs also observed the training state, as the resume probe's runs do.
    observe_state: bool = False
    # The traced runs collected selectively for the frozen invariants, as the agent's tool
    # does for this configuration (the frozen reference's ``collection``).
    selective: bool = False
    runs: dict[str, RunRecord]
    comparisons: list[Comparison]
    costs: Costs

    @property
    def deviations(self) -> list[Comparison]:
        """Rows that did not come out as expected (a sensitivity row that did not differ too)."""
        return [c for c in self.comparisons if not c.as_expected]

    @property
    def trace_gaps(self) -> list[str]:
        """Traced runs whose trace misses a kind of record on some rank (not a numeric
        deviation: what TrainCheck could observe in that run, stated next to the results)."""
        gaps = []
        for label, run in self.runs.items():
            if not run.traced or run.outcome != "ok":
                continue
            # A selective run records only the calls its selection names, maybe none.
            kinds = ("var",) if self.selective else ("api", "var")
            for rank, counts in sorted(run.trace_records.items()):
                missing = [kind for kind in kinds if not counts.get(kind)]
                if missing:
                    gaps.append(f"{label}: rank {rank} has no "
                                f"{' and no '.join(k.upper() for k in missing)} trace records")
        return gaps


class TransparencyReport(BaseModel):
    task: str
    configs: dict[str, ConfigTransparency]

    @property
    def deviations(self) -> list[tuple[str, Comparison]]:
        return [(name, row) for name, cfg in self.configs.items() for row in cfg.deviations]


def transparency_args(files: TaskFiles) -> list[str]:
    """The packet's diagnostic baseline arguments with a step count that has a mid checkpoint."""
    spec = files.packet.spec.diagnostics
    assert spec is not None
    args = spec.train_args(feature=False)
    i = args.index("--steps")
    return [*args[:i + 1], str(TRANSPARENCY_STEPS), *args[i + 2:]]


def _run_rank(label: str) -> int:
    return RUN_ORDER.index(label) if label in RUN_ORDER else len(RUN_ORDER)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def check_config(box: DiagnosticsBox, files: TaskFiles, tree: str, config: str, *,
                 command: str, version: str, image_id: str = "") -> ConfigTransparency:
    spec = files.packet.spec.diagnostics
    assert spec is not None
    args = transparency_args(files)
    out = f"{RUNS}/{config}-transparency"
    observe = ["--observe-state"] if spec.resume is not None else []
    manifest_path = files.reports / "reference" / "manifest.json"
    if manifest_path.exists() and config in ReferenceManifest.model_validate_json(
            manifest_path.read_text()).configs:
        manifest, frozen = load_frozen(files, config)
        if manifest.configs[config].collection == "selective":
            box.sandbox.put_file(RUNS, f"{config}.selection.json", frozen.invariants)
            observe += ["--invariants", f"{RUNS}/{config}.selection.json"]
    result = box.call(["transparency", "--src", tree, "--out", out, "--config", config,
                       "--save-every", str(SAVE_EVERY), "--wall-s", str(spec.wall_s),
                       *observe, "--", *args], timeout_s=N_RUNS * spec.wall_s + 600)
    # In the order the runner ran them (its JSON comes with sorted keys).
    ordered = sorted(result["runs"].items(), key=lambda kv: _run_rank(kv[0]))
    runs = {label: RunRecord.model_validate({k: v for k, v in record.items()
                                             if k in RunRecord.model_fields})
            for label, record in ordered}
    comparisons = [Comparison.model_validate(row) for row in result["comparisons"]]
    plain, traced = runs["plain"].wall_s, runs["traced"].wall_s
    resumed_plain, resumed_traced = (runs["plain_from_traced"].wall_s,
                                     runs["traced_from_plain"].wall_s)
    return ConfigTransparency(
        config=config, command=command,
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"), variant=VARIANT,
        traincheck_version=version, torch_version=result["torch_version"], image_id=image_id,
        packet_repo_sha256=reference_tree_sha256(files.packet.repo),
        diagnostics_sha256=reference_tree_sha256(REPO_ROOT / "diagnostics"), train_args=args,
        steps=result["steps"], save_every=result["save_every"], mid_step=result["mid_step"],
        final_step=result["final_step"], observe_state=bool(result.get("observe_state")),
        selective=bool(result.get("selective")),
        runs=runs, comparisons=comparisons,
        costs=Costs(plain_s=plain, traced_s=traced, traced_over_plain=_ratio(traced, plain),
                    resumed_plain_s=resumed_plain, resumed_traced_s=resumed_traced,
                    resumed_traced_over_plain=_ratio(resumed_traced, resumed_plain),
                    container_s=round(result["runs_s"] + result["compare_s"], 1),
                    compare_s=result["compare_s"]))


def run_transparency(files: TaskFiles, configs: list[str], *, command: str,
                     dest: Path | None = None, client: docker.DockerClient | None = None,
                     log: Callable[[str], None] = print) -> TransparencyReport:
    """Check ``configs`` and write ``transparency.{json,md}`` under ``dest`` (default: the
    task's reports folder); configurations not checked now keep their previous results."""
    client = client or images.docker_client()
    images.image_id(client, "treatment")  # one clear error before any work when it is missing
    dest = dest or files.reports
    dest.mkdir(parents=True, exist_ok=True)
    json_path = dest / "transparency.json"
    previous = (TransparencyReport.model_validate_json(json_path.read_text())
                if json_path.exists() else None)
    results: dict[str, ConfigTransparency] = dict(previous.configs) if previous else {}
    order = {name: i for i, name in enumerate(("cpu-1", "gloo-ddp-2", "gloo-fsdp-2"))}
    report = TransparencyReport(task=files.task, configs={})
    with tempfile.TemporaryDirectory(prefix="harness-tc-transp-") as tmp:
        variants = {v.name: v for v in build_variants(files, Path(tmp), faults=False)}
        for config in configs:
            log(f"{files.task} {config}: seven runs of the {VARIANT} in a fresh container")
            with DiagnosticsBox(client, f"{files.task}-{config}-transp") as box:
                version = traincheck_version(box)
                tree = box.put_tree(VARIANT, variants[VARIANT].tree)
                container = box.sandbox.container
                image_id = str(container.attrs.get("Image", "")) if container else ""
                result = check_config(box, files, tree, config, command=command,
                                      version=version, image_id=image_id)
            results[config] = result
            log(f"{files.task} {config}: {len(result.deviations)} deviation(s); plain "
                f"{_num(result.costs.plain_s)} s, traced {_num(result.costs.traced_s)} s")
            # Written after every configuration: a later failure keeps what is done.
            report = TransparencyReport(task=files.task, configs=dict(
                sorted(results.items(), key=lambda kv: (order.get(kv[0], 99), kv[0]))))
            json_path.write_text(report.model_dump_json(indent=1) + "\n")
            (dest / "transparency.md").write_text(render_markdown(report))
    return report


# --- rendering ------------------------------------------------------------------------------


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def status_cell(row: Comparison) -> str:
    if row.status == "identical":
        text = "identical"
    elif row.status == "differs":
        text = f"differs ({row.n_differing}/{row.n_compared}, max {_num(row.max_abs_diff)})"
    else:
        text = "failed"
    if not row.as_expected:
        text += " **(deviation)**" if row.expected == "identical" else " **(NOT detected)**"
    return text


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _detail(row: Comparison) -> str:
    parts = [row.detail] if row.detail else []
    if row.status == "identical" and row.aspect != "exceptions":
        parts.append(f"{row.n_compared} entries, all bitwise equal")
    if row.status == "differs" and row.differing:
        shown = ", ".join(f"`{d.key}` {_num(d.max_abs_diff)}" for d in row.differing[:3])
        more = row.n_differing - min(3, len(row.differing))
        parts.append(shown + (f" (+{more} more)" if more > 0 else ""))
    return _cell("; ".join(parts))


def render_markdown(report: TransparencyReport) -> str:
    lines = [
        f"# TrainCheck transparency: {report.task}",
        "",
        "Does tracing change what a healthy run computes? Generated by "
        "`harness traincheck transparency` (the command line of each configuration is below); "
        "do not edit by hand.",
        "",
        f"Code: the task's **{VARIANT}** tree (the packet's repo, the healthy code TrainCheck "
        "learns its invariants from), with the packet's diagnostic arguments and a checkpoint "
        "every few steps. Every run is compared with the plain run: `exceptions` (outcome and "
        "exception lines of the output), `metrics` (every field of every step of "
        "`metrics.jsonl`; a resumed run from the resume step on), `summary` (`summary.json` "
        "without timings and `resumed_from`), `final_model` / `final_optimizer` "
        "(`final_state.pt`), `checkpoint_mid` / `checkpoint_final` (the whole DCP checkpoint, "
        "loaded offline: model, optimizer, scheduler, data position, per-rank RNG) and `rng` "
        "(the per-rank RNG states of the final checkpoint). `identical` means bitwise equal; "
        "`differs (n/m, max d)` gives the differing leaves out of those compared and the "
        "largest absolute difference; `failed` gives the cause. Two controls (a plain run "
        "again, a plain resume from a plain checkpoint) say whether plain runs are exact at "
        "all; the sensitivity control (seed + 1) must differ, showing the comparison can see "
        "a change. Rows that did not come out as expected are marked; none is hidden. "
        "The baselines train without dropout, so no training step draws from torch's global "
        "generator: the `rng` rows (the saved per-rank generator states) are what shows that "
        "tracing neither draws from nor reseeds it.",
        "",
        "| configuration | deviations | sensitivity detected | trace gaps | plain s | "
        "traced s | traced / plain | resumed plain s | resumed traced s | container s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, cfg in report.configs.items():
        sens = [c for c in cfg.comparisons if c.expected == "differs"]
        devs = [c for c in cfg.deviations if c.expected == "identical"]
        c = cfg.costs
        lines.append(
            f"| {name} | {len(devs) or 'none'} | "
            f"{sum(r.as_expected for r in sens)}/{len(sens)} | "
            f"{len(cfg.trace_gaps) or 'none'} | {_num(c.plain_s)} | "
            f"{_num(c.traced_s)} | {_num(c.traced_over_plain)} | {_num(c.resumed_plain_s)} | "
            f"{_num(c.resumed_traced_s)} | {_num(c.container_s)} |")
    for name, cfg in report.configs.items():
        lines += [
            "", f"## {name}", "",
            f"Command: `{cfg.command}` ({cfg.generated_at}; TrainCheck {cfg.traincheck_version}, "
            f"torch {cfg.torch_version}; treatment image `{cfg.image_id[7:19] or '?'}`; "
            f"packet repo sha256 `{cfg.packet_repo_sha256[:12]}`, host diagnostics sha256 "
            f"`{cfg.diagnostics_sha256[:12]}`).",
            "",
            f"Training arguments: `{' '.join(cfg.train_args)}`; checkpoints every "
            f"{cfg.save_every} steps; resumes start from the step-{cfg.mid_step} checkpoint; "
            f"the final checkpoint is step {cfg.final_step}"
            + ("; the traced runs also observe the training state (optimizer state, buffers, "
               "generators, learning rate), as the resume probe's runs do" if cfg.observe_state
               else "")
            + ("; the traced runs collect selectively (only the torch calls the frozen "
               "invariants name are recorded), as the agent's tool does for this "
               "configuration." if cfg.selective else "."),
            "",
            "| run | traced | trace records (rank: API/VAR) | seed | resumed from | outcome | "
            "wall s | exceptions | checkpoints |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for label, run in sorted(cfg.runs.items(), key=lambda kv: _run_rank(kv[0])):
            resumed = f"{run.resume_from} step {run.resume_step}" if run.resume_from else "-"
            outcome = run.outcome + (f": {run.cause}" if run.cause else "")
            records = ", ".join(f"{rank}: {n.get('api', 0)}/{n.get('var', 0)}"
                                for rank, n in sorted(run.trace_records.items())) or "-"
            lines.append(f"| {label} | {'yes' if run.traced else 'no'} | {records} | {run.seed} | "
                         f"{resumed} | {_cell(outcome)} | {_num(run.wall_s)} | "
                         f"{', '.join(run.exceptions) or 'none'} | "
                         f"{', '.join(run.checkpoints) or '-'} |")
        lines += ["", "| compared with plain | aspect | expected | result | detail |",
                  "| --- | --- | --- | --- | --- |"]
        for row in cfg.comparisons:
            lines.append(f"| {PAIR_NAMES.get(row.run, row.run)} | {row.aspect} | "
                         f"{row.expected} | {status_cell(row)} | {_detail(row)} |")
        gaps = cfg.trace_gaps
        if gaps:
            lines += ["", "Trace gaps (what TrainCheck recorded, not a numeric result): "
                      + "; ".join(gaps) + ". A traced run without VAR records had no "
                      "parameter dumps, so it was traced for API calls only."]
        failed_runs = [(label, run) for label, run in cfg.runs.items() if run.output_tail]
        for label, run in failed_runs:
            lines += ["", f"Output tail of `{label}`:", "", "```",
                      run.output_tail.strip()[-1500:], "```"]
    return "\n".join(lines) + "\n"


def report_digest(report: TransparencyReport) -> dict[str, Any]:
    """config -> aspect rows, for a short terminal table."""
    return {name: {(row.run, row.aspect): row for row in cfg.comparisons}
            for name, cfg in report.configs.items()}
