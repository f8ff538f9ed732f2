"""Hidden checks of the moe-router feature that train: the candidate's train.py, 1 and 2 ranks.

HARNESS-CANARY-8a0e5fe7-3b11-4c19-b138-53348751b84e
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

The runs are the session fixtures of conftest.py (each launched once, as the candidate uid,
into a job folder sealed before it is read); this process never imports candidate code. The
checks read the runs' outputs as data (``weights_only`` tensors, JSON), and call the
candidate's API (export schema, ``load_export``, the trainer's initial model) through
``probes/moe_probe.py`` in a sealed process (``grading.probe``). Expected values are computed
here. Tolerances are the declared ones of QUALIFICATION.md (measured on the reference solution
and the dense baseline): (a) cpu-1 vs gloo-ddp-2 in fp64 1e-10, (b) resume bitwise,
(c) gloo-fsdp-2 vs gloo-ddp-2 bitwise, (d) held-out loss within 0.07 above the reference's.
"""

# HARNESS-CANARY-8a0e5fe7-3b11-4c19-b138-53348751b84e

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

import moe_reference as R
import probe_balance_spec as P
from conftest import (
    EQ_STEPS,
    RESUME_AT,
    RESUME_STEPS,
    STARVE_STEPS,
    Run,
    baseline_dir,
    train,
)
from grading import probe, sealed
from oracle_util import compare_states

PROBE = "moe_probe"
PROBE_TIMEOUT_S = 120.0

DDP_VS_ONE_FP64_TOL = 1e-10
REFERENCE_HELDOUT = 2.8218724727630615  # reference, cpu-1 fp32 seed 0, 200 steps
QUALITY_BAND = 0.07


def _record(record_property: Any, **props: Any) -> None:
    for key, value in props.items():
        record_property(key, value)


def test_ddp_matches_one_process_fp64(cpu1_fp64: Run, ddp_fp64: Run,
                                      record_property: Any) -> None:
    """With MoE (E 4, top-2, F 1.25, W 0.01) in fp64, gloo-ddp-2 and cpu-1 at the same global batch (16) end with the same model and optimizer state after 30 steps (max abs diff <= 1e-10) and log the same per-step loss."""
    _record(record_property, oracle="differential", configurations="cpu-1,gloo-ddp-2",
            tolerance=f"{DDP_VS_ONE_FP64_TOL:g} max abs (model and optimizer, fp64)",
            why="QUALIFICATION (a): cpu-1 vs gloo-ddp-2 fp64 after 200 steps measured 1.25e-15 "
                "(MoE) and 5.35e-15 (dense), never bitwise (reduction order); declared 100x the "
                "worst, at least 1e-10; a per-rank balance statistic moves it by >= 1e-6",
            runs=f"{cpu1_fp64.evidence()}; {ddp_fp64.evidence()}")
    one, ddp = cpu1_fp64.final_state(), ddp_fp64.final_state()
    cmp = compare_states(one, ddp)
    m_one, m_ddp = cpu1_fp64.metrics(), ddp_fp64.metrics()
    # The logged loss is the fp64 cross-entropy; the logged aux loss is rounded to fp32 by the
    # trainer (reported, not graded).
    worst_log = max((abs(a["loss"] - b["loss"]) for a, b in zip(m_one, m_ddp)), default=math.inf)
    worst_aux = max((abs(a["aux_loss"] - b["aux_loss"]) for a, b in zip(m_one, m_ddp)),
                    default=math.inf)
    record_property("measured", f"model {cmp['model_max_abs_diff']:.3g}, optimizer "
                    f"{cmp['optim_max_abs_diff']:.3g}, logged loss {worst_log:.3g}, logged aux "
                    f"(fp32) {worst_aux:.3g}")
    assert len(m_one) == len(m_ddp) == EQ_STEPS, (len(m_one), len(m_ddp))
    assert cmp["max_abs_diff"] <= DDP_VS_ONE_FP64_TOL, f"gloo-ddp-2 vs cpu-1: {cmp}"
    assert worst_log <= DDP_VS_ONE_FP64_TOL, f"logged losses differ by {worst_log:g}"


