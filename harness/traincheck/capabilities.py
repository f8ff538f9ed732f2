"""The capability matrix: what TrainCheck observes on a task, decided from probe traces.

One traced probe run of the healthy baseline per CPU configuration; ``python -m diagnostics
inspect`` reads the trace content and rates each observation kind observed / partly / not
with its evidence. Then every graded contract is mapped, through its declared needs
(``hidden/<task>/traincheck_needs.yaml``), to one of:

- ``supported_by_learned_rule``: the calibration detected an oracle-confirmed fault that
  breaks this contract, with a rule from the frozen reference set;
- ``missing_instrumentation``: something the contract needs is not (fully) in the trace;
- ``missing_relation_support``: the trace has what it needs, but no learned rule or no
  TrainCheck relation checks it that way (or none fired on the known faults).

That mapping is the published coverage denominator.
"""

from __future__ import annotations

import fnmatch
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import docker
from pydantic import BaseModel, Field, RootModel

from grading.yamlfile import YamlFileError, load_model
from harness.errors import HarnessError
from harness.infra import images
from harness.records.tasks import ValidationReport
from harness.traincheck.box import RUNS, DiagnosticsBox
from harness.traincheck.reference import RunSummary, run_summary, traced_run, traincheck_version
from harness.traincheck.variants import TaskFiles, build_variants

Status = Literal["observed", "partly", "not"]
KIND_ORDER = ["api_events", "model_parameters", "gradients", "optimizer_state",
              "tensor_representation", "module_outputs", "step_identity", "rank_identity",
              "parallel_wrapping", "file_contents"]


class KindCell(BaseModel):
    status: Status
    evidence: str


class ConfigProbe(BaseModel):
    config: str
    run: RunSummary
    kinds: dict[str, KindCell]
    parameter_names: dict[str, list[str]]
    names_equal_across_ranks: bool
    cross_rank_equal_pairs: list[int]


class ContractNeed(BaseModel):
    needs: list[str] = Field(default_factory=list)
    relation: str
    relation_supported: bool


class ContractCoverage(BaseModel):
    contract: str
    configurations: list[str]
    needs: list[str]
    relation: str
    status: Literal["supported_by_learned_rule", "missing_instrumentation",
                    "missing_relation_support"]
    reason: str
    rules: list[str] = Field(default_factory=list)


class CapabilityMatrix(BaseModel):
    task: str
    command: str
    traincheck_version: str
    probes: dict[str, ConfigProbe]
    stable_names: bool
    stable_names_evidence: str
    contracts: list[ContractCoverage] = Field(default_factory=list)
    calibration_used: bool = False


class ContractNeeds(RootModel[dict[str, ContractNeed]]):
    """``traincheck_needs.yaml``: contract id -> what TrainCheck must observe to cover it."""


def load_needs(files: TaskFiles) -> dict[str, ContractNeed]:
    path = files.hidden / "traincheck_needs.yaml"
    if not path.exists():
        raise HarnessError(f"{path} is missing", "declare each contract's needs for TrainCheck")
    try:
        return load_model(path, ContractNeeds, what="TrainCheck needs file").root
    except YamlFileError as exc:
        raise HarnessError(str(exc), "fix the hidden task's traincheck_needs.yaml") from None


def _contract_configs(files: TaskFiles) -> dict[str, list[str]]:
    """Each graded contract and its declared configurations (from gold validation)."""
    report = ValidationReport.model_validate_json(files.validation_summary.read_text())
    reference = next(v for v in report.variants if v.variant == "reference")
    out = {}
    for contract in report.contracts:
        configs = reference.evidence.get(contract, {}).get("configurations", "")
        out[contract] = [c for c in configs.split(",") if c] or list(files.packet.spec
                                                                       .configurations)
    return out


def contract_coverage(files: TaskFiles, probes: dict[str, ConfigProbe],
                      detected_rules: dict[str, list[str]],
                      faults: dict[str, tuple[list[str], list[str]]] | None = None,
                      ) -> list[ContractCoverage]:
    """``detected_rules``: contract -> rules of calibration detections of faults breaking it;
    ``faults``: contract -> (detected, all) confirmed calibration faults that break it."""
    needs = load_needs(files)
    rows = []
    for contract, configs in _contract_configs(files).items():
        need = next((n for pattern, n in needs.items() if fnmatch.fnmatchcase(contract, pattern)),
                    None)
        if need is None:
            raise HarnessError(f"no TrainCheck needs declared for {contract}",
                               f"add it to {files.hidden / 'traincheck_needs.yaml'}")
        cpu = [c for c in configs if c in probes] or list(probes)
        missing = []
        for item in need.needs:
            kind, strict = item.rstrip("!"), item.endswith("!")
            for config in cpu:
                cell = probes[config].kinds.get(kind)
                status = cell.status if cell is not None else "not"
                if status == "not" or (strict and status != "observed"):
                    missing.append(f"{kind} is {status} on {config}")
        base = ContractCoverage(contract=contract, configurations=configs, needs=need.needs,
                                relation=need.relation, status="missing_relation_support",
                                reason="")
        if contract in detected_rules:
            base.status, base.rules = "supported_by_learned_rule", detected_rules[contract]
            found, breaking = (faults or {}).get(contract, ([], []))
            base.reason = (f"{len(found)} of {len(breaking)} calibration faults that break it "
                           f"detected ({', '.join(found)}"
                           + (f"; missed {', '.join(sorted(set(breaking) - set(found)))}"
                              if set(breaking) - set(found) else "") + ")")
        elif missing:
            base.status, base.reason = "missing_instrumentation", "; ".join(missing)
        elif not need.needs:
            base.reason = "nothing TrainCheck traces speaks to it"
        elif need.relation_supported:
            base.reason = ("TrainCheck has a relation of this shape, but no learned rule fired "
                           "on a known fault that breaks it")
        else:
            base.reason = "no TrainCheck relation checks this (" + need.relation + ")"
        rows.append(base)
    return rows


