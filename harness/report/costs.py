"""Section 5: costs, split: tokens per category and their money from the study's price table,
and where the session's time went (the agent's tools, candidate runs, the diagnostic's tracing
and checking, the frozen reference's build amortised per treatment session, failed runs, retry
waits, queue, grading), CPU- and GPU-hours against the study caps.

A price the table does not hold is "no price", never zero: a sum with one missing part is
missing too.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from harness.errors import HarnessError
from harness.records import events
from harness.records.attempt import read_json_file
from harness.records.study import Price, Study, TokenCategory, task_ref
from harness.report.collect import StudyRecords, UsedSession
from harness.report.model import ArmCost, CostsSection, Money, SessionCost
from harness.traincheck.reference import ReferenceManifest

DIAGNOSTIC_TOOL = "traincheck"
RUN_TOOLS = frozenset({"run_candidate", "run_public_tests"})
# The SessionCost fields that are seconds, in the order the pages show them.
SECONDS_FIELDS = ("inference_s", "agent_tools_s", "candidate_runs_s", "diagnostics_tracing_s",
                  "diagnostics_checking_s", "diagnostics_other_s", "study_build_inference_s",
                  "failed_runs_s", "retry_waits_s", "queue_s", "grading_s", "harness_s")


def price_for(study: Study, model: str, category: TokenCategory) -> Price | None:
    """The study's price for a session's tokens: by the model the session resolved, else by
    agent.model as the study writes it (a scripted template, placeholders and all)."""
    for candidate in (model, study.agent.model):
        for price in study.prices:
            if price.model == candidate and price.category == category:
                return price
    return None


def money(price: Price | None, tokens: int) -> Money:
    if price is None:
        return Money()
    return Money(amount=round(tokens * price.per_million_tokens / 1e6, 6),
                 currency=price.currency, price_per_million=price.per_million_tokens,
                 price_date=price.date.isoformat(), price_source=price.source)


def add_money(parts: list[Money]) -> Money:
    if not parts or any(p.amount is None for p in parts):
        return Money()
    return Money(amount=round(sum(p.amount or 0.0 for p in parts), 6),
                 currency=parts[0].currency)


def _reference_build_seconds(study: Study, task: str) -> float:
    """What building the task's frozen reference cost (learning and policy runs, inference,
    checks), from its manifest, which the lock digests."""
    manifest = task_ref(study, task).traincheck_dir() / "reference" / "manifest.json"
    if not manifest.is_file():
        return 0.0
    data: Any = read_json_file(manifest, "a frozen reference's manifest")
    try:
        frozen = ReferenceManifest.model_validate(data)
    except ValidationError:
        raise HarnessError(f"{manifest} does not have a frozen reference's shape",
                           "restore it from the repository") from None
    return sum(sum(run.wall_s for run in config.runs()) + config.infer_s
               + config.check_seconds() for config in frozen.configs.values())


def _diagnostic_split(used: UsedSession) -> tuple[float, float, float]:
    """(tracing, checking, the rest) seconds of the diagnostic's calls, as each reported."""
    tracing = checking = whole = 0.0
    for event in used.typed:
        data = event.data
        if isinstance(data, events.ToolResult) and data.name == DIAGNOSTIC_TOOL:
            details = data.details
            tracing += float(details.get("collect_s") or 0.0)
            checking += float(details.get("check_s") or 0.0)
            whole += float(details.get("diagnostics_s") or data.duration_s or 0.0)
    return tracing, checking, max(0.0, whole - tracing - checking)


def _failed_run_seconds(used: UsedSession) -> float:
    total = 0.0
    for event in used.typed:
        data = event.data
        if isinstance(data, events.ToolResult) and data.name in RUN_TOOLS and (
                not data.ok or data.timed_out
                or (data.exit_code is not None and data.exit_code != 0)):
            total += data.duration_s
    return total


def _offers_diagnostic(study: Study, arm: str) -> bool:
    return DIAGNOSTIC_TOOL in study.arms[arm].extra_tools  # type: ignore[index]


def session_cost(records: StudyRecords, used: UsedSession) -> SessionCost:
    study, record = records.study, used.record
    usage = record.usage
    assert usage is not None, f"{used.folder} ended without its usage"
    compute = usage.compute_seconds
    tracing, checking, other = _diagnostic_split(used)
    build = 0.0
    if _offers_diagnostic(study, record.arm):
        sharing = sum(1 for s in records.sessions.values()
                      if s.task == record.task and s.arm == record.arm)
        build = _reference_build_seconds(study, record.task) / max(1, sharing)
    money_in = money(price_for(study, record.model, "input"), usage.tokens_input)
    money_out = money(price_for(study, record.model, "output"), usage.tokens_output)
    queue = (record.launch.queue_seconds if record.launch and record.launch.queue_seconds
             is not None else usage.queue_seconds)
    return SessionCost(
        session_id=record.session_id, arm=record.arm, model=record.model,
        tokens_input=usage.tokens_input, tokens_output=usage.tokens_output,
        tokens_total=usage.tokens_total, money_input=money_in, money_output=money_out,
        money_total=add_money([money_in, money_out]), wall_seconds=usage.wall_seconds,
        inference_s=compute.get("inference", 0.0), agent_tools_s=compute.get("agent_tools", 0.0),
        candidate_runs_s=compute.get("candidate_runs", 0.0),
        diagnostics_tracing_s=round(tracing, 3), diagnostics_checking_s=round(checking, 3),
        diagnostics_other_s=round(other, 3), study_build_inference_s=round(build, 3),
        failed_runs_s=round(_failed_run_seconds(used), 3),
        retry_waits_s=compute.get("retries", 0.0), queue_s=round(queue, 3),
        grading_s=round(used.grading_seconds, 3), harness_s=usage.harness_seconds,
        cpu_hours=usage.cpu_hours, gpu_hours=usage.gpu_hours, tool_calls=usage.tool_calls,
        candidate_runs=usage.candidate_runs,
        budget_wall_seconds=used.locked.budget.wall_seconds,
        budget_tokens_total=used.locked.budget.tokens_total)


def costs_section(records: StudyRecords) -> CostsSection:
    sessions = [session_cost(records, used) for _sid, used in sorted(records.used.items())]
    by_arm = []
    for arm in sorted({s.arm for s in sessions}):
        mine = [s for s in sessions if s.arm == arm]
        by_arm.append(ArmCost(
            arm=arm, sessions=len(mine), tokens_input=sum(s.tokens_input for s in mine),
            tokens_output=sum(s.tokens_output for s in mine),
            tokens_total=sum(s.tokens_total for s in mine),
            money_total=add_money([s.money_total for s in mine]),
            seconds={f: round(sum(getattr(s, f) for s in mine), 3) for f in SECONDS_FIELDS},
            cpu_hours=round(sum(s.cpu_hours for s in mine), 6),
            gpu_hours=round(sum(s.gpu_hours for s in mine), 6)))
    caps = records.frozen.lock.caps
    return CostsSection(
        sessions=sessions, by_arm=by_arm, cpu_hours_all_attempts=round(records.all_cpu_hours, 6),
        gpu_hours_all_attempts=round(records.all_gpu_hours, 6), cap_cpu_hours=caps.cpu_hours,
        cap_gpu_hours=caps.gpu_hours,
        prices=[{"model": p.model, "category": p.category,
                 "per_million_tokens": p.per_million_tokens, "currency": p.currency,
                 "date": p.date.isoformat(), "source": p.source} for p in records.study.prices])