def test_fsdp_matches_ddp_bitwise(ddp_fp64: Run, fsdp_fp64: Run, record_property: Any) -> None:
    """With MoE in fp64, gloo-fsdp-2's reconstructed full model and optimizer state after 30 steps is bit-for-bit gloo-ddp-2's."""
    _record(record_property, oracle="differential", configurations="gloo-ddp-2,gloo-fsdp-2",
            tolerance="bitwise",
            why="QUALIFICATION (c): measured bitwise (0) in fp32 and fp64 for the dense baseline "
                "and the MoE reference (no clipping: reduce-scatter and all-reduce average the "
                "same two gradients)",
            runs=f"{ddp_fp64.evidence()}; {fsdp_fp64.evidence()}")
    cmp = compare_states(ddp_fp64.final_state(), fsdp_fp64.final_state())
    record_property("measured", f"bitwise {cmp['bitwise_equal']}, max abs "
                    f"{cmp['max_abs_diff']:.3g}")
    assert cmp["bitwise_equal"], f"gloo-fsdp-2 vs gloo-ddp-2: {cmp}"


def test_resume_ddp_bitwise(resume_pair: tuple[Run, Run | None], record_property: Any) -> None:
    """With MoE and dropout 0.1 under gloo-ddp-2 (fp32), a fresh launch resumed from the step-10 checkpoint ends at step 20 bit-for-bit like the uninterrupted run (model, optimizer, scheduler lr, per-rank RNG via the dropout masks, logged losses)."""
    full, resumed = resume_pair
    _record(record_property, oracle="differential", configurations="gloo-ddp-2",
            tolerance="bitwise",
            why="QUALIFICATION (b): resume vs uninterrupted measured bitwise on every "
                "configuration, fp32 and fp64 (same launch shape and ops, restored RNG, "
                "scheduler and data position)",
            runs=f"{full.evidence()}; {resumed.evidence() if resumed else 'resume not run'}")
    full.require()
    if resumed is None:
        pytest.fail(f"the uninterrupted run left no checkpoint step_{RESUME_AT}", pytrace=False)
    resumed.require()
    cmp = compare_states(full.final_state(), resumed.final_state())
    m_full = {m["step"]: m for m in full.metrics()}
    m_res = {m["step"]: m for m in resumed.metrics()}
    later = [s for s in range(RESUME_AT, RESUME_STEPS)]
    log_same = all(s in m_res and all(m_res[s][k] == m_full[s][k] for k in
                                      ("loss", "aux_loss", "lr")) for s in later)
    record_property("measured", f"bitwise {cmp['bitwise_equal']}, model "
                    f"{cmp['model_max_abs_diff']:.3g}, optimizer {cmp['optim_max_abs_diff']:.3g},"
                    f" logged steps {RESUME_AT}-{RESUME_STEPS - 1} equal {log_same}")
    assert cmp["bitwise_equal"], f"resumed vs uninterrupted: {cmp}"
    assert log_same, "the resumed run logged other losses or learning rates for steps " \
        f"{RESUME_AT}..{RESUME_STEPS - 1}"


def _exception_repr(exc: Exception) -> str:
    """How the evidence names an exception: the candidate's own, as it raised it."""
    if isinstance(exc, probe.CandidateRaised):
        name, _, message = exc.error.partition(": ")
        return f"{name}({message!r})"
    return repr(exc)


def _idle_expert_slots() -> str:
    """Evidence: (rank, layer, expert) slots with no token at step 0 under the trainer's init."""
    cfg = R.Cfg(experts=16, top_k=1, capacity_factor=16.0, aux_weight=0.0, ffn_hidden=32)
    seen = probe.call(PROBE, "trainer_init", timeout_s=PROBE_TIMEOUT_S,
                      model_config=cfg.model_config_kwargs(), vocab=64, seq_len=32,
                      global_batch=2, seed=0, world=2)
    if "error" in seen:
        return f"could not compute: {seen['error']}"
    params = seen["params"]
    if set(params) != set(R.schema(cfg)):
        return "unknown (state dict keys differ from the export schema)"
    if "slices_error" in seen:
        return f"could not compute: {seen['slices_error']}"
    idle = []
    with torch.no_grad():
        for rank in range(2):
            ref = R.forward(params, seen["slices"][rank][:, :-1], cfg)
            idle.append([int((s.counts == 0).sum()) for s in ref.layers])
    return f"idle experts per rank and layer at step 0: {idle} (total {sum(map(sum, idle))})"


