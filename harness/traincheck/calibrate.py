"""Track 1 calibration: known faults vs the independent oracle vs TrainCheck, with costs.

For each CPU configuration, in one fresh treatment container, at held-out seeds (the frozen
reference was learned and its policy decided at other seeds, ``reference.py``):

- a plain run of the baseline (the cost denominator);
- traced runs of the healthy baseline and of the reference solution at two held-out seeds,
  checked against the frozen invariants: any violation beyond the healthy control set is a
  false alarm;
- a traced run of every calibration fault (reference + fault patch) at the first held-out
  seed, checked the same way: the TrainCheck verdict counts violations beyond the control set
  AND beyond those of the matching healthy runs (the reference and the baseline at the same
  seed: a rule that fires on healthy code there is noise, not a detection), naming the
  violated rules.

The oracle verdict is the grader's, recorded by gold validation (``reports/validation``), and
is tied to the fault patch by its hash. Held-out repair variants are never used here.
``calibrate(..., regressions=True)`` runs the oracle's regressions (``regressions/<id>/``) in
the faults' place, as held-out variants: nothing of the diagnostic was decided on them, and
their table is written apart (``heldout-regressions.md``).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import docker
from pydantic import BaseModel, Field

from grading.hashing import file_sha256
from grading.packet import ResumeProbeSpec
from harness.errors import HarnessError
from harness.infra import images
from harness.paths import REPO_ROOT
from harness.records.tasks import FAILING, ValidationReport
from harness.traincheck.box import RUNS, DiagnosticsBox
from harness.traincheck.reference import (
    ReferenceManifest,
    RunSummary,
    Violation,
    load_frozen,
    overlap_args,
    resume_check,
    resume_probe,
    run_summary,
    traced_run,
)
from harness.traincheck.variants import TaskFiles, Variant, build_variants

# The held-out seed of the faults and the first healthy runs. Offsets 1 and 2 were the
# held-out seeds until 2026-12-06; their false alarms decided the relation set (reference.py,
# RELATIONS), so they are no longer held out and calibration moved to seeds never looked at.
CALIBRATION_SEED_OFFSET = 3
# The second held-out seed: healthy runs only, so that false alarms are measured at two seeds
# the applicability policy was not decided on.
SECOND_HEALTHY_SEED_OFFSET = 4
CHECK_WALL_S = 900.0

Verdict = Literal["detected", "not_detected", "false_alarm", "clean", "program_crash",
                  "program_hang", "diagnostic_failure"]


# Variants the oracle fails on purpose: a TrainCheck violation on one is a detection.
KNOWN_BAD = ("fault", "regression")


def known_bad(kind: str) -> bool:
    return kind in KNOWN_BAD


class OracleVerdict(BaseModel):
    verdict: str  # the grader's verdict on this variant in gold validation
    failing_contracts: list[str]
    confirmed: bool  # every contract the fault documents breaking failed, nothing else
    source: str


class CalibrationRow(BaseModel):
    variant: str
    kind: str
    config: str
    seed: int
    oracle: OracleVerdict | None
    run: RunSummary
    check_outcome: str
    violations_total: int = 0
    beyond_control: list[Violation] = Field(default_factory=list)
    beyond_matching: list[Violation] = Field(default_factory=list)
    verdict: Verdict
    collect_s: float
    check_s: float = 0.0
    # For a detection on a multi-rank run: the detected rules that checking each rank's trace
    # on its own does NOT find, i.e. that need the cross-rank aggregation.
    cross_rank_only: list[str] | None = None
    # The resume probe (straight run and its resume), where the reference has resume rules;
    # its violations are among the row's (relation ResumePreservation).
    resume_outcome: str | None = None
    resume_cause: str = ""
    resume_s: float = 0.0


class ConfigCalibration(BaseModel):
    config: str
    plain_s: float
    rows: list[CalibrationRow]
    # One diagnostic answer of the healthy baseline (collect + check, and the resume probe
    # where there is one) over the plain run.
    cost_ratio: float


class CalibrationSummary(BaseModel):
    faults_confirmed: int
    faults_detected: int
    detected: dict[str, list[str]]  # fault -> configurations where TrainCheck detected it
    program_failures: dict[str, list[str]]  # fault -> configurations where the run died
    false_alarms: int
    controls: int
    unsupported_contracts: list[str]


class CalibrationReport(BaseModel):
    task: str
    command: str
    seed: int
    reference_manifest_sha256: str
    configs: dict[str, ConfigCalibration]
    summary: CalibrationSummary
    # What the known-bad rows are: the calibration faults, or the oracle regressions run as
    # held-out variants (nothing of the diagnostic was decided on them).
    variants: Literal["faults", "regressions"] = "faults"


def oracle_verdicts(files: TaskFiles, variants: list[Variant]) -> dict[str, OracleVerdict]:
    """The grader's verdicts from the committed gold validation summary."""
    path = files.validation_summary
    if not path.exists():
        raise HarnessError(f"no gold validation summary for {files.task}",
                           f"run `harness validate --task {files.task}` first")
    report = ValidationReport.model_validate_json(path.read_text())
    by_name = {v.variant: v for v in report.variants}
    verdicts = {}
    for variant in variants:
        graded = by_name.get(variant.name)
        if graded is None:
            continue
        failing = sorted(c for c, o in graded.outcomes.items() if o in FAILING)
        verdicts[variant.name] = OracleVerdict(
            verdict=graded.verdict, failing_contracts=failing,
            confirmed=not graded.mismatches and (not known_bad(variant.kind) or bool(failing)),
            source=str(path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path))
    return verdicts


