"""Gold validation of a task's grading: the oracle must be right in both directions.

The grading path runs, for real, in fresh grader containers on:
- the hidden reference: every contract passes;
- the untouched baseline: the feature contracts (``validation.yaml: baseline_fails``) fail and
  every other contract passes;
- each calibration fault (``faults/<id>/``: ``fault.patch`` on top of the reference and a
  ``fault.yaml`` naming the contracts it ``breaks``): exactly those contracts fail;
- each oracle regression (``regressions/<id>/``, the same two files): a realistic fault that an
  adversarial review found the checks passing, kept so the checks written against it keep
  failing it. They are graded like calibration faults but are not calibration faults: Track 1
  (TrainCheck's calibration) uses ``faults/`` only.
A mismatch in any direction fails validation. Contracts that could not run here (``not_run``,
e.g. CUDA on a CPU machine) are listed, never counted as agreeing.

A validation that was stopped (a killed process, a host that went down) goes on where it
stopped with ``resume``. Each variant whose grading had finished with exactly the inputs it
would be graded with now is kept (``grade.finished_grading``). Any other variant is graded
again, and the folder of its unfinished grading is moved aside, not deleted.
"""

from __future__ import annotations

import fnmatch
import hashlib
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import docker

from harness.errors import HarnessError
from harness.infra import images
from harness.infra.workspace import apply_patch, compute_diff, snapshot_baseline
from harness.oracle import reuse
from harness.oracle.grade import GraderInputs, finished_grading, fixed_inputs, grade_diff
from harness.oracle.requirements import defined_checks, trace_problems
from harness.records.attempt import new_numbered_dir, newest_numbered_dir, set_aside
from harness.records.tasks import (
    FAILING,
    FaultSpec,
    ValidationReport,
    ValidationSpec,
    VariantResult,
    load_yaml,
)

VALIDATION_PREFIX = "validation"
SUMMARY_NAME = "validation.json"


def _matches(contract: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(contract, p) for p in patterns)


def fault_diff(baseline: Path, reference: bytes, fault: bytes, work: Path) -> bytes:
    """The diff baseline -> reference + fault, as an agent's diff would look."""
    with_reference = work / "reference"
    apply_patch(baseline, reference, with_reference)
    faulty = work / "faulty"
    apply_patch(with_reference, fault, faulty)
    patch, _ = compute_diff(baseline, faulty, max_diff_bytes=32 * 1024**2)
    return patch


def compare(variant: str, outcomes: Mapping[str, str],
            expected_failing: list[str]) -> list[str]:
    """Every way the outcomes disagree with the expectation, one line each."""
    problems = []
    for contract, outcome in sorted(outcomes.items()):
        if outcome == "not_run":
            continue
        should_fail = _matches(contract, expected_failing)
        if should_fail and outcome not in FAILING:
            problems.append(f"{variant}: {contract} should fail but was {outcome}")
        if not should_fail and outcome != "pass":
            problems.append(f"{variant}: {contract} should pass but was {outcome}")
    for pattern in expected_failing:
        if not any(fnmatch.fnmatchcase(c, pattern) for c in outcomes):
            problems.append(f"{variant}: no contract matches {pattern!r}")
    return problems


def fault_folders(hidden_dir: Path) -> list[tuple[str, Path]]:
    """(kind, folder) of every fault gold validation grades: the calibration faults
    (``faults/``, kind ``fault``), then the oracle regressions (``regressions/``, kind
    ``regression``), each sorted by folder name."""
    return [(kind, path.parent) for kind, folder in (("fault", "faults"),
                                                      ("regression", "regressions"))
            for path in sorted(hidden_dir.glob(f"{folder}/*/fault.yaml"))]