def test_starved_expert_stays_synchronised(starvation_pair: tuple[Run, Run],
                                           record_property: Any) -> None:
    """With 16 experts, top-1, one sequence per rank (so experts get no token on a rank) and aux weight 0, gloo-ddp-2 runs 4 steps and ends with the cpu-1 model and optimizer state (fp64, 1e-10): every expert takes part in gradient synchronisation."""
    one, ddp = starvation_pair
    _record(record_property, oracle="differential", configurations="cpu-1,gloo-ddp-2",
            tolerance=f"{DDP_VS_ONE_FP64_TOL:g} max abs (fp64)",
            why="QUALIFICATION starvation probe (8 experts, top-1, 1 sequence per rank): "
                "gloo-ddp-2 vs cpu-1 3.77e-15 with an idle expert; same rule as (a). Capacity "
                "factor 16 drops nothing and aux weight 0 removes the balance statistics, so "
                "only expert synchronisation is tested",
            runs=f"{one.evidence()}; {ddp.evidence()}")
    try:
        record_property("starvation", _idle_expert_slots())
    except Exception as exc:  # noqa: BLE001 - evidence only (a crashed probe included)
        record_property("starvation", f"could not compute: {_exception_repr(exc)}")
    one.require()
    ddp.require()
    cmp = compare_states(one.final_state(), ddp.final_state())
    record_property("measured", f"model {cmp['model_max_abs_diff']:.3g}, optimizer "
                    f"{cmp['optim_max_abs_diff']:.3g}")
    assert len(ddp.metrics()) == STARVE_STEPS
    assert cmp["max_abs_diff"] <= DDP_VS_ONE_FP64_TOL, f"gloo-ddp-2 vs cpu-1: {cmp}"


def test_balance_statistics_global(balance_probe: Run, record_property: Any) -> None:
    """Under gloo-ddp-2 in training (one-layer MoE model, fp64, fixed weights), each rank's aux loss is W * E * sum_e f_e * P_e with f_e from the all-reduced (global) assignment counts and P_e over the rank's own tokens; in eval mode, run on rank 0 alone, it runs no collective and uses local counts (rel 1e-6)."""
    _record(record_property, oracle="reference", configurations="gloo-ddp-2",
            tolerance=f"relative {P.AUX_RTOL:g} per rank",
            why="fp64 with fixed parameters: the reference solution measured 1.6e-16 relative, "
                "fp32 routing (allowed) ~2e-8; the per-rank-statistics alternative differs by "
                "1.8e-2 and 1.6e-2 (recorded as per_rank_alternative). One layer, so gating and "
                "capacity cannot move the router input")
    balance_probe.require()
    ranks = [P.read_rank(balance_probe.out, r) for r in range(2)]
    expected = P.expected_aux()
    lines, bad = [], []
    for r, got in enumerate(ranks):
        want, local = expected["train_global"][r], expected["train_local"][r]
        rel = abs(got["train_aux"] - want) / abs(want)
        lines.append(f"rank {r}: train aux {got['train_aux']:.12g} vs {want:.12g} "
                     f"(rel {rel:.3g}; per-rank statistics would give {local:.12g}, rel "
                     f"{abs(local - want) / abs(want):.3g})")
        if rel > P.AUX_RTOL or got["train_aux_type"] != "Tensor" or got["train_aux_dim"] != 0:
            bad.append(lines[-1] + f", type {got['train_aux_type']} dim {got['train_aux_dim']}")
    want_eval = expected["train_local"][0]
    rel_eval = abs(ranks[0]["eval_aux"] - want_eval) / abs(want_eval)
    lines.append(f"rank 0 eval aux {ranks[0]['eval_aux']:.12g} vs local {want_eval:.12g} "
                 f"(rel {rel_eval:.3g})")
    if rel_eval > P.AUX_RTOL:
        bad.append(lines[-1])
    record_property("measured", " | ".join(lines))
    record_property("per_rank_alternative", " ".join(
        f"{abs(expected['train_local'][r] - expected['train_global'][r]) / expected['train_global'][r]:.3g}"  # noqa: E501
        for r in range(2)))
    assert not bad, " | ".join(bad)


