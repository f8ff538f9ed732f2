"""A task's training command line as the runner edits it, and the checkpoints a run leaves."""

from __future__ import annotations

import re
from pathlib import Path

_STEP_SUFFIX = re.compile(r"(\d+)$")


def option_value(args: list[str], name: str) -> str | None:
    for i, word in enumerate(args):
        if word == name and i + 1 < len(args):
            return args[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def with_option(args: list[str], name: str, value: str) -> list[str]:
    """``args`` with ``name``'s value replaced (or the option appended)."""
    out, i, found = [], 0, False
    while i < len(args):
        if args[i] == name and i + 1 < len(args):
            out += [name, value]
            i, found = i + 2, True
        elif args[i].startswith(name + "="):
            out += [name, value]
            i, found = i + 1, True
        else:
            out.append(args[i])
            i += 1
    return out if found else [*out, name, value]


def checkpoints(ckpt_dir: Path) -> dict[int, Path]:
    """Checkpoint sub-folders by step (``step_4`` and ``step-4`` both name step 4)."""
    found = {}
    if ckpt_dir.is_dir():
        for child in ckpt_dir.iterdir():
            match = _STEP_SUFFIX.search(child.name)
            if child.is_dir() and match:
                found[int(match.group(1))] = child
    return dict(sorted(found.items()))
