"""JSON text for any Python string, lone surrogates included.

A lone surrogate reaches the harness two ways: a file name that is not UTF-8 (``os.fsdecode``
turns byte 0xff into ``"\\udcff"``) and a model's tool-call JSON holding an unpaired ``\\ud800``
escape, which ``json.loads`` returns as it is. Such a string has no UTF-8 encoding, so
``json.dumps(..., ensure_ascii=False).encode()`` and pydantic's ``model_dump_json`` refuse it.
Here each lone surrogate is written as its ``\\uXXXX`` escape (everything else stays UTF-8),
which ``json.loads`` turns back into the same string: nothing is lost, nothing is refused.

One thing JSON itself cannot carry: a high surrogate directly followed by a low one as two
separate code points reads back as the one character they pair into. Neither source above
produces that (``json.loads`` already pairs escapes; file names yield low surrogates only).
"""

from __future__ import annotations

import json
import re
from typing import Any

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def dumps(obj: Any, *, sort_keys: bool = False, indent: int | None = None,
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


def scrub(value: Any) -> Any:
    """A copy of ``value`` whose strings hold U+FFFD where they held a lone surrogate.

    For what must travel as UTF-8 (an HTTP body the SDKs encode); records keep the original.
    """
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(item) for item in value]
    return value
