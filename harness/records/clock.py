"""The one timestamp format of every record the harness writes."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_timestamp() -> str:
    """Now, as ISO-8601 UTC with microseconds (``2024-05-01T12:00:00.123456Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