def _violations(result: dict[str, Any]) -> list[Violation]:
    return [Violation.model_validate(v) for v in result.get("violations", [])]


def calibrate_config(box: DiagnosticsBox, files: TaskFiles, variants: list[Variant],
                     trees: dict[str, str], config: str, oracle: dict[str, OracleVerdict],
                     log: Callable[[str], None]) -> ConfigCalibration:
    spec = files.packet.spec.diagnostics
    assert spec is not None
    seed = spec.seed + CALIBRATION_SEED_OFFSET
    manifest, frozen = load_frozen(files, config)
    box.sandbox.put_file("/workspace", f"reference/{config}.invariants.json", frozen.invariants)
    invariants = f"/workspace/reference/{config}.invariants.json"
    # Collected and checked as the agent's tool collects and checks this configuration.
    selective = manifest.configs[config].collection == "selective"
    overlap = overlap_args(manifest.configs[config].liveness_overlap)
    resume_rules = None
    if frozen.resume_rules is not None:
        if spec.resume is None:
            raise HarnessError(f"{config}: the reference has resume rules but the packet "
                               "declares no diagnostics.resume", "rebuild the reference")
        box.sandbox.put_file("/workspace", f"reference/{config}.resume.json",
                             frozen.resume_rules)
        resume_rules = f"/workspace/reference/{config}.resume.json"
    control_ids = set(json.loads(frozen.control)["violated_ids"])

    plain = traced_run(box, trees["baseline"], f"{RUNS}/{config}-plain", config,
                       spec.train_args(feature=False, seed=seed), spec.wall_s, traced=False)
    if plain["outcome"] != "ok":
        raise HarnessError(f"{config}: the plain baseline run failed ({plain['cause']})",
                           "a healthy baseline must run before calibration")
    rows: list[CalibrationRow] = []
    healthy: set[str] = set()  # what the healthy runs at the faults' seed violate
    second = spec.seed + SECOND_HEALTHY_SEED_OFFSET
    # Baseline and reference come first, then the faults, then the healthy runs again at the
    # second held-out seed.
    plan = [(v, seed) for v in variants] + [(v, second) for v in variants
                                                   if not known_bad(v.kind)]
    for variant, run_seed in plan:
        name = variant.name.replace(":", "-") + ("" if run_seed == seed else f"-s{run_seed}")
        record = traced_run(box, trees[variant.name], f"{RUNS}/{config}-{name}", config,
                            spec.train_args(feature=variant.feature, seed=run_seed),
                            spec.wall_s, selective=invariants if selective else None)
        row: dict[str, Any] = {"variant": variant.name, "kind": variant.kind, "config": config,
                               "seed": run_seed, "oracle": oracle.get(variant.name),
                               "run": run_summary(variant.name, run_seed, record),
                               "collect_s": record["wall_s"]}
        if record["outcome"] != "ok":
            verdict: Verdict = ("program_hang" if record["outcome"] == "hang" else
                                "program_crash" if record["outcome"] == "crash" else
                                "diagnostic_failure")
            rows.append(CalibrationRow(**row, check_outcome="not_run", verdict=verdict))
            log(f"{config} {variant.name}: {verdict} ({record['cause']})")
            box.clean(f"{RUNS}/{config}-{name}")
            continue
        result = box.call(["check", "--trace", record["trace_dir"], "--invariants", invariants,
                           "--out", f"{RUNS}/{config}-{name}-chk", "--wall-s",
                           str(CHECK_WALL_S), *overlap], timeout_s=CHECK_WALL_S + 60)
        row["check_s"] = result["wall_s"]
        if result["outcome"] != "ok":
            rows.append(CalibrationRow(**row, check_outcome=result["outcome"],
                                       verdict="diagnostic_failure"))
            log(f"{config} {variant.name}: checker {result['outcome']}")
            box.clean(f"{RUNS}/{config}-{name}")
            continue
        found = _violations(result)
        if resume_rules is not None:
            assert spec.resume is not None
            outcome, cause, seconds, broken = _probed(
                box, trees[variant.name], f"{RUNS}/{config}-{name}-resume", config,
                spec.train_args(feature=variant.feature, seed=run_seed), spec.resume,
                spec.wall_s, resume_rules, selective=selective)
            row.update(resume_outcome=outcome, resume_cause=cause, resume_s=seconds)
            found += broken
        beyond_control = [v for v in found if v.id not in control_ids]
        if known_bad(variant.kind):
            beyond_matching = _beyond(beyond_control, healthy)
            verdict = "detected" if beyond_matching else "not_detected"
        else:
            if run_seed == seed:
                healthy |= {v.id for v in beyond_control}
            beyond_matching = beyond_control
            verdict = "false_alarm" if beyond_control else "clean"
        verdict = _with_probe_failure(verdict, row.get("resume_outcome"))
        if verdict == "detected" and len(record.get("ranks") or {}) > 1:
            alone = box.call(["check-per-rank", "--trace", record["trace_dir"], "--invariants",
                              invariants, "--out", f"{RUNS}/{config}-{name}-per-rank",
                              *overlap], timeout_s=2 * CHECK_WALL_S + 60)
            row["cross_rank_only"] = sorted({f"{v.rule} [{v.relation}]" for v in beyond_matching
                                             if v.id not in set(alone["violated_ids"])})
        rows.append(CalibrationRow(**row, check_outcome="ok", violations_total=len(found),
                                   beyond_control=beyond_control,
                                   beyond_matching=beyond_matching, verdict=verdict))
        box.clean(f"{RUNS}/{config}-{name}")
        log(f"{config} {variant.name}: {verdict} ({len(found)} violations, "
            f"{len(beyond_matching)} beyond control/healthy runs; collect "
            f"{record['wall_s']:.0f} s, check {result['wall_s']:.0f} s)")
    return ConfigCalibration(config=config, plain_s=plain["wall_s"], rows=rows,
                             cost_ratio=_cost_ratio(rows, plain["wall_s"]))