def probe(files: TaskFiles, configs: list[str], *, client: docker.DockerClient | None = None,
          log: Callable[[str], None] = print) -> tuple[str, dict[str, ConfigProbe]]:
    spec = files.packet.spec.diagnostics
    assert spec is not None
    client = client or images.docker_client()
    probes: dict[str, ConfigProbe] = {}
    version = ""
    with tempfile.TemporaryDirectory(prefix="harness-tc-probe-") as tmp:
        baseline = next(v for v in build_variants(files, Path(tmp), faults=False)
                        if v.name == "baseline")
        for config in configs:
            with DiagnosticsBox(client, f"{files.task}-{config}-probe") as box:
                version = version or traincheck_version(box)
                tree = box.put_tree("baseline", baseline.tree)
                record = traced_run(box, tree, f"{RUNS}/{config}-probe", config,
                                    spec.train_args(feature=False), spec.wall_s)
                if record["outcome"] != "ok":
                    raise HarnessError(f"{config}: probe run {record['outcome']}: "
                                       f"{record['cause']}", "the baseline must trace cleanly")
                seen = box.call(["inspect", "--trace", record["trace_dir"]], timeout_s=600)
                probes[config] = ConfigProbe(
                    config=config, run=run_summary("baseline", spec.seed, record),
                    kinds={k: KindCell.model_validate(v) for k, v in seen["kinds"].items()},
                    parameter_names={str(k): v for k, v in seen["parameter_names"].items()},
                    names_equal_across_ranks=seen["names_equal_across_ranks"],
                    cross_rank_equal_pairs=seen["cross_rank_equal_pairs"])
                log(f"{config}: probe {record['wall_s']:.0f} s; " + ", ".join(
                    f"{k}={v.status}" for k, v in probes[config].kinds.items()))
    return version, probes


def stable_names(probes: dict[str, ConfigProbe]) -> tuple[bool, str]:
    sets = {(c, r): tuple(names) for c, p in probes.items() for r, names in
            p.parameter_names.items()}
    distinct = set(sets.values())
    if len(distinct) == 1:
        names = next(iter(distinct))
        return True, (f"the same {len(names)} parameter names (e.g. {names[0]!r}) on every rank "
                      f"of {', '.join(probes)}")
    return False, (f"{len(distinct)} different name sets across (configuration, rank): "
                   f"{sorted(sets)}")


def render_markdown(matrix: CapabilityMatrix) -> str:
    configs = list(matrix.probes)
    lines = [f"# TrainCheck capability matrix: {matrix.task}", "",
             f"Made by `{matrix.command}` with TrainCheck {matrix.traincheck_version}. Each cell "
             "is decided from the content of a traced probe run of the healthy baseline "
             "(`python -m diagnostics inspect`), not from documentation.", "",
             "| observation | " + " | ".join(configs) + " |",
             "|---" * (len(configs) + 1) + "|"]
    for kind in KIND_ORDER:
        cells = [matrix.probes[c].kinds[kind].status if kind in matrix.probes[c].kinds else "-"
                 for c in configs]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += ["", "## Evidence", ""]
    for config in configs:
        p = matrix.probes[config]
        lines.append(f"### {config} (probe {p.run.wall_s:.0f} s)")
        for kind in KIND_ORDER:
            if kind in p.kinds:
                lines.append(f"- **{kind}** ({p.kinds[kind].status}): {p.kinds[kind].evidence}")
        lines.append("")
    lines += [f"Stable logical parameter names: **{'yes' if matrix.stable_names else 'NO'}**: "
              f"{matrix.stable_names_evidence}.", "",
              "## Graded contracts and TrainCheck support (coverage denominator)", ""]
    counts: dict[str, int] = {}
    for row in matrix.contracts:
        counts[row.status] = counts.get(row.status, 0) + 1
    lines.append(", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
                 + f" (of {len(matrix.contracts)} contracts"
                 + ("" if matrix.calibration_used else "; calibration not yet run") + ").")
    lines += ["", "| contract | configurations | status | why | rules |", "|---|---|---|---|---|"]
    for row in matrix.contracts:
        lines.append(f"| `{row.contract}` | {','.join(row.configurations)} | {row.status} | "
                     f"{row.reason} | {'; '.join(row.rules) or '-'} |")
    return "\n".join(lines) + "\n"
