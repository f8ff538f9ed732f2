"""An attempt's timeline on the terminal: filters, search, and the rows ``harness replay``
prints."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from rich.console import Console
from rich.table import Table
from rich.text import Text

from harness.audit.replay import SEARCH_TEXT_BYTES, Replay, ReplayEvent, Snapshot, is_blob_ref
from harness.text import inert_block, one_line


class Filters(BaseModel):
    kinds: list[str] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    grep: str | None = None

    def active(self) -> bool:
        return bool(self.kinds or self.tools or self.grep)


def searchable(replay: Replay, event: ReplayEvent) -> str:
    """The text a search looks in: kind, tool, problem, and every string of the data (blobs
    read, each up to SEARCH_TEXT_BYTES)."""
    parts = [event.kind, event.tool or "", event.problem or ""]

    def walk(value: Any, depth: int) -> None:
        if depth > 64:
            return
        if isinstance(value, str):
            parts.append(value[:SEARCH_TEXT_BYTES])
        elif is_blob_ref(value):
            parts.append(replay.text(value, SEARCH_TEXT_BYTES).text)
        elif isinstance(value, dict):
            for key, item in value.items():
                parts.append(str(key))
                walk(item, depth + 1)
        elif isinstance(value, list):
            for item in value:
                walk(item, depth + 1)
        elif value is not None:
            parts.append(str(value))

    walk(event.data, 0)
    return "\n".join(parts)


def select(replay: Replay, filters: Filters) -> list[ReplayEvent]:
    """The events that pass every filter; a damaged line always does (never hidden)."""
    needle = filters.grep.casefold() if filters.grep else None
    chosen = []
    for event in replay.events:
        if event.status == "damaged":
            chosen.append(event)
            continue
        if filters.kinds and event.kind not in filters.kinds:
            continue
        if filters.tools and event.tool not in filters.tools:
            continue
        if needle is not None and needle not in searchable(replay, event).casefold():
            continue
        chosen.append(event)
    return chosen


def cell(text: str, style: str = "") -> Text:
    # A Text, never a str: rich would read "[bold]" in a str cell as markup.
    return Text(inert_block(text), style=style)


def snapshot_grade_line(snapshot: Snapshot) -> str:
    if snapshot.grade is None:
        return "not graded"
    counts: dict[str, int] = {}
    for outcome in snapshot.grade.contracts.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    return f"{snapshot.grade.verdict} ({', '.join(f'{k} {v}' for k, v in counts.items())})"


def cap_shown(replay: Replay, key: str) -> str:
    cap = replay.caps.get(key)
    return "" if cap is None else f"/{cap}"


COLUMNS = (("line", "right"), ("seq", "right"), ("+s", "right"), ("kind", "left"),
            ("tool", "left"), ("detail", "left"), ("exit", "right"), ("tokens", "right"),
            ("calls", "right"), ("runs", "right"), ("chain", "left"))


def banner_row(text: str) -> Text:
    # Printed between two tables of the same widths, so that no column cuts it.
    return cell(text, "bold red")


def print_timeline(replay: Replay, events: list[ReplayEvent], console: Console, *,
                   filters: Filters | None = None) -> None:
    """The header (verification first), one row per event, and the grades."""
    ok = replay.verification.ok
    console.print(cell(replay.verification.line(), "bold green" if ok else "bold red"))
    record = replay.record or {}
    facts = [f"attempt {replay.attempt_dir}"]
    if record:
        facts.append(f"{record.get('study')}/{record.get('session_id')} attempt "
                     f"{record.get('attempt')}: task {record.get('task')}, arm "
                     f"{record.get('arm')}, model {record.get('model')}, status "
                     f"{record.get('status')}, outcome {record.get('outcome')}")
    elif replay.record_problem:
        facts.append(replay.record_problem)
    for fact in facts:
        console.print(cell(one_line(fact, 400)))

    rows: list[list[Text] | Text] = []
    snapshots = {s.line: s for s in replay.snapshots}
    broken_at = replay.verification.break_line
    marked = False
    for event in events:
        if broken_at is not None and not marked and event.line >= broken_at:
            marked = True
            rows.append(banner_row(
                f"---- the chain breaks at line {broken_at}: {replay.verification.error} ----"))
        if event.status == "damaged":
            rows.append([cell(str(event.line)), cell(""), cell(""), cell("DAMAGED", "red"),
                         cell(""), cell(one_line(event.problem or "", 200), "red"),
                         *(cell("") for _ in range(4)), cell("DAMAGED", "bold red")])
            continue
        detail = one_line(event.summary, 200)
        if event.line in snapshots:
            detail += f" -> grade: {snapshot_grade_line(snapshots[event.line])}"
        style = "red" if event.status == "unverified" else (
            "magenta" if event.diagnostic else "")
        p = event.progress
        rows.append([
            cell(str(event.line)), cell("" if event.seq is None else str(event.seq)),
            cell("" if event.offset_s is None else f"{event.offset_s:.1f}"),
            cell(one_line(event.kind, 30), style), cell(one_line(event.tool or "", 24), style),
            cell(detail, style), cell("" if event.exit_code is None else str(event.exit_code)),
            cell(f"{p.tokens_total}{cap_shown(replay, 'tokens_total')}"),
            cell(f"{p.tool_calls}{cap_shown(replay, 'tool_calls')}"),
            cell(f"{p.candidate_runs}{cap_shown(replay, 'candidate_runs')}"),
            cell("ok" if event.status == "verified" else "UNVERIFIED",
                  "green" if event.status == "verified" else "bold red")])
    if replay.verification.at_end:
        rows.append(banner_row(f"---- the transcript's end does not match the record: "
                                f"{replay.verification.error} ----"))
    # Every column but the detail as wide as its widest cell; the detail takes what is left
    # and is cut (one row per event; the HTML viewer has everything whole).
    cells = [r for r in rows if isinstance(r, list)]
    widths = [max([len(name)] + [r[i].cell_len for r in cells if name != "detail"])
              for i, (name, _justify) in enumerate(COLUMNS)]
    detail_column = COLUMNS.index(("detail", "left"))
    rest = sum(w for i, w in enumerate(widths) if i != detail_column) + 2 * (len(COLUMNS) - 1)
    widths[detail_column] = max(30, console.width - rest)

    def new_table(header: bool) -> Table:
        table = Table(show_header=header, pad_edge=False, box=None, header_style="bold")
        for (name, justify), width in zip(COLUMNS, widths, strict=True):
            table.add_column(name, justify=justify, no_wrap=True,  # type: ignore[arg-type]
                             overflow="ellipsis", width=width)
        return table

    table = new_table(header=True)
    for row in rows:
        if isinstance(row, Text):
            console.print(table)
            console.print(row)
            table = new_table(header=False)
        else:
            table.add_row(*row)
    console.print(table)

    shown = f"{len(events)} of {len(replay.events)} lines shown"
    if filters is not None and filters.active():
        shown += (f" (filters: kind {filters.kinds or 'any'}, tool {filters.tools or 'any'}, "
                  f"grep {filters.grep!r}; damaged lines are always shown)")
    console.print(cell(shown))
    for snapshot in replay.snapshots:
        console.print(cell(one_line(
            f"snapshot {snapshot.id} (line {snapshot.line}, +{snapshot.offset_s} s, after "
            f"{snapshot.trigger}): {len(snapshot.files_changed)} file(s); grade: "
            f"{snapshot_grade_line(snapshot)}", 300)))
    if replay.grade is not None:
        counts: dict[str, int] = {}
        for contract in replay.grade.contracts:
            counts[contract.outcome] = counts.get(contract.outcome, 0) + 1
        console.print(cell(one_line(
            f"final grade ({replay.grade.folder}): {replay.grade.shown}; contracts "
            + (", ".join(f"{k} {v}" for k, v in counts.items()) or "-")
            + (f"; {replay.grade.problem}" if replay.grade.problem else ""), 400)))
    else:
        console.print(cell("final grade: not graded"))