def _cost_ratio(rows: list[CalibrationRow], plain_s: float) -> float:
    """One diagnostic answer on the healthy baseline (traced run, check, resume probe) over
    the plain run."""
    baseline = next(r for r in rows if r.variant == "baseline")
    return round((baseline.collect_s + baseline.check_s + baseline.resume_s) / plain_s, 2)


def _probed(box: DiagnosticsBox, tree: str, out: str, config: str, args: list[str],
            spec: ResumeProbeSpec, wall_s: float, rules: str, *, selective: bool,
            ) -> tuple[str, str, float, list[Violation]]:
    """A resume probe checked against the frozen rules: (outcome, cause, seconds, the rules
    it breaks); a probe that did not finish breaks nothing and says why."""
    probed = resume_probe(box, tree, out, config, args, spec, wall_s, selective=selective)
    broken = (_violations(resume_check(box, out, rules)) if probed["outcome"] == "ok"
              else [])
    return probed["outcome"], probed["cause"], probed["wall_s"], broken


def _beyond(violations: list[Violation], healthy: set[str]) -> list[Violation]:
    return [v for v in violations if v.id not in healthy]


def _with_probe_failure(verdict: Verdict, resume_outcome: str | None) -> Verdict:
    """A resume probe whose program crashed or hung is that outcome, unless the row's
    violations already decided it (a detection or a false alarm stands)."""
    if resume_outcome in (None, "ok") or verdict not in ("not_detected", "clean"):
        return verdict
    return ("program_hang" if resume_outcome == "hang" else
            "program_crash" if resume_outcome in ("crash", "no_checkpoint") else
            "diagnostic_failure")