def test_export_schema_and_reload(ddp_fp64: Run, record_property: Any) -> None:
    """--export from a gloo-ddp-2 MoE run holds exactly the documented keys (router.weight (E,d), experts.{e}.w1.weight (H,d), experts.{e}.w2.weight (d,H) per layer, no dense ffn.w1/w2), as plain contiguous float32 CPU tensors; export_schema(cfg) says the same and load_export rebuilds the MoE model (same outputs as TinyLM(cfg) with those weights, 1e-6)."""
    _record(record_property, oracle="reference", configurations="gloo-ddp-2",
            tolerance="exact keys/shapes/dtype; reloaded model's logits and aux within 1e-6 of "
                      "TinyLM(cfg) holding the exported weights",
            why="the schema is fixed by TASK.md; the reload runs the same fp32 code on the same "
                "weights (measured 0), 1e-6 leaves room for a loader that casts differently",
            runs=ddp_fp64.evidence())
    cfg = R.Cfg()
    want = R.schema(cfg)
    got_schema = {k: tuple(v) for k, v in probe.call(PROBE, "export_schema",
                                                     timeout_s=PROBE_TIMEOUT_S,
                                                     model_config=cfg.model_config_kwargs())}
    schema_diff = sorted(set(want) ^ set(got_schema)) + [
        k for k in want if k in got_schema and got_schema[k] != want[k]]
    ddp_fp64.require()
    path = ddp_fp64.out / "model.pt"
    assert path.exists(), f"--export wrote no {path.name}"
    blob = torch.load(path, map_location="cpu", weights_only=True)
    sd = blob.get("state_dict", {}) if isinstance(blob, dict) else {}
    missing, extra = sorted(set(want) - set(sd)), sorted(set(sd) - set(want))
    wrong = [k for k in want if k in sd and (tuple(sd[k].shape) != want[k]
                                             or type(sd[k]) is not torch.Tensor
                                             or sd[k].dtype != torch.float32
                                             or sd[k].device.type != "cpu"
                                             or not sd[k].is_contiguous())]
    record_property("measured", f"missing {missing[:6]}, unexpected {extra[:6]}, wrong "
                    f"shape/dtype/layout {wrong[:6]}, export_schema differences {schema_diff[:6]}")
    assert not (missing or extra or wrong), \
        f"export keys: missing {missing[:8]}, unexpected {extra[:8]}, wrong {wrong[:8]}"
    assert not schema_diff, f"export_schema(cfg) differs from TASK.md: {schema_diff[:8]}"
    final = ddp_fp64.final_state()["model"]
    if set(final) == set(sd):
        worst = max((sd[k].double() - final[k].to(torch.float32).double()).abs().max().item()
                    for k in sd)
        assert worst == 0.0, f"exported tensors are not the final model cast to fp32 ({worst:g})"
    # load_export must rebuild the MoE model: the same outputs as the candidate's own TinyLM
    # holding the exported weights (the routing itself is checked by the forward reference
    # check, so a routing defect is not counted twice here).
    tokens = R.fixed_tokens(4, 31)[:, :-1]
    # The sealed export (root-owned, read-only to the candidate) is loaded by its own loader.
    seen = probe.call(PROBE, "reload_export", timeout_s=PROBE_TIMEOUT_S, path=str(path),
                      model_config=cfg.model_config_kwargs(), params=dict(sd), tokens=tokens)
    logits, aux = seen["logits"], seen["aux"]
    want_logits, want_aux = seen["direct_logits"], seen["direct_aux"]
    d = max((logits - want_logits).abs().max().item(), abs(float(aux) - float(want_aux)))
    record_property("reload_max_abs_diff", d)
    assert seen["is_module"] and d <= 1e-6, \
        f"load_export's model differs from TinyLM(cfg) with the exported weights by {d:g}"


