"""The short summary by arm that ``harness report`` prints on the terminal."""

from __future__ import annotations

from rich.table import Table

from harness.report.model import Report


def summary_table(report: Report) -> Table:
    table = Table(title=f"{report.study}: {report.status_line}")
    for column in ("arm", "used", "feature complete",
                   "contracts pass / silent / crash / hang / flaky", "tokens", "money",
                   "wall s", "diagnostic calls", "audited"):
        table.add_column(column, overflow="fold")
    costs = {a.arm: a for a in report.costs.by_arm}
    for arm in ("control", "treatment"):
        used = [s for s in report.sessions if s.arm == arm and s.used]
        done = sum(r.complete or 0 for r in report.primary.rows if r.arm == arm)
        totals = report.contracts.totals.get(arm, {})
        cost = costs.get(arm)
        diagnostic = list(report.diagnostics.sessions) if arm == "treatment" else []
        wall = sum(s.wall_seconds for s in report.costs.sessions if s.arm == arm)
        table.add_row(
            arm, f"{len(used)} of {sum(s.arm == arm for s in report.sessions)}", str(done),
            " / ".join(str(totals.get(k, 0)) for k in ("pass", "silent_regression", "crash",
                                                       "hang", "flaky")),
            str(cost.tokens_total) if cost else "-",
            cost.money_total.shown() if cost else "-",
            f"{wall:.0f}" if cost else "-",
            str(sum(d.tool_calls for d in diagnostic)) if arm == "treatment" else "-",
            f"{sum(d.audited for d in diagnostic)} of {len(diagnostic)}"
            if arm == "treatment" else "-")
    return table
