"""The report's plots, drawn with matplotlib from ``report.json``'s model alone, as SVG text.

Deterministic: a fixed hash salt and no date in the SVG metadata, so the same records give the
same bytes. Each plot says so in words when there is nothing to draw yet, rather than leaving
an empty frame.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import matplotlib

matplotlib.use("Agg")  # files only: never a window, never a display server
import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from harness.report.costs import SECONDS_FIELDS
from harness.report.document import SECONDS_LABELS
from harness.report.model import CONTRACT_CLASSES, Report

CLASS_COLOURS = {"pass": "#2e7d32", "silent_regression": "#c62828", "crash": "#6a1b9a",
                 "hang": "#ef6c00", "flaky": "#f9a825", "not_run": "#b0bec5",
                 "diff_rejected": "#424242"}
MISSING_COLOUR = "#ffffff"


def _svg(figure: Figure) -> str:
    buffer = io.StringIO()
    with plt.rc_context({"svg.hashsalt": "harness-report", "svg.fonttype": "path"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def _empty(figure: Figure, text: str) -> Figure:
    axes = figure.add_subplot()
    axes.axis("off")
    axes.text(0.5, 0.5, text, ha="center", va="center", fontsize=12, wrap=True)
    return figure


def contract_grid(report: Report) -> str:
    section = report.contracts
    sessions = sorted(section.grid)
    figure = plt.figure(figsize=(max(6.0, 0.9 * len(section.contracts) + 4),
                                 max(2.5, 0.45 * len(sessions) + 2)))
    if not section.contracts:
        return _svg(_empty(figure, "no graded session yet"))
    codes: dict[str, int] = {name: i + 1 for i, name in enumerate(CONTRACT_CLASSES)}
    cells = [[codes.get(section.grid[s].get(c, ""), 0) for c in section.contracts]
             for s in sessions]
    colours = ListedColormap([MISSING_COLOUR, *(CLASS_COLOURS[c] for c in CONTRACT_CLASSES)])
    axes = figure.add_subplot()
    axes.imshow(cells, cmap=colours, vmin=0, vmax=len(CONTRACT_CLASSES), aspect="auto")
    axes.set_xticks(range(len(section.contracts)),
                    [c.removeprefix("hidden:").split("::")[-1][:40] for c in section.contracts],
                    rotation=45, ha="right", fontsize=8)
    axes.set_yticks(range(len(sessions)), sessions, fontsize=8)
    axes.set_xticks([x - 0.5 for x in range(1, len(section.contracts))], minor=True)
    axes.set_yticks([y - 0.5 for y in range(1, len(sessions))], minor=True)
    axes.grid(which="minor", color="white", linewidth=1.5)
    axes.tick_params(which="minor", length=0)
    axes.legend(handles=[Patch(color=CLASS_COLOURS[c], label=c) for c in CONTRACT_CLASSES],
                loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    axes.set_title("per-contract outcome by session")
    return _svg(figure)


def trajectory(report: Report) -> str:
    graded = [t for t in report.trajectory.sessions if t.snapshots]
    figure = plt.figure(figsize=(8, 4))
    if not graded:
        return _svg(_empty(figure, "no graded snapshot yet (harness grade ATTEMPT --snapshots)"))
    axes = figure.add_subplot()
    for line in graded:
        xs = [p.seconds for p in line.snapshots]
        ys = [p.passing for p in line.snapshots]
        drawn = axes.plot(xs, ys, marker="o", label=line.session_id)
        marks = [p for p in line.snapshots if p.diagnostic]
        if marks:
            axes.scatter([p.seconds for p in marks], [p.passing for p in marks], marker="*",
                         s=220, color=drawn[0].get_color(), edgecolors="black", zorder=3)
    axes.scatter([], [], marker="*", s=160, color="white", edgecolors="black",
                 label="diagnostic call")
    axes.set_xlabel("seconds since the session started")
    axes.set_ylabel("contracts passing")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    # Beside the axes, as in every plot here: inside, a legend can hide a snapshot.
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.set_title("passing contracts over time")
    return _svg(figure)


def cost_breakdown(report: Report) -> str:
    arms = report.costs.by_arm
    figure = plt.figure(figsize=(8, 4))
    if not arms:
        return _svg(_empty(figure, "no session used yet"))
    axes = figure.add_subplot()
    bottoms = [0.0] * len(arms)
    cmap = plt.get_cmap("tab20")
    for i, field in enumerate(SECONDS_FIELDS):
        values = [arm.seconds[field] for arm in arms]
        axes.barh([a.arm for a in arms], values, left=bottoms, color=cmap(i),
                  label=SECONDS_LABELS[field])
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    axes.set_xlabel("seconds, all used sessions of the arm")
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.set_title("cost breakdown per arm")
    return _svg(figure)


def budget(report: Report) -> str:
    sessions = report.costs.sessions
    figure = plt.figure(figsize=(8, max(2.5, 0.5 * len(sessions) + 1.5)))
    if not sessions:
        return _svg(_empty(figure, "no session used yet"))
    axes = figure.add_subplot()
    names = [s.session_id for s in sessions]
    wall = [100 * s.wall_seconds / s.budget_wall_seconds for s in sessions]
    tokens = [100 * s.tokens_total / s.budget_tokens_total if s.budget_tokens_total else 0.0
              for s in sessions]
    ys = range(len(sessions))
    axes.barh([y - 0.2 for y in ys], wall, height=0.4, label="wall time", color="#1565c0")
    axes.barh([y + 0.2 for y in ys], tokens, height=0.4, color="#f9a825",
              label="tokens (0 where no token budget)")
    axes.axvline(100, color="black", linestyle="--", linewidth=1)
    axes.set_yticks(list(ys), names, fontsize=8)
    axes.set_xlabel("% of the session's budget")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.set_title("tokens and wall time against budget")
    return _svg(figure)


PLOTS: dict[str, Callable[[Report], str]] = {
    "contract_grid": contract_grid, "trajectory": trajectory,
    "cost_breakdown": cost_breakdown, "budget": budget}
