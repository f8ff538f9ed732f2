# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""Hidden checks of train.py with --layer-pattern: the pattern used, and the quality objective.

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

Every train.py process runs as the candidate uid (``grading.run``/``grading.launch``); the
judge reads the sealed outputs as data.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from grading.probe import CandidateRunFailed
from grading.run import run_command
from oracle_lib import PATTERN, check_key_schema, run_env, workdir

# Quality band for the held-out loss of `train.py --config cpu-1 --layer-pattern AMAM --seed 0`
# (200 steps). Measured (QUALIFICATION.md): reference 0.639 (seed 0; seeds 0-2 mean 0.636, std
# 0.004), all-attention baseline 0.721. Upper bound: the reference + 0.04, i.e. half of the
# hybrid's measured gain over all attention and ~10 seed standard deviations above the
# reference, so a working mixer of another design passes while a stack that gains nothing
# from its mixers (>= 0.72) fails. Lower bound: the data source's floor (0.55, QUALIFICATION.md):
# a held-out loss below it means the model sees tokens it must predict (a non-causal mixer).
QUALITY_REFERENCE = 0.639
QUALITY_LOW, QUALITY_HIGH = 0.55, 0.68
BAD_PATTERN_TIMEOUT_S = 120


def test_cli_layer_pattern_is_used_and_recorded(cli_run: Any, record_property: Any) -> None:
    """train.py --layer-pattern AMM (no --n-layers) builds 3 layers with that pattern, records it in summary.json, and a pattern with other characters is rejected."""
    record_property("oracle", "reference")
    record_property("configurations", "cpu-1")
    record_property("tolerance", "exact (strings, key sets)")
    record_property("why", "TASK.md: --n-layers defaults to the pattern's length; "
                    "summary['model']['layer_pattern'] is the pattern used")
    cli_run.require(record_property)
    summary = cli_run.summary()
    model = summary.get("model", {})
    record_property("summary_model", str(model))
    assert model.get("layer_pattern") == "AMM", model
    assert model.get("n_layers") == 3, model
    assert len(cli_run.metrics()) == 2
    final = cli_run.final()
    problems = check_key_schema(final["model"], "AMM")
    assert problems == [], problems

    root = workdir()
    log = Path(tempfile.mkdtemp(prefix="bad-pattern-")) / "run.log"
    res = run_command([sys.executable, "train.py", "--config", "cpu-1", "--layer-pattern",
                       "AXA", "--steps", "1"], cwd=root, env=run_env(root),
                      timeout_s=BAD_PATTERN_TIMEOUT_S, log_path=log)
    if res.timed_out:
        raise CandidateRunFailed("hang", f"train.py --layer-pattern AXA still running after "
                                 f"{BAD_PATTERN_TIMEOUT_S} s\n{log.read_text()[-2000:]}")
    # As subprocess reports it: the exit code, or minus the signal that killed it.
    returncode = res.exit_code if res.exit_code is not None else -(res.signal or 0)
    record_property("bad_pattern_exit_code", returncode)
    assert returncode != 0, "--layer-pattern AXA was accepted"


def test_quality_heldout_loss(quality_run: Any, record_property: Any) -> None:
    """Held-out loss after the default 200 cpu-1 steps with --layer-pattern AMAM (seed 0) lies in [0.55, 0.68] (reference 0.639, all-attention 0.721)."""
    record_property("oracle", "reference")
    record_property("configurations", "cpu-1")
    record_property("tolerance", f"[{QUALITY_LOW}, {QUALITY_HIGH}]")
    record_property("why", "reference 0.639 (seed std 0.004), all-attention baseline 0.721; the "
                    "upper bound is half the hybrid's measured gain, the lower bound the "
                    "source's entropy floor 0.55 (lower means the model sees the future)")
    record_property("reference_value", QUALITY_REFERENCE)
    quality_run.require(record_property)
    summary = quality_run.summary()
    assert summary.get("model", {}).get("layer_pattern") == PATTERN, summary.get("model")
    assert summary["steps"] == 200 and summary["seed"] == 0
    loss = float(summary["heldout_loss"])
    record_property("heldout_loss", loss)
    record_property("train_s", summary.get("train_s"))
    assert QUALITY_LOW <= loss <= QUALITY_HIGH, (
        f"held-out loss {loss:.4f} outside [{QUALITY_LOW}, {QUALITY_HIGH}] "
        f"(reference {QUALITY_REFERENCE})")