def validate_task(
    task: str,
    packet_dir: Path,
    hidden_dir: Path,
    out_root: Path,
    *,
    client: docker.DockerClient | None = None,
    log: Callable[[str], None] = print,
    only: list[str] | None = None,
    previous: ValidationReport | None = None,
    resume: bool = False,
) -> ValidationReport:
    """Grade the reference, the baseline and every fault. With ``only``, grade just those
    variants and keep the others' results from ``previous`` (e.g. after adding one fault).
    With ``resume``, go on with the task's newest validation that did not finish."""
    spec = load_yaml(hidden_dir / "validation.yaml", ValidationSpec)
    assert isinstance(spec, ValidationSpec)
    reference = (hidden_dir / "reference" / "solution.patch").read_bytes()
    faults = fault_folders(hidden_dir)
    # Read before any grading: a trace with problems fails the task whatever the grades say.
    problems = trace_problems(packet_dir / "TASK.md", hidden_dir)
    for problem in problems:
        log(f"requirements trace: {problem}")
    client = client or images.docker_client()
    out_dir = (unfinished_validation(out_root / task) if resume
               else new_numbered_dir(out_root / task, VALIDATION_PREFIX))
    variants: list[VariantResult] = []
    with tempfile.TemporaryDirectory(prefix="harness-validate-") as tmp:
        work = Path(tmp)
        baseline = work / "baseline"
        snapshot_baseline(packet_dir / "repo", baseline)
        plans: list[tuple[str, bytes, list[str]]] = [
            ("reference", reference, []),
            ("baseline", b"", spec.baseline_fails),
        ]
        for kind, fault_dir in faults:
            fault = load_yaml(fault_dir / "fault.yaml", FaultSpec)
            assert isinstance(fault, FaultSpec)
            fault_work = work / f"{kind}-{fault.id}"
            fault_work.mkdir()
            patch = fault_diff(baseline, reference, (fault_dir / "fault.patch").read_bytes(),
                                fault_work)
            plans.append((f"{kind}:{fault.id}", patch, fault.breaks))
        defined = {name for name, _, _ in plans}
        if only is not None:
            unknown = set(only) - defined
            if unknown:
                raise HarnessError(f"unknown variant(s) {sorted(unknown)}",
                                   "use reference, baseline, fault:<id> or regression:<id>")
            plans = [plan for plan in plans if plan[0] in only]
        fixed = (fixed_inputs(client, packet_dir / "packet.yaml", baseline, hidden_dir)
                 if resume else {})
        for variant, patch, expected in plans:
            diff_path = work / f"{variant.replace(':', '-')}.diff"
            diff_path.write_bytes(patch)
            grade_dir = out_dir / variant.replace(":", "-")
            report, start = None, f"grading {variant}"
            if resume and grade_dir.exists():
                report = finished_grading(grade_dir, reuse.GradingInputs(
                    diff_sha256=hashlib.sha256(patch).hexdigest(), **fixed))
                if report is not None:
                    log(f"kept {variant}: its grading had finished")
                else:
                    aside = set_aside(grade_dir)
                    start += f" again (its unfinished grading is in {aside.name})"
            if report is None:
                grade_dir.mkdir()
                log(start)
                report = grade_diff(GraderInputs(baseline=baseline,
                                                 packet_yaml=packet_dir / "packet.yaml",
                                                 hidden=hidden_dir, diff=diff_path),
                                    grade_dir, client=client)
            outcomes: dict[str, str] = {c.id: c.outcome for c in report.contracts}
            mismatches = compare(variant, outcomes, expected)
            if variant == "reference":
                # A declared CPU configuration no contract exercises is an oracle gap: the
                # reference could never be shown complete on it.
                mismatches += [f"reference: declared configuration {name} is exercised by no "
                               "contract" for name, r in report.configurations.items()
                               if r.reason == "no contract exercises it"]
            variants.append(VariantResult(
                variant=variant, verdict=report.verdict, outcomes=outcomes,
                expected_failing=expected, mismatches=mismatches,
                configurations={k: r.outcome for k, r in report.configurations.items()},
                grade_folder=str(grade_dir),
                evidence={c.id: contract_evidence(c.evidence) for c in report.contracts},
            ))
    if only is not None and previous is not None:
        graded = {v.variant for v in variants}
        order = [v.variant for v in previous.variants] + [v.variant for v in variants]
        # A variant the hidden folder no longer defines (a fault removed) is dropped, not kept.
        contracts_now = ["public-tests", *defined_checks(hidden_dir / "checks")]
        merged = {v.variant: kept_variant(v, contracts_now) for v in previous.variants
                  if v.variant not in graded and v.variant in defined}
        merged.update({v.variant: v for v in variants})
        variants = [merged[name] for name in dict.fromkeys(order) if name in merged]
    contracts = sorted({c for v in variants for c in v.outcomes})
    not_run = sorted({c for v in variants for c, o in v.outcomes.items() if o == "not_run"})
    result = ValidationReport(
        task=task, ok=not any(v.mismatches for v in variants) and not problems,
        contracts=contracts, variants=variants, not_run=not_run,
        requirement_problems=problems)
    (out_dir / SUMMARY_NAME).write_text(result.model_dump_json(indent=1))
    (out_dir / "validation.md").write_text(render_markdown(result))
    return result


