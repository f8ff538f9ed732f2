"""Hidden checks of the moe-router feature that run in this process (cpu-1, no training run).

HARNESS-CANARY-8a0e5fe7-3b11-4c19-b138-53348751b84e
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

These run in the judge's pytest, which never imports candidate code: the candidate's API is
called through ``probes/moe_probe.py`` in a sealed process as the candidate uid
(``grading.probe``), fed the fixed parameters and tokens from here as tensors, and its raw
observations (outputs, gradients, attributes it changed, exceptions it raised) come back as
data. A candidate whose code raises fails the check; one whose probe process crashes or hangs
is reported as crash/hang. Expected values come from ``moe_reference.py``, an independent
re-implementation of the whole model from TASK.md (explicit attention, erf GELU, a
token-by-token capacity queue), fed the same fixed parameters as the candidate's ``TinyLM``,
and every comparison is made here, NaN-safe (``grading.compare``). The checks that only observe
the candidate (config fields, eval purity) are anchored too: the model they observe must
compute the reference's MoE in the all-experts setting (K = E, nothing dropped; see
``oracle_util.ALL_EXPERTS_CFG``), where routing details cannot move the output.
"""

# HARNESS-CANARY-8a0e5fe7-3b11-4c19-b138-53348751b84e

from __future__ import annotations

from typing import Any

import moe_reference as R
import torch
from oracle_util import ALL_EXPERTS_ATOL, ALL_EXPERTS_FLAGS, all_experts_case, all_experts_error

from grading import probe
from grading.compare import bitwise_equal, max_abs_diff, within, worst

PROBE = "moe_probe"
PROBE_TIMEOUT_S = 120.0

# Measured (reference solution vs moe_reference.py, fp64, the three cases below): logits
# 4.2e-15, aux 3.5e-18, gradients 6.5e-17. TASK.md allows routing "in at least fp32"; the
# reference patched to route in fp32 inside the fp64 model measured logits 2.1e-7, aux 1.7e-9,
# gradients 5.0e-9. The tolerances leave ~50-200x over that, while the smallest departure from
# the statement we could construct (renormalised gates, another capacity order, a summed
# instead of averaged layer loss, capacity over the batch) moves logits or aux by >= 1e-3.
LOGITS_ATOL = 1e-5
AUX_ATOL = 1e-7
GRAD_ATOL = 1e-6
MIN_ROUTING_GAP = 1e-6  # fixed inputs are chosen so no top-k decision is a near tie

CASES = [
    # (reference config, seed): the task's settings; top-1 with heavy drops (whole tokens
    # dropped, passed through by the residual); top-3 of 6 experts with drops.
    (R.Cfg(), 1),
    (R.Cfg(experts=4, top_k=1, capacity_factor=0.5, aux_weight=0.1), 2),
    (R.Cfg(experts=6, top_k=3, capacity_factor=0.75, aux_weight=0.05), 3),
]


def _record(record_property: Any, **props: Any) -> None:
    for key, value in props.items():
        record_property(key, value)


def _grad_of(grads: dict[str, Any], key: str, leaf: torch.Tensor) -> Any:
    """The candidate's gradient of ``key``: a parameter the forward never used has none (None),
    which is zero; a missing entry is no gradient at all (infinitely far)."""
    if key in grads and grads[key] is None:
        return torch.zeros_like(leaf)
    return grads.get(key)


