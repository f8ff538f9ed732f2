"""Section 8: treatment minus control, pair by pair, descriptive only. With the pilot's few
pairs no estimate is powered, and the pages say so; no p-value is computed at all."""

from __future__ import annotations

from statistics import mean

from harness.report.collect import StudyRecords, UsedSession
from harness.report.model import (
    EARLY_EVIDENCE,
    CostsSection,
    PairDifference,
    PairedSection,
)
from harness.report.outcomes import PASSING_VERDICTS, contract_classes

# Below this many comparable pairs every difference is labelled early descriptive evidence.
POWERED_PAIRS = 30
COMPARISON = "treatment-vs-control"


def _complete(used: UsedSession) -> int:
    return int(used.grade is not None and used.grade.verdict in PASSING_VERDICTS)


def _passing(used: UsedSession) -> int:
    return sum(v == "pass" for v in contract_classes(used).values())


def paired_section(records: StudyRecords, costs: CostsSection) -> PairedSection:
    cost = {c.session_id: c for c in costs.sessions}
    pairs: dict[int, dict[str, str]] = {}
    for session in records.sessions.values():
        pairs.setdefault(session.pair, {})[session.arm] = session.session_id
    found: list[PairDifference] = []
    for pair, arms in sorted(pairs.items()):
        control, treatment = arms.get("control"), arms.get("treatment")
        locked = records.sessions[control or treatment or ""]
        entry = PairDifference(pair=pair, task=locked.task, comparison=locked.comparison,
                               complete=control in records.used and treatment in records.used)
        if entry.complete and control is not None and treatment is not None:
            c, t = records.used[control], records.used[treatment]

            entry.feature_complete = _complete(t) - _complete(c)
            entry.contracts_passing = _passing(t) - _passing(c)
            entry.wall_seconds = round(cost[treatment].wall_seconds
                                       - cost[control].wall_seconds, 3)
            entry.tokens_total = cost[treatment].tokens_total - cost[control].tokens_total
            money_t, money_c = cost[treatment].money_total, cost[control].money_total
            if money_t.amount is not None and money_c.amount is not None:
                entry.money = round(money_t.amount - money_c.amount, 6)
        found.append(entry)
    comparable = [p for p in found if p.complete and p.comparison == COMPARISON]

    def average(values: list[float | int | None]) -> float | None:
        kept = [float(v) for v in values if v is not None]
        return round(mean(kept), 6) if kept else None

    return PairedSection(
        label=EARLY_EVIDENCE if len(comparable) < POWERED_PAIRS else "descriptive",
        pairs=found, comparable_pairs=len(comparable),
        mean_feature_complete=average([p.feature_complete for p in comparable]),
        mean_contracts_passing=average([p.contracts_passing for p in comparable]),
        mean_wall_seconds=average([p.wall_seconds for p in comparable]),
        mean_tokens_total=average([p.tokens_total for p in comparable]))