# Where a check's observations are made (grading.observation's evidence properties): a column
# of its own, never part of what it measured.
OBSERVATION_PROPERTIES = ("observed_in", "candidate_reports", "corroborated_by", "uncorroborated")


def unfinished_validation(task_root: Path) -> Path:
    """The task's newest validation folder without its summary (a run that was stopped)."""
    newest = newest_numbered_dir(task_root, VALIDATION_PREFIX)
    if newest is None:
        raise HarnessError(f"no validation to resume under {task_root}",
                           "run harness validate without --resume")
    if (newest / SUMMARY_NAME).exists():
        raise HarnessError(f"the newest validation, {newest}, finished: nothing to resume",
                           "run harness validate without --resume for a new one")
    return newest


def contract_evidence(evidence: dict[str, object], limit: int = 160) -> dict[str, str]:
    """A check's recorded properties, trimmed for a table (launcher run logs left out)."""
    props = evidence.get("properties") or {}
    assert isinstance(props, dict)
    return {str(k): str(v)[:limit] for k, v in props.items() if not str(k).startswith("run:")}


def render_markdown(report: ValidationReport) -> str:
    """Contract x variant table; a cell is the outcome, marked when it disagrees."""
    names = [v.variant for v in report.variants]
    lines = [f"# Gold validation: {report.task}", "",
             f"Result: {'PASS' if report.ok else 'FAIL'}", "",
             "| contract | " + " | ".join(names) + " |",
             "| --- |" + " --- |" * len(names)]
    for contract in report.contracts:
        cells = []
        for v in report.variants:
            outcome = v.outcomes.get(contract, "-")
            wrong = any(contract in m for m in v.mismatches)
            cells.append(f"**{outcome} (unexpected)**" if wrong else outcome)
        lines.append(f"| `{contract}` | " + " | ".join(cells) + " |")
    mismatches = [m for v in report.variants for m in v.mismatches]
    if mismatches:
        lines += ["", "Mismatches:", *[f"- {m}" for m in mismatches]]
    if report.requirement_problems:
        lines += ["", "The requirements trace (`requirements.yaml`) lacks:",
                  *[f"- {m}" for m in report.requirement_problems]]
    if report.not_run:
        lines += ["", "Not run here: " + ", ".join(f"`{c}`" for c in report.not_run)]
    reference = next((v for v in report.variants if v.variant == "reference"), None)
    if reference is not None and any(reference.evidence.values()):
        lines += ["", "## The reference's evidence", "",
                  "| contract | oracle | observed in | configurations | tolerance | measured |",
                  "| --- | --- | --- | --- | --- | --- |"]
        declared = ("oracle", "configurations", "tolerance", "why", *OBSERVATION_PROPERTIES)
        for contract in report.contracts:
            ev = reference.evidence.get(contract, {})
            measured = "; ".join(f"{k}={v}" for k, v in ev.items() if k not in declared)
            cells = [ev.get("oracle", ""), ev.get("observed_in", ""), ev.get("configurations", ""),
                     ev.get("tolerance", ""), measured[:300]]
            cells = [c.replace("|", "/").replace("\n", " ") for c in cells]
            lines.append(f"| `{contract}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def kept_variant(variant: VariantResult, contracts_now: list[str]) -> VariantResult:
    """A variant a partial validation keeps from the earlier summary. Its grading predates
    every check added since, so a contract of today's hidden checks it has no outcome for is a
    mismatch: the summary must not pass on a grade that never ran the check."""
    def graded(contract: str) -> bool:
        return any(o == contract or o.startswith(contract + "[") for o in variant.outcomes)

    stale = [f"{variant.variant}: kept from an earlier validation that has no outcome for "
             f"{c} (a check added since): grade it again (--variant {variant.variant})"
             for c in contracts_now if not graded(c)]
    if not stale:
        return variant
    return variant.model_copy(update={"mismatches": [*variant.mismatches, *stale]})


def previous_report(report_dir: Path, task: str) -> ValidationReport:
    """The committed summary a partial validation (``--variant``) keeps the rest of."""
    summary = report_dir / f"{task}.json"
    if not summary.exists():
        raise HarnessError(f"{summary} does not exist", "run a full validation first")
    return ValidationReport.model_validate_json(summary.read_text())


def write_report(report: ValidationReport, report_dir: Path) -> Path:
    """``<task>.md`` and ``<task>.json`` in ``report_dir``; returns the markdown's path."""
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / f"{report.task}.md").write_text(render_markdown(report))
    (report_dir / f"{report.task}.json").write_text(report.model_dump_json(indent=1))
    return report_dir / f"{report.task}.md"
