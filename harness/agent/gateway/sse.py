"""Server-sent events, as the model APIs stream them: ``event:``/``data:`` lines, a blank line
ending each event. The body is already bounded by the gateway's response cap; this never
recurses and keeps no more than the body itself."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SseEvent:
    event: str  # "" when the server named none (OpenAI's chat chunks)
    data: str


def parse_sse(body: bytes) -> list[SseEvent]:
    """Every event of a complete SSE body (CRLF or LF line ends; comments skipped)."""
    text = body.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    events: list[SseEvent] = []
    name, data = "", list[str]()
    for line in text.split("\n"):
        if not line:
            if data or name:
                events.append(SseEvent(event=name, data="\n".join(data)))
            name, data = "", list[str]()
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    if data or name:
        events.append(SseEvent(event=name, data="\n".join(data)))
    return events
