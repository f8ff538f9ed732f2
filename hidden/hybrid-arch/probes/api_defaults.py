"""Run as the one process of a cpu-1 launch: training through the Python API at every default.

Usage: python api_defaults.py OUT_DIR

Runs as the candidate uid against whichever tree is its working directory (the graded tree or
the pristine baseline), so it holds no expected value and no canary: ``run(TrainConfig(out=...))``
with nothing else set, the package's own defaults deciding the seed, steps, batch, optimizer,
dtype and model. The run writes OUT_DIR/run/{metrics.jsonl,final_state.pt,summary.json}.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hybridlm.trainer import TrainConfig, run


def main() -> int:
    run(TrainConfig(out=Path(sys.argv[1]) / "run"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