def test_moe_forward_matches_independent_reference(record_property: Any) -> None:
    """TinyLM with MoE (top-k routing, unrenormalised gates, per-sequence capacity in position
    order, dropped tokens passed through, aux = W * mean of E*sum f*P) matches an independent
    re-implementation in logits, aux loss and gradients (fp64; logits 1e-5, aux 1e-7, grads
    1e-6)."""
    _record(record_property, oracle="reference", configurations="cpu-1",
            tolerance=f"logits {LOGITS_ATOL:g}, aux {AUX_ATOL:g}, gradients {GRAD_ATOL:g} "
                      "(max abs, fp64)",
            why="reference solution vs this re-implementation measured 4.2e-15 (logits), "
                "3.5e-18 (aux), 6.5e-17 (grads); routing in fp32, which TASK.md allows, measured "
                "2.1e-7 / 1.7e-9 / 5.0e-9; spec departures move logits or aux by >= 1e-3")
    failures = []
    evidence = []
    fixed = [(cfg, R.make_params(cfg, seed), R.fixed_tokens(4, seed)) for cfg, seed in CASES]
    seen = probe.call(PROBE, "forward_cases", timeout_s=PROBE_TIMEOUT_S, cases=[
        {"model_config": cfg.model_config_kwargs(), "params": params, "tokens": tokens}
        for cfg, params, tokens in fixed])
    assert isinstance(seen, list), "the probe returned no cases"
    for (cfg, params, tokens), got in zip(fixed, seen, strict=False):
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        got = got if isinstance(got, dict) else {}
        assert got.get("plain_tensors") is True, \
            f"forward returned {got.get('logits_type')}, {got.get('aux_type')}"
        assert got.get("aux_shape") == [], \
            f"aux loss has shape {got.get('aux_shape')}, expected a 0-dim tensor"

        leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        ref = R.forward(leaves, inputs, cfg)
        (R.cross_entropy(ref.logits, targets) + ref.aux).backward()
        gap = min(s.topk_gap for s in ref.layers)
        assert gap > MIN_ROUTING_GAP, f"fixture problem: near-tie routing ({gap:g})"
        ref_logits, ref_aux = ref.logits.detach(), ref.aux.detach()

        d_logits = max_abs_diff(got.get("logits"), ref_logits)
        d_aux = max_abs_diff(got.get("aux"), ref_aux)
        d_grad: float | str = "not compared (parameter names differ from the export schema)"
        names = got.get("param_names")
        if isinstance(names, list) and set(names) == set(params):
            grads = got.get("grads") if isinstance(got.get("grads"), dict) else {}
            d_grad = worst(max_abs_diff(_grad_of(grads, key, leaf), leaf.grad)
                           for key, leaf in leaves.items())
        d_eval = worst([max_abs_diff(got.get("eval_logits"), ref_logits),
                        max_abs_diff(got.get("eval_aux"), ref_aux)])
        dropped_tokens = sum(int((~s.kept).all(-1).sum()) for s in ref.layers)
        dropped_assignments = sum(int((~s.kept).sum()) for s in ref.layers)
        line = (f"E{cfg.experts} top-{cfg.top_k} F{cfg.capacity_factor} W{cfg.aux_weight}: "
                f"logits {d_logits:.3g}, aux {d_aux:.3g} (ref {float(ref_aux):.6g}), "
                f"grads {d_grad if isinstance(d_grad, str) else f'{d_grad:.3g}'}, "
                f"eval {d_eval:.3g}; dropped assignments {dropped_assignments}, "
                f"fully dropped tokens {dropped_tokens}, min top-k gap {gap:.3g}")
        evidence.append(line)
        ok = (within(d_logits, LOGITS_ATOL) and within(d_aux, AUX_ATOL)
              and within(d_eval, LOGITS_ATOL)
              and (isinstance(d_grad, str) or within(d_grad, GRAD_ATOL)))
        if not ok:
            failures.append(line)
    record_property("measured", " | ".join(evidence))
    assert len(seen) == len(fixed), f"the probe returned {len(seen)} of {len(fixed)} cases"
    assert not failures, "differs from the independent reference: " + " | ".join(failures)


def _same_numbers(got: Any, want: tuple[float, ...]) -> bool:
    """``got`` is a sequence of real numbers (no bools, no tensors) equal to ``want``."""
    return (isinstance(got, list | tuple) and len(got) == len(want)
            and all(isinstance(g, int | float) and not isinstance(g, bool) and g == w
                    for g, w in zip(got, want, strict=True)))


def _raised_list(value: Any, n: int) -> list[Any]:
    """What validate() raised per setting (None or a list of class names), as the probe said."""
    if not isinstance(value, list) or len(value) != n:
        return ["(no answer)"] * n
    return [v if v is None or isinstance(v, list) else "(not an answer)" for v in value]


