# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""A training run's ``train.py --export`` program, judged (shared by the cpu-1 and gloo-fsdp-2
checks).

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

The judge walks the saved archive itself (``exported_graph``: its JSON, no unpickling), runs it
with ``graph_exec`` and compares it with the run's sealed final state and with the judge's own
program of the same pattern: nothing the candidate reports about the export is trusted.
"""

from __future__ import annotations

from typing import Any

import graph_exec
import judge_replay
import torch
from oracle_lib import (
    ALLOWED_EXPORT_OPS,
    check_key_schema,
    exported_graph,
    kept_environment,
    tokens,
    tree_max_diff,
)

from grading.compare import as_tensor, max_abs_diff, within


def check_run_export(run: Any, pattern: str, programs: Any, record_property: Any, *,
                     label: str, weights_tol: float, logits_tol: float) -> None:
    """``run``'s ``model.pt2`` is the program of its final full model: its keys are the final
    state's and follow ``pattern``'s schema, it uses only allow-listed operators, every weight
    it holds is the final model's (within ``weights_tol``, compared in fp64: an fp64 run's
    export holds fp32 copies), and it computes what the judge's fp32 ``pattern`` program does
    with those weights (``logits_tol``). ``label`` names the run in messages and prefixes the
    recorded properties."""
    path = run.out / "model.pt2"
    assert path.exists(), f"{label}: train.py --export wrote no program"
    own, program_keys = exported_graph(path)
    final = run.final()
    assert isinstance(final.get("model"), dict), f"{label}: final_state.pt holds no model state"
    assert program_keys == set(final["model"]), (
        f"{label}: the exported keys differ from the final model's: "
        f"{sorted(program_keys ^ set(final['model']))[:6]}")
    problems = check_key_schema(program_keys, pattern)
    assert problems == [], f"{label}: the exported keys are not the {pattern} schema: {problems}"
    record_property(f"{label}_ops", ",".join(sorted(own)))
    assert own <= ALLOWED_EXPORT_OPS, sorted(own - ALLOWED_EXPORT_OPS)
    program = graph_exec.load(path, ALLOWED_EXPORT_OPS)
    weights = graph_exec.archive_state(program)
    weights_err = tree_max_diff({k: v.double() for k, v in weights.items()},
                                {k: as_tensor(v) for k, v in final["model"].items()})
    record_property(f"{label}_weights_vs_final_max_abs_diff", weights_err)
    assert within(weights_err, weights_tol), (
        f"{label}: the exported weights differ from the final full model's by {weights_err}")
    # The judge's program was exported for the global batch, train.py's for one sequence.
    batch = tokens(batch=judge_replay.GLOBAL_BATCH, seed=3)
    as_fp32 = {k: v.to(torch.float32) for k, v in weights.items()}
    with torch.no_grad(), judge_replay.one_thread(), kept_environment():
        got = program(weights, batch[:1])
        want = programs.get(f"{pattern}-float32")(as_fp32, batch)[:1]
    err = max_abs_diff(got, want)
    record_property(f"{label}_vs_judge_{pattern}_program", err)
    assert within(err, logits_tol), (
        f"{label}: the exported program's logits differ from the {pattern} model's with its "
        f"weights by {err}")