def judge(cal: ConfigCalibration) -> ConfigCalibration:
    """Re-derive fault verdicts from recorded rows (``calibrate --rejudge``), with the rule the
    run applies: violations beyond the control set and beyond every violation of the
    healthy runs (baseline and reference) of the same configuration and seed."""
    healthy: dict[int, set[str]] = {}
    for r in cal.rows:
        if not known_bad(r.kind):
            healthy.setdefault(r.seed, set()).update(v.id for v in r.beyond_control)
    for row in cal.rows:
        if not known_bad(row.kind) or row.check_outcome != "ok":
            continue
        row.beyond_matching = _beyond(row.beyond_control, healthy.get(row.seed, set()))
        row.verdict = _with_probe_failure(
            "detected" if row.beyond_matching else "not_detected", row.resume_outcome)
        if row.cross_rank_only is not None:
            kept = {f"{v.rule} [{v.relation}]" for v in row.beyond_matching}
            row.cross_rank_only = ([r for r in row.cross_rank_only if r in kept]
                                   if row.verdict == "detected" else None)
    return cal


def summarise(configs: dict[str, ConfigCalibration],
              unsupported: list[str]) -> CalibrationSummary:
    detected: dict[str, list[str]] = {}
    died: dict[str, list[str]] = {}
    confirmed: set[str] = set()
    false_alarms = controls = 0
    for cal in configs.values():
        for row in cal.rows:
            if known_bad(row.kind):
                if row.oracle is not None and row.oracle.confirmed:
                    confirmed.add(row.variant)
                if row.verdict == "detected":
                    detected.setdefault(row.variant, []).append(cal.config)
                if row.verdict in ("program_crash", "program_hang"):
                    died.setdefault(row.variant, []).append(cal.config)
            else:
                controls += 1
                false_alarms += row.verdict == "false_alarm"
    return CalibrationSummary(
        faults_confirmed=len(confirmed),
        faults_detected=len(set(detected) & confirmed),
        detected=dict(sorted(detected.items())), program_failures=dict(sorted(died.items())),
        false_alarms=false_alarms, controls=controls, unsupported_contracts=unsupported)


def _broken_contracts(
    report: CalibrationReport,
) -> Iterator[tuple[str, ConfigCalibration, CalibrationRow]]:
    """(contract, configuration, row) for each contract an oracle-confirmed fault breaks."""
    for cal in report.configs.values():
        for row in cal.rows:
            if row.kind == "fault" and row.oracle is not None and row.oracle.confirmed:
                for contract in row.oracle.failing_contracts:
                    yield contract, cal, row


