"""Reading TrainCheck trace folders: which process is which rank, and what was recorded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def records(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON records of one trace file (one per line); a torn last line is skipped."""
    with path.open(errors="replace") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def record_rank(record: dict[str, Any]) -> int | None:
    meta = record.get("meta_vars") or {}
    rank = meta.get("rank")
    return rank if isinstance(rank, int) else None


def file_rank(path: Path) -> int | None:
    """The rank a process's trace file belongs to: the first record that carries one."""
    for record in records(path):
        rank = record_rank(record)
        if rank is not None:
            return rank
    return None


def trace_files(trace_dir: Path, kind: str) -> list[Path]:
    return sorted(trace_dir.glob(f"trace_{kind}_*"))


def rank_traces(trace_dir: Path) -> dict[int, dict[str, Any]]:
    """Per rank: its API and VAR trace files and their record counts."""
    ranks: dict[int, dict[str, Any]] = {}
    for kind in ("API", "VAR"):
        for path in trace_files(trace_dir, kind):
            rank = file_rank(path)
            if rank is None:
                continue
            entry = ranks.setdefault(rank, {"api_files": [], "var_files": [],
                                            "api_records": 0, "var_records": 0})
            entry[f"{kind.lower()}_files"].append(path.name)
            entry[f"{kind.lower()}_records"] += sum(1 for _ in records(path))
    return ranks