def test_config_fields_and_validation(record_property: Any) -> None:
    """ModelConfig has moe_experts=0, moe_top_k=2, moe_capacity_factor=1.25, moe_aux_weight=0.01 by
    default; validate() raises ValueError for E<0 and, with E>0, for K<1, K>E, F<=0, W<0; train.py
    maps the four --moe-* flags onto them. Anchor: the fields configure the MoE: TinyLM built from
    the parsed flags of the all-experts setting (E 4, top-4, F 1.25, W 0.05; ModelConfig itself when
    train.py has no parse_args) and holding fixed weights computes the reference's logits and aux
    (fp64, 1e-6)."""
    _record(record_property, oracle="reference", configurations="cpu-1", tolerance="exact",
            why="defaults and rejected settings are fixed by TASK.md; in the all-experts "
                "setting routing details cannot move the output (reference solution ~1e-15)")
    valid = [dict(moe_experts=4, moe_top_k=4), dict(moe_experts=4, moe_aux_weight=0.0),
             dict(moe_experts=1, moe_top_k=1, moe_capacity_factor=0.1), dict(moe_experts=0)]
    bad = [dict(moe_experts=-1), dict(moe_experts=4, moe_top_k=0),
           dict(moe_experts=4, moe_top_k=5), dict(moe_experts=4, moe_capacity_factor=0.0),
           dict(moe_experts=4, moe_capacity_factor=-1.0), dict(moe_experts=4, moe_aux_weight=-0.1)]
    anchor = all_experts_case(17)
    seen = probe.call(PROBE, "config_fields", timeout_s=PROBE_TIMEOUT_S, valid=valid,
                      invalid=bad, flags=["--moe-experts", "6", "--moe-top-k", "3",
                                          "--moe-capacity-factor", "0.75",
                                          "--moe-aux-weight", "0.05"],
                      anchor={**anchor, "flags": ALL_EXPERTS_FLAGS})
    seen = seen if isinstance(seen, dict) else {}
    record_property("defaults", str(seen.get("defaults_repr")))
    assert _same_numbers(seen.get("defaults"), (0, 2, 1.25, 0.01)), \
        f"defaults {seen.get('defaults_repr')}"
    raised_valid = _raised_list(seen.get("valid"), len(valid))
    raised_bad = _raised_list(seen.get("invalid"), len(bad))
    rejected = [(kwargs, raised) for kwargs, raised in zip(valid, raised_valid, strict=True)
                if raised is not None]
    assert not rejected, f"validate() raised for valid settings: {rejected}"
    # Only ValueError is a rejection; anything else raised fails the check as an error would.
    other = [(kwargs, raised) for kwargs, raised in zip(bad, raised_bad, strict=True)
             if raised is not None and "ValueError" not in raised]
    assert not other, f"validate() raised something other than ValueError: {other}"
    accepted = [kwargs for kwargs, raised in zip(bad, raised_bad, strict=True)
                if raised is None]
    assert not accepted, f"validate() accepted invalid settings: {accepted}"

    assert "parse_error" not in seen, f"train.py's parse_args raised {seen['parse_error']}"
    if seen.get("has_parse") is True:
        got = seen.get("flags")
        assert _same_numbers(got, (6, 3, 0.75, 0.05)), f"train.py flags gave {got}"
        assert _same_numbers([seen.get("default_experts")], (0,)), \
            "train.py without --moe-experts must keep the dense model"
    else:
        assert seen.get("has_parse") is False, "the probe did not say whether train.py parses"
    # The anchor: the fields (through the CLI when there is one) configure the MoE.
    assert "anchor_error" not in seen, \
        f"building the all-experts model from its settings raised {seen['anchor_error']}"
    d_logits, d_aux = all_experts_error(anchor, seen.get("anchor"))
    record_property("all_experts_max_abs_diff", f"logits {d_logits:.3g}, aux {d_aux:.3g} (from "
                    f"{seen.get('anchor_source')})")
    assert within(d_logits, ALL_EXPERTS_ATOL) and within(d_aux, ALL_EXPERTS_ATOL), (
        f"TinyLM under the parsed settings E 4, top-4, F 1.25, W 0.05 differs from the "
        f"reference MoE by logits {d_logits:g}, aux {d_aux:g}: the fields do not configure the "
        "MoE")