def detections_by_contract(report: CalibrationReport) -> dict[str, list[str]]:
    """Contract -> the rules that fired on confirmed faults whose oracle verdict fails it."""
    rules: dict[str, set[str]] = {}
    for contract, cal, row in _broken_contracts(report):
        if row.verdict == "detected":
            rules.setdefault(contract, set()).update(
                f"{v.rule} [{v.relation}] on {cal.config} ({row.variant})"
                for v in row.beyond_matching)
    return {k: sorted(v) for k, v in rules.items()}


def fault_coverage(report: CalibrationReport) -> dict[str, tuple[list[str], list[str]]]:
    """Contract -> (confirmed faults that break it and were detected, all that break it)."""
    detected: dict[str, set[str]] = {}
    breaking: dict[str, set[str]] = {}
    for contract, _cal, row in _broken_contracts(report):
        breaking.setdefault(contract, set()).add(row.variant)
        if row.verdict == "detected":
            detected.setdefault(contract, set()).add(row.variant)
    return {c: (sorted(detected.get(c, set())), sorted(f)) for c, f in breaking.items()}


def calibrate(files: TaskFiles, configs: list[str], *, command: str,
              unsupported: list[str] | None = None,
              client: docker.DockerClient | None = None, regressions: bool = False,
              log: Callable[[str], None] = print) -> CalibrationReport:
    """Every known-bad variant (the calibration faults, or with ``regressions`` the oracle
    regressions instead) and the healthy controls, per configuration."""
    spec = files.packet.spec.diagnostics
    assert spec is not None
    client = client or images.docker_client()
    manifest_path = files.reports / "reference" / "manifest.json"
    results: dict[str, ConfigCalibration] = {}
    with tempfile.TemporaryDirectory(prefix="harness-calibrate-") as tmp:
        variants = build_variants(files, Path(tmp), faults=not regressions,
                                  regressions=regressions)
        oracle = oracle_verdicts(files, variants)
        for config in configs:
            load_frozen(files, config)  # fail before starting anything if it is missing
        for config in configs:
            with DiagnosticsBox(client, f"{files.task}-{config}-cal") as box:
                trees = {v.name: box.put_tree(v.name.replace(":", "-"), v.tree)
                         for v in variants}
                results[config] = calibrate_config(box, files, variants, trees, config,
                                                   oracle, log)
    return CalibrationReport(
        task=files.task, command=command, seed=spec.seed + CALIBRATION_SEED_OFFSET,
        reference_manifest_sha256=file_sha256(manifest_path), configs=results,
        summary=summarise(results, unsupported or []),
        variants="regressions" if regressions else "faults")


