"""The report's pages as one document of blocks (headings, paragraphs, tables, plots), built
from ``report.json``'s model alone; ``markdown.py`` and ``html.py`` only lay it out, so the
two pages show the same numbers in the same words.

A table holding money holds nothing else that a price could not change: a new price list
changes only the money lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.report.costs import SECONDS_FIELDS
from harness.report.model import (
    CONTRACT_CLASSES,
    EARLY_EVIDENCE,
    NO_PRICE,
    Money,
    Report,
)


@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Paragraph:
    text: str


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    money: bool = False  # every row is a money line


@dataclass
class Plot:
    name: str  # a key of harness.report.plots.PLOTS
    caption: str


Block = Heading | Paragraph | Table | Plot


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


def num(value: float | int | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def signed(value: float | int | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:+d}" if isinstance(value, int) else f"{value:+.{digits}f}"


def money(value: Money) -> str:
    return value.shown()


SECONDS_LABELS = {
    "inference_s": "model inference", "agent_tools_s": "agent tools",
    "candidate_runs_s": "candidate runs", "diagnostics_tracing_s": "diagnostic tracing",
    "diagnostics_checking_s": "diagnostic checking", "diagnostics_other_s": "diagnostic other",
    "study_build_inference_s": "reference build (amortised)", "failed_runs_s": "failed runs",
    "retry_waits_s": "retry waits", "queue_s": "queue", "grading_s": "grading",
    "harness_s": "harness snapshots"}


def build_document(report: Report) -> Document:
    doc = Document(title=f"Study report: {report.study}")
    _header(doc, report)
    _primary(doc, report)
    _contracts(doc, report)
    _trajectory(doc, report)
    _quality(doc, report)
    _costs(doc, report)
    _diagnostics(doc, report)
    _calibration(doc, report)
    _paired(doc, report)
    _decision(doc, report)
    return doc


def _header(doc: Document, report: Report) -> None:
    lock = report.lock
    doc.add(Paragraph(f"**{report.status_line}**. Study file `{report.study_file}`; lock "
                      f"`{lock.path}` (revision {lock.revision}, frozen {lock.frozen_at}), "
                      f"sha256 `{lock.sha256}`: {lock.items_checked} items checked against the "
                      "inputs as they are now"
                      + (f"; not checked here: {', '.join(lock.items_not_checked)} (only the "
                         "engine can say what an image is: `harness freeze --verify`)"
                         if lock.items_not_checked else "") + "."))
    doc.add(Heading(2, "Sessions"),
            Paragraph("Each used session's attempt verified (transcript chain, manifest, diff "
                      "and snapshot digests); the transcript head is the hash of its last event "
                      "as the session recorded it."),
            Table(["#", "session", "comparison", "state", "attempt", "outcome", "verdict",
                   "transcript events", "transcript head"],
                  [[str(s.order), s.session_id, s.comparison, s.state, num(s.attempt),
                    s.outcome or "-", s.verdict_shown or (s.why_not_used or "-"),
                    num(s.transcript_events), s.transcript_head or "-"]
                   for s in report.sessions]))
    doc.add(Heading(2, "Attempts left out"))
    if report.left_out:
        doc.add(Table(["session", "attempt", "folder", "why"],
                      [[x.session_id, str(x.attempt), x.folder, x.why]
                       for x in report.left_out]))
    else:
        doc.add(Paragraph("None: every attempt recorded under the lock is used."))


def _primary(doc: Document, report: Report) -> None:
    doc.add(Heading(2, "1. Primary outcome per pair and arm"),
            Paragraph("Feature complete: every required contract passing on the declared "
                      "configurations. Configurations the grader could not run leave the "
                      "outcome not determined for them."),
            Table(["pair", "task", "comparison", "arm", "outcome", "not determined for"],
                  [[str(r.pair), r.task, r.comparison, r.arm, r.label,
                    "; ".join(f"{k} ({v})" for k, v in r.not_determined_for.items()) or "-"]
                   for r in report.primary.rows]),
            Table(["arm", "comparison", "sessions used", "feature complete",
                   "of which not determined for CUDA"],
                  [[c.arm, c.comparison, str(c.sessions), str(c.complete),
                    str(c.not_determined_for_cuda)] for c in report.primary.by_arm]))


def _contracts(doc: Document, report: Report) -> None:
    section = report.contracts
    doc.add(Heading(2, "2. Per-contract outcomes, arm by arm"),
            Paragraph("Silent regression: a contract that fails while every run it made exits "
                      "0; crash and hang are kept apart from it, and so is flaky (a crash or hang "
                      "that passed on its rerun, never a pass)."))
    if not section.contracts:
        doc.add(Paragraph("No graded session yet."))
        return
    doc.add(Table(["arm", *CONTRACT_CLASSES],
                  [[arm, *(str(t[c]) for c in CONTRACT_CLASSES)]
                   for arm, t in section.totals.items()]),
            Table(["contract", "arm", *CONTRACT_CLASSES],
                  [[c.contract, c.arm, *(str(c.counts[k]) for k in CONTRACT_CLASSES)]
                   for c in section.by_arm]),
            Plot("contract_grid", "Per-contract outcome by session (the counted grade)."))


def _trajectory(doc: Document, report: Report) -> None:
    doc.add(Heading(2, "3. Trajectory"),
            Paragraph("From each session's snapshots' blind grades: time, tokens and compute to "
                      "the first snapshot that passes every contract; regressions (a contract "
                      "passing at one snapshot and failing at a later one) and whether the "
                      "submitted code passes it again; the defects left at submit."),
            Table(["session", "snapshots graded", "first passing snapshot", "seconds",
                   "tokens", "candidate runs", "CPU-hours", "regressions",
                   "repaired before submit", "residual defects at submit"],
                  [[t.session_id, "yes" if t.graded else "not graded",
                    num(t.first_passing_snapshot) if t.graded else "-",
                    num(t.seconds_to_first_pass), num(t.tokens_to_first_pass),
                    num(t.candidate_runs_to_first_pass), num(t.cpu_hours_to_first_pass, 4),
                    str(len(t.regressions)),
                    str(sum(r.repaired_before_submit for r in t.regressions)),
                    ", ".join(t.residual_defects) or "none"]
                   for t in report.trajectory.sessions]))
    regressions = [(t.session_id, r) for t in report.trajectory.sessions for r in t.regressions]
    if regressions:
        doc.add(Table(["session", "contract", "passing at snapshot", "failing at snapshot",
                       "repaired before submit"],
                      [[sid, r.contract, str(r.passed_at), str(r.failed_at),
                        "yes" if r.repaired_before_submit else "no"] for sid, r in regressions]))
    doc.add(Plot("trajectory", "Contracts passing at each graded snapshot, per session; "
                               "diagnostic calls marked."))


def _quality(doc: Document, report: Report) -> None:
    section = report.quality
    doc.add(Heading(2, "4. Task quality and performance"),
            Paragraph("Only for submissions that pass their correctness contracts ("
                      f"{len(section.eligible_sessions)}: "
                      f"{', '.join(section.eligible_sessions) or 'none'})."))
    if section.figures:
        doc.add(Table(["session", "arm", "figure", "kind", "value", "contract"],
                      [[f.session_id, f.arm, f.figure, f.kind, f"{f.value:.6g}", f.contract]
                       for f in section.figures]))
    else:
        doc.add(Paragraph("No quality or performance figure was recorded by the checks of "
                          "these submissions."))


def _costs(doc: Document, report: Report) -> None:
    costs = report.costs
    doc.add(Heading(2, "5. Costs, split"),
            Table(["session", "arm", "tokens in", "tokens out", "tokens total",
                   "token budget", "wall s", "wall budget s", "tool calls", "candidate runs",
                   "CPU-h", "GPU-h"],
                  [[c.session_id, c.arm, str(c.tokens_input), str(c.tokens_output),
                    str(c.tokens_total), num(c.budget_tokens_total), num(c.wall_seconds),
                    num(c.budget_wall_seconds, 0), str(c.tool_calls), str(c.candidate_runs),
                    num(c.cpu_hours, 4), num(c.gpu_hours, 4)] for c in costs.sessions]),
            Paragraph("Money, from the study's price table (a token category without a price "
                      f"is \"{NO_PRICE}\", never zero):"),
            Table(["session", "model", "input", "output", "total"],
                  [[c.session_id, c.model, money(c.money_input), money(c.money_output),
                    money(c.money_total)] for c in costs.sessions]
                  + [[f"arm {a.arm}", "", "", "", money(a.money_total)] for a in costs.by_arm],
                  money=True))
    if costs.prices:
        doc.add(Table(["model", "category", "per million tokens", "currency", "date", "source"],
                      [[str(p["model"]), str(p["category"]), str(p["per_million_tokens"]),
                        str(p["currency"]), str(p["date"]), str(p["source"])]
                       for p in costs.prices], money=True))
    else:
        doc.add(Paragraph(f"The study file has no price table: every money line is "
                          f"\"{NO_PRICE}\"."))
    doc.add(Paragraph("Seconds by where they went, per arm:"),
            Table(["arm", *(SECONDS_LABELS[f] for f in SECONDS_FIELDS)],
                  [[a.arm, *(num(a.seconds[f]) for f in SECONDS_FIELDS)]
                   for a in costs.by_arm]),
            Paragraph(f"CPU-hours of every attempt under the lock (failed ones too): "
                      f"{costs.cpu_hours_all_attempts:.4f} against a cap of "
                      f"{_cap(costs.cap_cpu_hours)}; GPU-hours "
                      f"{costs.gpu_hours_all_attempts:.4f} against {_cap(costs.cap_gpu_hours)}."),
            Plot("cost_breakdown", "Where each arm's seconds went."),
            Plot("budget", "Tokens and wall time against the budget, per session."))


def _cap(value: float | None) -> str:
    return "none" if value is None else f"{value:.2f}"


def _diagnostics(doc: Document, report: Report) -> None:
    section = report.diagnostics
    doc.add(Heading(2, "6. Diagnostics"),
            Paragraph("Per treatment session: the diagnostic's calls, the violations it "
                      "reported, and the audit's judgements of its evidence chains (the latest "
                      "judgement of each chain). A session without any judgement is "
                      "\"not audited\", never \"no benefit\"."))
    if not section.sessions:
        doc.add(Paragraph("No treatment session is used yet."))
        return
    doc.add(Table(["session", "comparison", "tool offered", "calls", "reports with violations",
                   "violations", "audit", "false alarms", "unresolved alarms"],
                  [[s.session_id, s.comparison, "yes" if s.tool_offered else "no",
                    str(s.tool_calls), str(s.reports_with_violations),
                    str(s.violations_reported), s.audit_label, str(s.false_alarms),
                    str(s.unresolved_alarms)] for s in section.sessions]),
            Paragraph("Judgements over all treatment sessions: " + ", ".join(
                f"{c} {n}" for c, n in section.judgement_totals.items())
                + f"; not audited: {section.not_audited}."))


def _calibration(doc: Document, report: Report) -> None:
    doc.add(Heading(2, "7. Calibration of the diagnostic (apart from the agent comparison)"),
            Paragraph("From the committed calibration and capability reports the lock "
                      "digests; never mixed into the comparison of the arms. A coverage-audit "
                      "task runs and is reported, and is kept out of the benefit comparison, "
                      "as the freeze's gate decided."))
    for task in report.calibration.tasks:
        label = " (coverage audit: not evidence of benefit)" \
            if task.comparison == "coverage-audit" else ""
        doc.add(Heading(3, f"{task.task}{label}"),
                Paragraph(f"Gate: {task.gate_rule or 'no decision'}"
                          + (f": {task.gate_detail}" if task.gate_detail else "") + "."))
        if not task.calibration_found:
            doc.add(Paragraph("No calibration report is committed for this task."))
        else:
            doc.add(Paragraph(f"TrainCheck detected {task.faults_detected} of "
                              f"{task.faults_confirmed} oracle-confirmed faults; "
                              f"{task.false_alarms} false alarm(s) on {task.controls} healthy "
                              "runs."),
                    Table(["fault", "configuration", "oracle", "confirmed", "TrainCheck"],
                          [[r.fault, r.config, r.oracle, "yes" if r.oracle_confirmed else "no",
                            r.traincheck] for r in task.rows]))
        if task.capabilities_found:
            kinds = sorted({k for cells in task.capability.values() for k in cells})
            doc.add(Table(["configuration", *kinds],
                          [[config, *(cells.get(k, "-") for k in kinds)]
                           for config, cells in task.capability.items()]),
                    Paragraph(f"Coverage denominator: {task.coverage_denominator} contracts ("
                              + ", ".join(f"{n} {s}" for s, n in task.coverage.items())
                              + "). Unsupported: "
                              + (", ".join(task.unsupported_contracts) or "none") + "."))
        else:
            doc.add(Paragraph("No capability matrix is committed for this task."))


def _paired(doc: Document, report: Report) -> None:
    section = report.paired
    doc.add(Heading(2, "8. Paired differences (treatment minus control)"),
            Paragraph(f"Descriptive only, {section.label}: {section.comparable_pairs} complete "
                      "pair(s) of treatment-vs-control tasks; no p-value is computed. "
                      + ("" if section.label != EARLY_EVIDENCE else
                         "With so few pairs a difference says what happened here, not what "
                         "would happen again.")),
            Table(["pair", "task", "comparison", "both arms used", "feature complete",
                   "contracts passing", "wall s", "tokens"],
                  [[str(p.pair), p.task, p.comparison, "yes" if p.complete else "no",
                    signed(p.feature_complete), signed(p.contracts_passing),
                    signed(p.wall_seconds), signed(p.tokens_total)] for p in section.pairs]),
            Table(["pair", "money (treatment minus control)"],
                  [[str(p.pair), "-" if not p.complete else
                    (NO_PRICE if p.money is None else f"{p.money:+.4f}")]
                   for p in section.pairs], money=True),
            Paragraph(f"Means over the comparable pairs ({section.label}): feature complete "
                      f"{signed(section.mean_feature_complete, 2)}, contracts passing "
                      f"{signed(section.mean_contracts_passing, 2)}, wall s "
                      f"{signed(section.mean_wall_seconds)}, tokens "
                      f"{signed(section.mean_tokens_total, 0)}."))


def _decision(doc: Document, report: Report) -> None:
    section = report.decision
    doc.add(Heading(2, "9. The decision gate"),
            Table(["condition", "met", "evidence"],
                  [[c.name, "yes" if c.met else "no", c.evidence] for c in section.conditions]),
            Paragraph(section.paragraph))
