"""The one rule that makes hostile text inert: every control, invisible or bidi character an
attempt's text holds is shown as its escape, on a terminal, in a table or in HTML, and never
obeyed."""

from __future__ import annotations

import re

# What a timeline row shows of an output or a message.
HEAD_CHARS = 160

# C0/C1 controls (ESC included), DEL, zero-width and bidi controls, line/paragraph separators,
# BOM, interlinear annotations and lone surrogates: each is shown as its escape, never sent.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
    "\ufff9-\ufffb\ud800-\udfff]"
)


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert_block(text: str) -> str:
    """``text`` with newlines and tabs kept and every other unsafe character escaped."""
    return _UNSAFE.sub(_escape_char, text)


def one_line(text: str, limit: int = HEAD_CHARS) -> str:
    """The head of ``text`` on one inert line: newlines as ``⏎``, at most ``limit`` chars."""
    flat = text.strip().replace("\r\n", "\n").replace("\n", " ⏎ ").replace("\t", " ")
    cut = flat[: limit * 2]  # escapes make it longer, never shorter
    shown = inert_block(cut)
    if len(shown) > limit or len(flat) > len(cut):
        return shown[: max(0, limit - 1)] + "…"
    return shown