def add_resume(files: TaskFiles, configs: list[str], *, command: str,
               client: docker.DockerClient | None = None,
               log: Callable[[str], None] = print) -> CalibrationReport:
    """Add the resume probe to a calibration made before the configurations' resume rules
    were frozen (``harness traincheck reference --resume-only``).

    Every row whose traced run was checked is probed at its seed and checked against the
    rules, and the verdicts are derived again. The TrainCheck part stays as measured: that
    holds only because the invariants and control sets are byte for byte the ones it was
    measured against, which the manifest records (``extends_sha256``) and this checks."""
    spec = files.packet.spec.diagnostics
    assert spec is not None
    if spec.resume is None:
        raise HarnessError(f"the packet of {files.task} declares no diagnostics.resume",
                           "declare how its runs checkpoint and resume in packet.yaml")
    path = files.reports / "calibration.json"
    manifest_path = files.reports / "reference" / "manifest.json"
    if not path.exists() or not manifest_path.exists():
        raise HarnessError(f"{files.task} has no calibration and frozen reference to extend",
                           f"run `harness calibrate --task {files.task}`")
    report = CalibrationReport.model_validate_json(path.read_text())
    manifest = ReferenceManifest.model_validate_json(manifest_path.read_text())
    if manifest.extends_sha256 is None or \
            report.reference_manifest_sha256 != manifest.extends_sha256:
        raise HarnessError(f"the calibration of {files.task} was not made against the manifest "
                           "its resume rules extend",
                           f"run the whole calibration: `harness calibrate --task {files.task}`")
    for config in configs:
        cal = report.configs.get(config)
        if cal is None or manifest.configs[config].resume is None:
            raise HarnessError(f"{config} has no calibration rows or no resume rules",
                               f"build them: `harness traincheck reference --task "
                               f"{files.task} --config {config} --resume-only`")
        if any(row.resume_outcome is not None for row in cal.rows):
            raise HarnessError(f"{config}'s calibration rows already have resume probes",
                               f"run the whole calibration: `harness calibrate --task "
                               f"{files.task}`")
    client = client or images.docker_client()
    with tempfile.TemporaryDirectory(prefix="harness-calibrate-") as tmp:
        variants = {v.name: v for v in build_variants(files, Path(tmp), faults=True)}
        for config in configs:
            _, frozen = load_frozen(files, config)
            assert frozen.resume_rules is not None
            cal = report.configs[config]
            with DiagnosticsBox(client, f"{files.task}-{config}-cal-resume") as box:
                box.sandbox.put_file("/workspace", f"reference/{config}.resume.json",
                                     frozen.resume_rules)
                rules = f"/workspace/reference/{config}.resume.json"
                trees: dict[str, str] = {}
                for row in cal.rows:
                    if row.run.outcome != "ok" or row.check_outcome != "ok":
                        continue  # no verdict from the traced run: nothing to add to
                    variant = variants[row.variant]
                    name = variant.name.replace(":", "-")
                    if name not in trees:
                        trees[name] = box.put_tree(name, variant.tree)
                    out = f"{RUNS}/{config}-{name}-s{row.seed}-resume"
                    (row.resume_outcome, row.resume_cause, row.resume_s, found) = _probed(
                        box, trees[name], out, config,
                        spec.train_args(feature=variant.feature, seed=row.seed), spec.resume,
                        spec.wall_s, rules,
                        selective=manifest.configs[config].collection == "selective")
                    row.violations_total += len(found)
                    row.beyond_control += found  # every frozen resume rule passed the policy
                    log(f"{config} {row.variant} seed {row.seed}: resume probe "
                        f"{row.resume_outcome}, {len(row.beyond_control)} beyond control")
            for row in cal.rows:
                if not known_bad(row.kind) and row.check_outcome == "ok":
                    row.beyond_matching = row.beyond_control
                    row.verdict = _with_probe_failure(
                        "false_alarm" if row.beyond_control else "clean", row.resume_outcome)
            judge(cal)
            cal.cost_ratio = _cost_ratio(cal.rows, cal.plain_s)
    report.reference_manifest_sha256 = file_sha256(manifest_path)
    report.command = f"{report.command}; {command}"
    report.summary = summarise(report.configs, report.summary.unsupported_contracts)
    return report


def _seeds(report: CalibrationReport) -> str:
    seeds = sorted({r.seed for c in report.configs.values() for r in c.rows
                    if not known_bad(r.kind)})
    return " and ".join(str(s) for s in seeds)


