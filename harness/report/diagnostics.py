"""Section 6: the diagnostic in each treatment session: calls, violations reported, the audit's
judgements of its evidence chains, false and unresolved alarms. A session without any
judgement is "not audited", never "no benefit"."""

from __future__ import annotations

from harness.records import events
from harness.records.chains import CATEGORIES, Chain
from harness.report.collect import StudyRecords, UsedSession
from harness.report.model import NOT_AUDITED, DiagnosticSession, DiagnosticsSection

DIAGNOSTIC_TOOL = "traincheck"


def latest_judgements(used: UsedSession) -> dict[str, str]:
    """Each judged chain -> the category of its latest judgement (an auditor may revise)."""
    found: dict[str, str] = {}
    for entry in used.judgements:
        found[entry.judgement.chain] = entry.judgement.category
    return found


def diagnostic_chains(used: UsedSession) -> list[Chain]:
    return [c for c in used.chains if c.observation.source == "diagnostic"]


def diagnostic_session(used: UsedSession, comparison: str) -> DiagnosticSession:
    start = next((e.data for e in used.typed if isinstance(e.data, events.SessionStart)), None)
    offered = start is not None and DIAGNOSTIC_TOOL in start.tools
    calls = sum(1 for e in used.typed
                if isinstance(e.data, events.ToolCall) and e.data.name == DIAGNOSTIC_TOOL)
    reports = diagnostic_chains(used)
    alarming = [c for c in reports if c.observation.violations]
    judged = latest_judgements(used)
    counts = dict.fromkeys(CATEGORIES, 0)
    for category in judged.values():
        counts[category] += 1
    audited = bool(judged)
    label = ("audited: " + ", ".join(f"{n} {c}" for c, n in counts.items() if n)
             if audited else NOT_AUDITED)
    return DiagnosticSession(
        session_id=used.record.session_id, task=used.record.task, comparison=comparison,
        tool_offered=offered, tool_calls=calls, reports_with_violations=len(alarming),
        violations_reported=sum(len(c.observation.violations) for c in reports),
        judgements=counts, audited=audited, audit_label=label,
        false_alarms=sum(judged.get(c.id) == "no_defect_present" for c in alarming),
        unresolved_alarms=int(bool(reports) and bool(reports[-1].observation.violations)))


def diagnostics_section(records: StudyRecords) -> DiagnosticsSection:
    sessions = [diagnostic_session(used, records.sessions[sid].comparison)
                for sid, used in sorted(records.used.items()) if used.record.arm == "treatment"]
    totals = dict.fromkeys(CATEGORIES, 0)
    for session in sessions:
        for category, n in session.judgements.items():
            totals[category] += n
    return DiagnosticsSection(sessions=sessions, judgement_totals=totals,
                              not_audited=sum(not s.audited for s in sessions))