def test_dense_path_unchanged(runs_dir: Path, record_property: Any) -> None:
    """Without --moe-* flags (E = 0), cpu-1 training for 20 steps gives bit-for-bit the pristine baseline's final model and optimizer state, metrics, held-out loss and export."""
    _record(record_property, oracle="differential", configurations="cpu-1",
            tolerance="bitwise",
            why="QUALIFICATION: reference with --moe-experts 0 vs baseline after 200 steps "
                "measured 0 [0] (bitwise); TASK.md requires bit-for-bit")
    base = baseline_dir()
    if base is None:
        pytest.skip("GRADING_BASELINE is not set: no pristine baseline to compare with")
    args = ["--steps", "20", "--seed", "0", "--global-batch", "16"]
    runs = {}
    for name, root in (("dense-baseline", base), ("dense-candidate", None)):
        # Both run as the candidate uid (the baseline's train.py too), each in a job folder.
        out = sealed.job_dir(name)
        runs[name] = train(name, "cpu-1", [*args, "--export", str(out / "model.pt")],
                           runs_dir, root=root, out=out)
    b, c = runs["dense-baseline"].require(), runs["dense-candidate"]
    record_property("runs", f"{b.evidence()}; {c.evidence()}")
    c.require()
    cmp = compare_states(b.final_state(), c.final_state())
    same_metrics = (b.out / "metrics.jsonl").read_text() == (c.out / "metrics.jsonl").read_text()
    same_heldout = b.summary()["heldout_loss"] == c.summary()["heldout_loss"]
    eb = torch.load(b.out / "model.pt", weights_only=True)
    ec = torch.load(c.out / "model.pt", weights_only=True)
    same_export = eb["state_dict"].keys() == ec["state_dict"].keys() and all(
        torch.equal(eb["state_dict"][k], ec["state_dict"][k]) for k in eb["state_dict"])
    same_export = same_export and eb.get("format") == ec.get("format")
    record_property("measured", f"state bitwise {cmp['bitwise_equal']} (max abs "
                    f"{cmp['max_abs_diff']:.3g}), metrics equal {same_metrics}, held-out equal "
                    f"{same_heldout}, export equal {same_export}")
    assert cmp["bitwise_equal"], f"dense run differs from the baseline: {cmp}"
    assert same_metrics and same_heldout and same_export


def test_quality_heldout_loss(quality_run: Run, record_property: Any) -> None:
    """The fixed cpu-1 MoE run (seed 0, global batch 16, 200 steps, E 4, top-2, F 1.25, W 0.01, fp32) reaches a held-out loss at most 0.07 above the reference's 2.8219."""
    _record(record_property, oracle="reference", configurations="cpu-1",
            tolerance=f"heldout_loss <= {REFERENCE_HELDOUT:.4f} + {QUALITY_BAND}",
            why="QUALIFICATION (d): reference seed 0 2.8219 (seeds 0-2: 2.8219, 2.8238, 2.8350); "
                "band = twice the worst seed-to-seed spread (0.0352), at least 0.02",
            runs=quality_run.evidence())
    summary = quality_run.summary()
    value = float(summary["heldout_loss"])
    record_property("heldout_loss", value)
    record_property("reference_heldout_loss", REFERENCE_HELDOUT)
    assert math.isfinite(value), f"held-out loss {value}"
    assert value <= REFERENCE_HELDOUT + QUALITY_BAND, \
        f"held-out loss {value:.4f} is more than {QUALITY_BAND} above the reference's " \
        f"{REFERENCE_HELDOUT:.4f}"