def render_markdown(report: CalibrationReport) -> str:
    s = report.summary
    if report.variants == "regressions":
        title, bad = "held-out oracle regressions, oracle vs TrainCheck", "regressions"
        intro = ("The known-bad rows are the oracle's regressions (`regressions/<id>/`), run "
                 "as held-out variants: neither the instrumentation nor the reference's policy "
                 "was decided on them. ")
    else:
        title, bad, intro = "known faults, oracle vs TrainCheck", "faults", ""
    lines = [f"# TrainCheck calibration ({title}): {report.task}", "",
             f"{intro}Made by `{report.command}`; held-out seed {report.seed}; frozen "
             f"reference manifest sha256 `{report.reference_manifest_sha256[:16]}`.", "",
             "## Summary", "",
             f"- {bad} detected by TrainCheck / oracle-confirmed {bad}: "
             f"**{s.faults_detected} / {s.faults_confirmed}**"
             + (f" ({', '.join(f'{k} on {v}' for k, v in s.detected.items())})"
                if s.detected else ""),
             f"- false alarms / healthy control runs (baseline and reference at the held-out "
             f"seeds {_seeds(report)}, every configuration): **{s.false_alarms} / {s.controls}**",
             f"- runs where the program itself crashed or hung (one of the {bad}; not a "
             "TrainCheck detection): "
             + (", ".join(f"{k} on {v}" for k, v in s.program_failures.items()) or "none"),
             "- graded contracts with no TrainCheck support: "
             + (", ".join(f"`{c}`" for c in s.unsupported_contracts) or "see capabilities.md"),
             "",
             "Cross-rank checking: a run's per-rank trace files (one per process, each record "
             "tagged with `meta_vars.rank` and `meta_vars.step`) are checked as ONE trace "
             "folder; TrainCheck merges them, and a cross-rank Consistency invariant (learned "
             "with the precondition `meta_vars.rank` unequal, `var_name` consistent) pairs the "
             "same logical parameter on different ranks at overlapping lifetimes. For each "
             "detection on a two-rank run the table also says which rules a check of each "
             "rank's trace on its own would miss.",
             "", "## Cost of one diagnostic answer (collect + check + resume probe) vs the plain "
             "run", "",
             "| configuration | plain s | collect s | check s | resume probe s | ratio |",
             "|---|---|---|---|---|---|"]
    for name, cal in report.configs.items():
        healthy = next(r for r in cal.rows if r.variant == "baseline")
        probe = f"{healthy.resume_s:.1f}" if healthy.resume_outcome is not None else "-"
        lines.append(f"| {name} | {cal.plain_s:.1f} | {healthy.collect_s:.1f} | "
                     f"{healthy.check_s:.1f} | {probe} | {cal.cost_ratio:.1f}x |")
    for name, cal in report.configs.items():
        lines += ["", f"## {name}", "",
                  "| variant | seed | oracle (grader) | TrainCheck verdict | violations (total / "
                  "beyond control and healthy runs) | violated rules | collect s | check s |",
                  "|---|---|---|---|---|---|---|---|"]
        for row in cal.rows:
            oracle = "-"
            if row.oracle is not None:
                oracle = (f"{row.oracle.verdict}" + (f", fails {len(row.oracle.failing_contracts)}"
                                                     if row.oracle.failing_contracts else "")
                          + ("" if row.oracle.confirmed else " (NOT confirmed)"))
            elif known_bad(row.kind):
                oracle = "not in gold validation"
            rules = "; ".join(sorted({f"{v.rule} [{v.relation}] (step {v.first_step}, ranks "
                                      f"{v.ranks})" for v in row.beyond_matching}))[:400]
            if row.run.outcome != "ok":
                rules = f"run {row.run.outcome}: {row.run.cause}"[:400]
            elif row.resume_outcome not in (None, "ok"):
                rules = (f"{rules}; " if rules else "") + (
                    f"resume probe {row.resume_outcome}: {row.resume_cause}")[:400]
            if row.cross_rank_only is not None:
                rules += (" — found only by the cross-rank check (each rank's trace checked on "
                          f"its own misses it): {'; '.join(row.cross_rank_only) or 'none'}")
            lines.append(f"| {row.variant} | {row.seed} | {oracle} | {row.verdict} | "
                         f"{row.violations_total} / "
                         f"{len(row.beyond_matching)} | {rules or '-'} | {row.collect_s:.1f} | "
                         f"{row.check_s:.1f} |")
    return "\n".join(lines) + "\n"
