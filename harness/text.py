"""Text the harness writes and shows: JSON text for any string, and hostile text made inert.

**Inert text.** The one rule that makes hostile text inert: every control, invisible or bidi
character an attempt's text holds is shown as its escape, on a terminal, in a table or in HTML,
and never obeyed.

**JSON text.** JSON text for any Python string, lone surrogates included.

A lone surrogate reaches the harness two ways: a file name that is not UTF-8 (``os.fsdecode``
turns byte 0xff into ``"\\udcff"``) and a model's tool-call JSON holding an unpaired
``\\ud800`` escape, which ``json.loads`` returns as it is. Such a string has no UTF-8 encoding,
so ``json.dumps(..., ensure_ascii=False).encode()`` and pydantic's ``model_dump_json`` refuse
it. Here each lone surrogate is written as its ``\\uXXXX`` escape (everything else stays
UTF-8), which ``json.loads`` turns back into the same string: nothing is lost, nothing is
refused.

One thing JSON itself cannot carry: a high surrogate directly followed by a low one as two
separate code points reads back as the one character they pair into. Neither source above
produces that (``json.loads`` already pairs escapes; file names yield low surrogates only).
"""

from __future__ import annotations

import json
import re
from typing import Any

# -- inert text ------------------------------------------------------------------------------
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


# -- JSON text -------------------------------------------------------------------------------
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_dumps(obj: Any, *, sort_keys: bool = False, indent: int | None = None,
          compact: bool = False) -> str:
    """``json.dumps`` with UTF-8 text kept as it is and lone surrogates escaped."""
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, sort_keys=sort_keys,
                      indent=indent, separators=(",", ":") if compact else None)
    # A surrogate can only sit inside a string literal, where its escape means the same.
    return _LONE_SURROGATE.sub(_escape, text)


def first_lone_surrogate(text: str) -> tuple[int, str] | None:
    """(index, ``U+XXXX``) of the first lone surrogate in ``text``, or None."""
    match = _LONE_SURROGATE.search(text)
    return None if match is None else (match.start(), f"U+{ord(match.group()):04X}")


def scrub_surrogates(value: Any) -> Any:
    """A copy of ``value`` whose strings hold U+FFFD where they held a lone surrogate.

    For what must travel as UTF-8 (an HTTP body the SDKs encode); records keep the original.
    """
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {scrub_surrogates(k): scrub_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_surrogates(item) for item in value]
    return value