def _state_changes(before: Any, after: Any) -> list[str]:
    if not isinstance(before, dict) or not isinstance(after, dict) or not before:
        return ["(no state dict observed)"]
    return sorted(set(map(str, before)) ^ set(map(str, after))) + [
        str(k) for k in before if k in after and not bitwise_equal(before[k], after[k])]


def test_eval_pure_and_stateless(record_property: Any) -> None:
    """With MoE, an eval() forward changes no parameter, buffer, RNG state or Python attribute and
    gives the same bits twice (grad on or off); a training forward+backward stashes nothing on the
    modules; outputs are two plain tensors, the aux loss 0-dim. Anchor: the model observed is the
    MoE: in the all-experts setting (E 4, top-4, nothing dropped) with fixed weights, both eval
    forwards give the reference's logits and aux (fp64, 1e-6)."""
    _record(record_property, oracle="metamorphic", configurations="cpu-1", tolerance="bitwise",
            why="TASK.md: eval is pure and deterministic; all state lives in parameters/buffers. "
                "Anchor: in the all-experts setting routing details cannot move the output "
                "(reference solution ~1e-15)")
    tokens = R.fixed_tokens(4, 21)[:, :-1]
    anchor = all_experts_case(29)
    seen = probe.call(PROBE, "eval_purity", timeout_s=PROBE_TIMEOUT_S,
                      model_config=R.Cfg().model_config_kwargs(), tokens=tokens.clone(),
                      anchor=anchor)
    seen = seen if isinstance(seen, dict) else {}
    train_changes = seen.get("train_changes")
    assert seen.get("train_outputs_ok") is True

    rng_before, rng_after = seen.get("rng_before"), seen.get("rng_after")
    eval_changes = seen.get("eval_changes")
    state_changes = _state_changes(seen.get("state_before"), seen.get("state_after"))
    rng_same = bitwise_equal(rng_before, rng_after)
    record_property("measured", f"train-mode attribute changes {str(train_changes)[:300]}; "
                    f"eval-mode attribute changes {str(eval_changes)[:300]}; state changes "
                    f"{state_changes[:5]}; rng unchanged {rng_same}")
    assert seen.get("outputs_plain") is True, f"outputs are {seen.get('output_types')}"
    assert train_changes == [], f"a training forward stashed state on modules: {train_changes}"
    assert eval_changes == [], f"an eval forward changed module attributes: {eval_changes}"
    assert not state_changes, f"an eval forward changed the state dict: {state_changes}"
    assert rng_same, "an eval forward consumed the global RNG"
    out1, out2 = seen.get("first"), seen.get("second")
    assert isinstance(out1, list) and isinstance(out2, list) and len(out1) == len(out2) == 2 \
        and bitwise_equal(out1[0], out2[0]) and bitwise_equal(out1[1], out2[1]), \
        "two eval forwards on the same input differ"
    # The anchor: the bits it gives twice are the MoE's.
    anchor_seen = seen.get("anchor") if isinstance(seen.get("anchor"), dict) else {}
    errors = [all_experts_error(anchor, anchor_seen.get(k)) for k in ("first", "second")]
    d_logits, d_aux = worst(e[0] for e in errors), worst(e[1] for e in errors)
    record_property("all_experts_max_abs_diff", f"logits {d_logits:.3g}, aux {d_aux:.3g}")
    assert within(d_logits, ALL_EXPERTS_ATOL) and within(d_aux, ALL_EXPERTS_ATOL), (
        f"the eval forwards of the all-experts model (E 4, top-4, fixed weights) differ from "
        f"the reference MoE by logits {d_logits:g}, aux {d_aux:g}")
