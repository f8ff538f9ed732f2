"""Resume pairing (``python -m diagnostics resume-*``) in the real treatment image.

Real torchrun gloo ranks traced by real ``traincheck-collect``, with the training state
observed beside the parameters (optimizer moments, the scheduler's counters, each rank's
generator): rules learned from one healthy straight/resumed pair hold on a
healthy pair at another seed, and a resume that forgets the ranks' random generators breaks
exactly the generator's rule, on both ranks, from the first resumed step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import docker
import pytest

from harness.errors import HarnessError
from harness.traincheck.box import RUNS, DiagnosticsBox

TREE = Path(__file__).parents[1] / "fixtures" / "diag_tree"
SAVE_EVERY = 1
# How the fixture saves and resumes, as a packet declares it (diagnostics.resume).
SPEC = json.dumps({"save_every": SAVE_EVERY, "save_args": ["--ckpt", "{ckpt}", "--save-every",
                                                           "{k}"],
                   "resume_args": ["--resume", "{checkpoint}"], "checkpoint": "{ckpt}/step_{k}"})


@pytest.fixture(scope="module")
def box(client: docker.DockerClient) -> DiagnosticsBox:
    with DiagnosticsBox(client, "resume-test") as opened:
        yield opened


def _probe(box: DiagnosticsBox, src: str, name: str, *args: str) -> dict[str, Any]:
    result = box.call(["resume-probe", "--src", src, "--out", f"{RUNS}/{name}", "--config",
                       "gloo-ddp-2", "--spec", SPEC, "--wall-s", "240", "--",
                       "--steps", "3", *args], timeout_s=600)
    assert result["outcome"] == "ok", result.get("cause")
    return result


def test_resume_rules_hold_on_healthy_runs_and_catch_a_forgotten_generator(
        box: DiagnosticsBox) -> None:
    src = box.put_tree("resume", TREE)
    learned = _probe(box, src, "learn", "--seed", "0")
    # The resumed run numbers its steps from the checkpoint's.
    assert learned["resumed"]["first_step"] == SAVE_EVERY
    assert learned["straight"]["observe_state"] and learned["resumed"]["observe_state"]
    made = box.call(["resume-learn", "--probe", f"{RUNS}/learn", "--out", f"{RUNS}/rules.jsonl"],
                    timeout_s=120)
    rules = [line for line in box.read_bytes(f"{RUNS}/rules.jsonl").decode().splitlines()
             if line.strip()]
    assert made["n_rules"] == len(rules) > 0
    # The observed state beyond parameters: each rank's generator and the optimizer's moments.
    assert any('"state.rng.torch"' in r for r in rules)
    assert any('"state.optim.model.0.weight.momentum_buffer"' in r for r in rules)
    assert any('"state.sched.0.last_epoch"' in r for r in rules)  # the lr scheduler's counter

    _probe(box, src, "healthy", "--seed", "5")
    healthy = box.call(["resume-check", "--probe", f"{RUNS}/healthy", "--rules",
                        f"{RUNS}/rules.jsonl"], timeout_s=120)
    assert healthy["outcome"] == "ok" and healthy["n_checked"] == len(rules)
    assert healthy["violations"] == [] and healthy["n_not_triggered"] == 0

    _probe(box, src, "forgot-rng", "--seed", "5", "--forget-on-resume", "rng")
    faulty = box.call(["resume-check", "--probe", f"{RUNS}/forgot-rng", "--rules",
                       f"{RUNS}/rules.jsonl"], timeout_s=120)
    rng = [v for v in faulty["violations"] if v["rule"].startswith("state.rng.torch.")]
    assert len(rng) == 1 and rng[0]["ranks"] == [0, 1] and rng[0]["first_step"] == SAVE_EVERY
    assert rng[0]["relation"] == "ResumePreservation"


def test_a_probe_whose_straight_run_crashes_is_that_outcome(box: DiagnosticsBox) -> None:
    src = box.put_tree("resume-crash", TREE)
    result = box.call(["resume-probe", "--src", src, "--out", f"{RUNS}/crash", "--config",
                       "gloo-ddp-2", "--spec", SPEC, "--wall-s", "240", "--", "--steps",
                       "3", "--seed", "0", "--crash-rank", "1"], timeout_s=600)
    assert result["outcome"] == "crash" and result["resumed"] is None
    assert result["cause"].startswith("straight run: rank 1")
    # A checkpoint the straight run did not leave is that outcome, with no resumed run.
    elsewhere = json.loads(SPEC) | {"checkpoint": "{ckpt}/step_9"}
    missing = box.call(["resume-probe", "--src", src, "--out", f"{RUNS}/no-ckpt", "--config",
                        "cpu-1", "--spec", json.dumps(elsewhere), "--wall-s", "240", "--",
                        "--steps", "3", "--seed", "0"], timeout_s=600)
    assert missing["outcome"] == "no_checkpoint" and missing["resumed"] is None
    assert "step_9" in missing["cause"]
    # A probe with no step left to resume is refused before anything runs.
    with pytest.raises(HarnessError, match="must exceed the checkpoint step"):
        box.call(["resume-probe", "--src", src, "--out", f"{RUNS}/no-step", "--config",
                  "cpu-1", "--spec", json.dumps(json.loads(SPEC) | {"save_every": 3}), "--",
                  "--steps", "3", "--seed", "0"], timeout_s=120)
