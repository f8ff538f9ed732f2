"""Section 9: the decision gate. The research plan scales up when (a) actionable diagnostic
evidence was observed (a diagnostic report with violations on code whose blind grade had a
failing contract, in a treatment-vs-control task) and (b) a credible mechanism was shown (an
auditor judged a chain "helped"). When either is not met, the paragraph names the gaps it rests
on, from the records: tool coverage, diagnostic quality, agent response (and the audit, when
sessions were never judged). Sessions run by the scripted agent never support scaling: its
response to a diagnostic was written before the run."""

from __future__ import annotations

from collections.abc import Mapping

from harness.report.collect import StudyRecords
from harness.report.diagnostics import diagnostic_chains, latest_judgements
from harness.report.model import (
    CalibrationSection,
    DecisionSection,
    DiagnosticsSection,
    GateCondition,
)

COMPARISON = "treatment-vs-control"
SCRIPTED = "scripted:"  # the offline scripted agent's model prefix (harness.agent.providers)


def decision_section(records: StudyRecords, diagnostics: DiagnosticsSection,
                     calibration: CalibrationSection) -> DecisionSection:
    compared = {sid: used for sid, used in sorted(records.used.items())
                if used.record.arm == "treatment"
                and records.sessions[sid].comparison == COMPARISON}
    actionable: list[str] = []
    missed: list[str] = []  # reports without violations on code that failed a contract
    on_passing: list[str] = []  # reports with violations on code that passed every contract
    helped: list[str] = []
    for sid, used in compared.items():
        judged = latest_judgements(used)
        helped += [f"{sid} {chain}" for chain, category in judged.items()
                   if category == "helped"]
        for chain in diagnostic_chains(used):
            before = chain.before
            if before is None or not before.graded:
                continue
            if chain.observation.violations and before.failing:
                actionable.append(f"{sid} {chain.id}")
            elif chain.observation.violations:
                on_passing.append(f"{sid} {chain.id}")
            elif before.failing:
                missed.append(f"{sid} {chain.id}")
    conditions = [
        GateCondition(name="actionable diagnostic evidence observed", met=bool(actionable),
                      evidence=(f"{len(actionable)} diagnostic report(s) with violations on code "
                                f"that failed a contract: {', '.join(actionable)}" if actionable
                                else "no diagnostic report with violations on code that failed "
                                     "a contract, in the treatment-vs-control sessions used")),
        GateCondition(name="credible mechanism shown by an audited chain", met=bool(helped),
                      evidence=(f"chain(s) judged helped: {', '.join(helped)}" if helped
                                else "no chain judged helped"))]
    # A scripted agent's actions were written before the run: what it did after a diagnostic
    # report shows that the harness carries the path, never how an agent responds.
    scripted = sorted(sid for sid, used in compared.items()
                      if used.record.model.startswith(SCRIPTED))
    conditions_met = all(c.met for c in conditions)
    scale_up = conditions_met and not scripted
    gaps = [] if conditions_met else _gaps(compared, diagnostics, calibration, missed,
                                           on_passing)
    if scripted:
        gaps.insert(0, f"agent response: {len(scripted)} of {len(compared)} treatment "
                       "session(s) ran a scripted agent, whose actions were written before "
                       "the run, so the conditions show the harness's path and are no "
                       "evidence for the decision")
    if not compared:
        gaps.insert(0, "no treatment session of a treatment-vs-control task is used yet "
                       "(coverage-audit tasks are kept out of the benefit comparison)")
    met = [c.name for c in conditions if c.met]
    unmet = [c.name for c in conditions if not c.met]
    if conditions_met and scripted:
        paragraph = ("Both conditions are met in the records, but they are no basis for "
                     "scaling: " + "; ".join(gaps) + ".")
    elif scale_up:
        paragraph = ("Both conditions for scaling are met: " + "; ".join(
            c.evidence for c in conditions) + ".")
    else:
        paragraph = ((f"Met: {', '.join(met)}. " if met else "")
                     + f"Not met: {', '.join(unmet)}. The gaps the records show: "
                     + "; ".join(gaps) + ".")
    return DecisionSection(conditions=conditions, scale_up=scale_up, gaps=gaps,
                           paragraph=paragraph)


def _gaps(compared: Mapping[str, object], diagnostics: DiagnosticsSection,
          calibration: CalibrationSection, missed: list[str],
          on_passing: list[str]) -> list[str]:
    gaps: list[str] = []
    comparison_tasks = [t for t in calibration.tasks if t.comparison == COMPARISON]
    detected = sum(t.faults_detected for t in calibration.tasks)
    confirmed = sum(t.faults_confirmed for t in calibration.tasks)
    unsupported = sum(len(t.unsupported_contracts) for t in calibration.tasks)
    denominator = sum(t.coverage_denominator for t in calibration.tasks)
    if missed or not comparison_tasks or detected < confirmed or unsupported:
        parts = [f"TrainCheck detected {detected} of {confirmed} oracle-confirmed faults in "
                 f"calibration", f"{unsupported} of {denominator} contracts have no supporting "
                 "learned rule"]
        if not comparison_tasks:
            parts.append("no task passed the gate as a treatment-vs-control comparison")
        if missed:
            parts.append(f"{len(missed)} report(s) found no violation on code that failed a "
                         "contract")
        gaps.append("tool coverage: " + ", ".join(parts))
    sessions = [s for s in diagnostics.sessions if s.session_id in compared]
    false_alarms = sum(s.false_alarms for s in sessions)
    misleading = sum(s.judgements.get("diagnostic_misleading", 0) for s in sessions)
    calibration_alarms = sum(t.false_alarms for t in calibration.tasks)
    if false_alarms or misleading or on_passing or calibration_alarms:
        gaps.append(f"diagnostic quality: {false_alarms} false alarm(s) and {misleading} "
                    f"misleading report(s) judged, {len(on_passing)} report(s) with violations "
                    f"on code that passed every contract, {calibration_alarms} false alarm(s) "
                    "on healthy calibration runs")
    unused = sum(1 for s in sessions if s.tool_offered and s.tool_calls == 0)
    ignored = sum(s.judgements.get("diagnostic_ignored", 0) for s in sessions)
    not_used = sum(s.judgements.get("tool_not_used", 0) for s in sessions)
    if unused or ignored or not_used:
        gaps.append(f"agent response: {unused} treatment session(s) never called the "
                    f"diagnostic, {ignored} report(s) judged ignored, {not_used} chain(s) "
                    "judged tool not used")
    not_audited = sum(not s.audited for s in sessions)
    if not_audited:
        gaps.append(f"audit: {not_audited} treatment session(s) not audited (counted as not "
                    "audited, not as no benefit)")
    if not gaps:
        gaps.append("none of the three shows in the records: more sessions are needed")
    return gaps
