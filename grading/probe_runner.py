"""Candidate side of a probe: ``python -m grading.probe_runner MODULE FUNCTION INPUTS OUTPUTS``.

Runs as the candidate uid, on the candidate tree (``grading.probe`` explains why). It loads the
inputs, calls ``MODULE.FUNCTION(**inputs)`` and writes ``{"ok": True, "result": ...}``, or
``{"ok": False, "error": ..., "traceback": ...}`` when the call raised. Nothing here is trusted
by the judge beyond being data.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from pathlib import Path

from grading.probe import dump, load


def main(argv: list[str]) -> int:
    module, function, inputs_path, outputs_path = argv
    inputs = load(Path(inputs_path))
    try:
        result = getattr(importlib.import_module(module), function)(**inputs)
        payload = {"ok": True, "result": result}
    except Exception as exc:
        payload = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000],
                   "traceback": traceback.format_exc()[-6000:]}
    dump(payload, Path(outputs_path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
