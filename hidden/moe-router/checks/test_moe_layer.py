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

import math
from typing import Any

import moe_reference as R
import torch
from oracle_util import (
    ALL_EXPERTS_ATOL,
    ALL_EXPERTS_CFG,
    ALL_EXPERTS_FLAGS,
    all_experts_case,
    all_experts_error,
)

from grading import probe
from grading.compare import bitwise_equal, max_abs_diff, within, worst
from grading.observation import CANDIDATE_REPORT, JUDGE, observed_in

PROBE = "moe_probe"
PROBE_TIMEOUT_S = 120.0

# Measured (reference solution vs moe_reference.py, fp64, the cases below): logits
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
    # (reference config, seed, tokens per sequence): the task's settings; top-1 with heavy drops
    # (whole tokens dropped, passed through by the residual); top-3 of 6 experts with drops;
    # top-2 of 5 over 23-token sequences, where F*T*K/E = 8.28 is not a whole number (capacity
    # 9: floor, round, 8 or 10, or a capacity from seq_len 32, each move the logits by >= 1).
    (R.Cfg(), 1, R.SEQ),
    (R.Cfg(experts=4, top_k=1, capacity_factor=0.5, aux_weight=0.1), 2, R.SEQ),
    (R.Cfg(experts=6, top_k=3, capacity_factor=0.75, aux_weight=0.05), 3, R.SEQ),
    (R.Cfg(experts=5, top_k=2, capacity_factor=0.9, aux_weight=0.02), 5, 23),
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


def _judge_case(cfg: R.Cfg, params: dict[str, torch.Tensor], tokens: torch.Tensor, got: Any,
                min_gap: float | None) -> tuple[str, bool]:
    """One ``forward_cases`` answer against the reference: (evidence line, within tolerance).
    Fails the check outright when the outputs are not two plain tensors with a 0-dim aux, or
    (``min_gap``) when the fixture routes a near tie."""
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
    if min_gap is not None:
        assert gap > min_gap, f"fixture problem: near-tie routing ({gap:g})"
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
    line = (f"E{cfg.experts} top-{cfg.top_k} F{cfg.capacity_factor} W{cfg.aux_weight} "
            f"T{inputs.shape[1]} (capacity {R.capacity(cfg, inputs.shape[1])}): "
            f"logits {d_logits:.3g}, aux {d_aux:.3g} (ref {float(ref_aux):.6g}), "
            f"grads {d_grad if isinstance(d_grad, str) else f'{d_grad:.3g}'}, "
            f"eval {d_eval:.3g}; dropped assignments {dropped_assignments}, "
            f"fully dropped tokens {dropped_tokens}, min top-k gap {gap:.3g}")
    ok = (within(d_logits, LOGITS_ATOL) and within(d_aux, AUX_ATOL)
          and within(d_eval, LOGITS_ATOL)
          and (isinstance(d_grad, str) or within(d_grad, GRAD_ATOL)))
    return line, ok


def _forward_cases(cases: list[tuple[R.Cfg, int, int]], min_gap: float | None,
                   record_property: Any) -> None:
    """The candidate's fp64 TinyLM on each (config, seed, tokens per sequence) case, judged by
    :func:`_judge_case`."""
    fixed = [(cfg, R.make_params(cfg, seed), R.fixed_tokens(4, seed, seq=t))
             for cfg, seed, t in cases]
    seen = probe.call(PROBE, "forward_cases", timeout_s=PROBE_TIMEOUT_S, cases=[
        {"model_config": cfg.model_config_kwargs(), "params": params, "tokens": tokens}
        for cfg, params, tokens in fixed])
    assert isinstance(seen, list), "the probe returned no cases"
    evidence, failures = [], []
    for (cfg, params, tokens), got in zip(fixed, seen, strict=False):
        line, ok = _judge_case(cfg, params, tokens, got, min_gap)
        evidence.append(line)
        if not ok:
            failures.append(line)
    record_property("measured", " | ".join(evidence))
    assert len(seen) == len(fixed), f"the probe returned {len(seen)} of {len(fixed)} cases"
    assert not failures, "differs from the independent reference: " + " | ".join(failures)


@observed_in(JUDGE, CANDIDATE_REPORT,
             reports="that the outputs are plain tensors with a 0-dim aux, and the parameter "
                     "names",
             corroborated_by="logits, aux loss and gradients equal the judge's independent "
                             "reference on its fixed weights and tokens")
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
    _forward_cases(CASES, MIN_ROUTING_GAP, record_property)


# The capacity rule where rounding decides. First K = E, so every token asks every expert once,
# expert e's queue in a sequence is its tokens in position order, and a token is kept whole (one
# of the first C) or dropped whole. Gate renormalisation (over a sum of 1) and the order of a
# token's choices cannot move the output there: only the capacity rule can (C, the per-sequence
# group, position order). F*T*K/E is never a whole number, sequences are shorter than seq_len,
# and one case has a single expert (E = 1, the smallest MoE).
CAPACITY_CASES = [
    # (config, seed, T): F*T*K/E -> C
    (R.Cfg(experts=1, top_k=1, capacity_factor=0.3, aux_weight=0.05), 7, 13),  # 3.9 -> 4
    (R.Cfg(experts=4, top_k=4, capacity_factor=0.3, aux_weight=0.05), 7, 21),  # 6.3 -> 7
    (R.Cfg(experts=2, top_k=2, capacity_factor=0.7, aux_weight=0.05), 7, 9),  # 6.3 -> 7
    (R.Cfg(experts=3, top_k=3, capacity_factor=0.55, aux_weight=0.05), 7, 32),  # 17.6 -> 18
    # Then K < E with T*K not a multiple of E, so each intermediate of the formula (T*K/E, F*T/E,
    # F*T*K) is fractional too: a rule that rounds any of them on the way (an even share
    # T*K // E scaled by F, K applied after rounding F*T/E) lands elsewhere. Capacities of 1, 2
    # and 4 (a minimum capacity, as some MoE libraries apply, overrides the formula below it).
    # Routing matters here; the fixed inputs route no near tie (smallest top-k gap >= 1.8e-4).
    (R.Cfg(experts=3, top_k=2, capacity_factor=1.0, aux_weight=0.05), 11, 32),  # 21.3 -> 22
    (R.Cfg(experts=8, top_k=1, capacity_factor=1.25, aux_weight=0.05), 11, 8),  # 1.25 -> 2
    (R.Cfg(experts=6, top_k=2, capacity_factor=0.4, aux_weight=0.05), 11, 7),  # 0.93 -> 1
    (R.Cfg(experts=5, top_k=2, capacity_factor=0.7, aux_weight=0.05), 11, 11),  # 3.08 -> 4
    (R.Cfg(experts=4, top_k=3, capacity_factor=0.45, aux_weight=0.05), 11, 9),  # 3.04 -> 4
]
# Capacity rules a candidate could write instead of ceil(F*T*K/E) over the sequence's T tokens.
OTHER_CAPACITY_RULES: dict[str, R.CapacityRule] = {
    "floor (or int, //)": lambda c, t: math.floor(c.capacity_factor * t * c.top_k / c.experts),
    "round": lambda c, t: round(c.capacity_factor * t * c.top_k / c.experts),
    "ceil - 1": lambda c, t: R.capacity(c, t) - 1,
    "ceil + 1": lambda c, t: R.capacity(c, t) + 1,
    "T = seq_len": lambda c, t: R.capacity(c, c.seq_len),
    "ceil(F * (T*K // E))": lambda c, t: math.ceil(c.capacity_factor * (t * c.top_k // c.experts)),
    "ceil(F * ceil(T*K/E))": lambda c, t: math.ceil(
        c.capacity_factor * math.ceil(t * c.top_k / c.experts)),
    "ceil(F*T/E) * K": lambda c, t: math.ceil(c.capacity_factor * t / c.experts) * c.top_k,
    "at least 2": lambda c, t: max(2, R.capacity(c, t)),
    "at least 4": lambda c, t: max(4, R.capacity(c, t)),
}
# Each other rule must move the reference's logits by at least this in some case (measured:
# >= 0.9 for every rule), so the cases decide between them.
CAPACITY_DISCRIMINATION = 0.1


@observed_in(JUDGE, CANDIDATE_REPORT,
             reports="that the outputs are plain tensors with a 0-dim aux, and the parameter "
                     "names",
             corroborated_by="logits, aux loss and gradients equal the judge's independent "
                             "reference at each fractional capacity")
def test_capacity_rule_at_fractional_limits(record_property: Any) -> None:
    """The capacity C = ceil(F*T*K/E) per sequence, where F*T*K/E is not a whole number (3.9,
    6.3, 17.6 with K = E, where nothing but the capacity rule can move the output; 21.3, 1.25,
    0.93, 3.08, 3.04 with K < E and T*K not a multiple of E), for sequences of 7 to 32 tokens
    (T, not seq_len), a single-expert MoE and capacities of 1, 2 and 4: the candidate's fp64
    TinyLM matches the independent reference in logits, aux loss and gradients (logits 1e-5, aux
    1e-7, grads 1e-6). floor, int, round, C +- 1, a capacity from seq_len, an even share
    T*K // E (or its ceiling) scaled by F, K applied after rounding, and a minimum capacity of 2
    or 4 each move the reference's logits by >= 0.1 in some case."""
    _record(record_property, oracle="reference", configurations="cpu-1",
            tolerance=f"logits {LOGITS_ATOL:g}, aux {AUX_ATOL:g}, gradients {GRAD_ATOL:g} "
                      "(max abs, fp64), as the forward reference check",
            why="same comparison as test_moe_forward_matches_independent_reference (reference "
                "solution ~1e-15); in the K = E cases routing details other than the capacity "
                "rule cannot move the output, the K < E cases route no near tie (top-k gap "
                ">= 1.8e-4), and each other rounding of the capacity moves the "
                f"logits by >= {CAPACITY_DISCRIMINATION:g} (recorded as other_rules)")
    moved = {}
    with torch.no_grad():
        for name, rule in OTHER_CAPACITY_RULES.items():
            diffs = []
            for cfg, seed, t in CAPACITY_CASES:
                params, tokens = R.make_params(cfg, seed), R.fixed_tokens(4, seed, seq=t)
                want = R.forward(params, tokens[:, :-1], cfg).logits
                other = R.forward(params, tokens[:, :-1], cfg, capacity_rule=rule).logits
                diffs.append(float((other - want).abs().max()))
            moved[name] = max(diffs)
    record_property("other_rules", ", ".join(f"{k}: logits move {v:.3g}"
                                             for k, v in moved.items()))
    weak = [k for k, v in moved.items() if not v >= CAPACITY_DISCRIMINATION]
    assert not weak, f"fixture problem: the cases do not tell ceil from {weak}"
    _forward_cases(CAPACITY_CASES, MIN_ROUTING_GAP, record_property)


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


@observed_in(JUDGE, CANDIDATE_REPORT,
             reports="ModelConfig's defaults, what validate() raised, what train.py's parser made"
                     " of the flags and whether it refused the invalid ones",
             corroborated_by="TinyLM built from the parsed all-experts flags computes the judge's"
                             " reference MoE (logits and aux, 1e-6): a tree without the MoE fails")
def test_config_fields_and_validation(record_property: Any) -> None:
    """ModelConfig has moe_experts=0, moe_top_k=2, moe_capacity_factor=1.25, moe_aux_weight=0.01 by
    default; validate() raises ValueError for E<0 and, with E>0, for K<1, K>E, F<=0, W<0; train.py
    maps the four --moe-* flags onto them, with the same defaults (--moe-experts 0; with only
    --moe-experts 4 given: top-2, factor 1.25, weight 0.01), and invalid flags (--moe-experts 1
    with the default top-2, top-5 of 4, factor 0) are rejected, not adjusted (ValueError or an
    argparse error from parse_args or validate()). Anchor: the fields configure the
    MoE: TinyLM built from the parsed flags of the all-experts setting (E 4, top-4, F 1.25,
    W 0.05; ModelConfig itself when train.py has no parse_args) and holding fixed weights computes
    the reference's logits and aux (fp64, 1e-6)."""
    _record(record_property, oracle="reference", configurations="cpu-1", tolerance="exact",
            why="defaults (ModelConfig's and train.py's flags') and rejected settings are fixed "
                "by TASK.md; in the all-experts "
                "setting routing details cannot move the output (reference solution ~1e-15)")
    valid = [dict(moe_experts=4, moe_top_k=4), dict(moe_experts=4, moe_aux_weight=0.0),
             dict(moe_experts=1, moe_top_k=1, moe_capacity_factor=0.1), dict(moe_experts=0)]
    bad = [dict(moe_experts=-1), dict(moe_experts=4, moe_top_k=0),
           dict(moe_experts=4, moe_top_k=5), dict(moe_experts=4, moe_capacity_factor=0.0),
           dict(moe_experts=4, moe_capacity_factor=-1.0), dict(moe_experts=4, moe_aux_weight=-0.1)]
    # The same invalid settings through the command line (K > E by an expert count below the
    # default top-2, and by a top-k above it): the flags must reach the config unchanged.
    bad_flags = [["--moe-experts", "1"], ["--moe-experts", "4", "--moe-top-k", "5"],
                 ["--moe-experts", "4", "--moe-capacity-factor", "0"]]
    anchor = all_experts_case(17)
    seen = probe.call(PROBE, "config_fields", timeout_s=PROBE_TIMEOUT_S, valid=valid,
                      invalid=bad, flags=["--moe-experts", "6", "--moe-top-k", "3",
                                          "--moe-capacity-factor", "0.75",
                                          "--moe-aux-weight", "0.05"],
                      anchor={**anchor, "flags": ALL_EXPERTS_FLAGS}, invalid_flags=bad_flags)
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
        # The other flags' defaults are TASK.md's table too (a run that passes only
        # --moe-experts gets top-2, factor 1.25, weight 0.01).
        assert _same_numbers(seen.get("flag_defaults"), (4, 2, 1.25, 0.01)), \
            f"train.py --moe-experts 4 (other MoE flags left at their defaults) gave " \
            f"{seen.get('flag_defaults')}, TASK.md's defaults are top-k 2, capacity factor " \
            "1.25, aux weight 0.01"
        how = seen.get("invalid_flags")
        assert isinstance(how, list) and len(how) == len(bad_flags), \
            f"the probe did not report the invalid flags ({how!r})"
        accepted_flags = [" ".join(f) for f, h in zip(bad_flags, how, strict=True)
                          if not _rejection(h)]
        assert not accepted_flags, (
            f"train.py accepted invalid settings (parse_args and validate() raised no "
            f"ValueError): {accepted_flags}")
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


def _rejection(how: Any) -> bool:
    """The probe's word for invalid flags is a rejection: ValueError, or argparse's exit with a
    non-zero status."""
    return isinstance(how, str) and (
        how == "ValueError"
        or (how.startswith("SystemExit(") and how not in ("SystemExit(0)", "SystemExit(None)")))


def _state_changes(before: Any, after: Any) -> list[str]:
    if not isinstance(before, dict) or not isinstance(after, dict) or not before:
        return ["(no state dict observed)"]
    return sorted(set(map(str, before)) ^ set(map(str, after))) + [
        str(k) for k in before if k in after and not bitwise_equal(before[k], after[k])]


@observed_in(JUDGE, CANDIDATE_REPORT,
             reports="which module attributes, state-dict entries and RNG state a forward "
                     "changed, whether two eval forwards agree, and the outputs' types",
             corroborated_by="both eval forwards of the all-experts model give the judge's "
                             "reference logits and aux (1e-6): a tree without the MoE fails")
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


# fp64 end to end: the all-experts setting with a zero router, so every gate is exactly 1/E in
# fp32 as in fp64 and the router input's gradient through the router is exactly 0. Routing in
# fp32 (which TASK.md allows) then changes no logit and no gradient outside the router's own,
# and the reference solution matches the re-implementation to ~1e-15; a data path that drops to
# fp32 anywhere (an fp32 buffer or accumulator, a .float() on the experts' input or output, a
# hard-coded dtype) is off by >= ~1e-8.
FP64_EXACT_ATOL = 1e-10
PLACEMENT_TOKEN_SEED = 61


def _uniform_router_case() -> dict[str, Any]:
    case = all_experts_case(59)
    case["params"] = {k: torch.zeros_like(v) if k.endswith("ffn.router.weight") else v
                      for k, v in case["params"].items()}
    case["tokens"] = R.fixed_tokens(4, PLACEMENT_TOKEN_SEED)
    return case


def _dtype_of(seen: Any, index: int) -> Any:
    return seen[index].get("dtype") if isinstance(seen, list) and len(seen) == 2 \
        and isinstance(seen[index], dict) else None


def _device_of(seen: Any, index: int) -> Any:
    return seen[index].get("device") if isinstance(seen, list) and len(seen) == 2 \
        and isinstance(seen[index], dict) else None


@observed_in(JUDGE, CANDIDATE_REPORT,
             reports="the dtypes and devices of outputs and gradients, the factories moved to "
                     "meta, and the autocast run's outputs",
             corroborated_by="the fp64 model's logits and non-router gradients equal the judge's "
                             "reference within 1e-10 (an fp32 step anywhere is >= 1e-8 off), and "
                             "the meta run's all-experts outputs the reference's")
def test_forward_device_and_dtype_placement(record_property: Any) -> None:
    """Where the MoE model puts its tensors, checked on the CPU. (1) fp64 end to end: with every
    gate exactly 1/E (all-experts setting, zero router), the fp64 model's logits are float64 and
    match the reference within 1e-10, as do all gradients outside the router's (which fp32
    routing may round); all gradients are float64. (2) No device-less tensor: with every tensor
    factory called without device= building on the meta device (as a GPU model would find its
    CPU-built tensors; 0-dim ones excepted, as on a GPU), a training forward and backward and an
    eval forward run, with outputs plain CPU tensors: in the all-experts setting equal to the
    reference (1e-6), and with the task's routing and heavy drops (E 4, top-2, F 0.5) float64
    with a 0-dim aux. (3) The fp32 model's logits are float32 and its aux fp32 or fp64. (4) Under
    CPU bf16 autocast (the cuda-* configurations' mixed precision) the fp32 model's training
    forward and backward run, with finite outputs and gradients and an fp32 or fp64 aux."""
    _record(record_property, oracle="reference", configurations="cpu-1",
            tolerance=f"fp64: logits and non-router gradients {FP64_EXACT_ATOL:g} max abs, "
                      f"aux {AUX_ATOL:g}; meta: all-experts outputs {ALL_EXPERTS_ATOL:g}; "
                      "dtypes and devices exact",
            why="reference solution vs the re-implementation ~1e-15 with exact gates; an fp32 "
                "step anywhere in the fp64 data path is >= ~1e-8 off. TASK.md: the model runs "
                "in the configured dtype (fp64 for the equivalence runs, bf16 autocast on CUDA) "
                "with routing in at least fp32; a tensor built without device= lands on the CPU "
                "while a cuda-* model is on the GPU, which the meta device shows on a CPU host")
    exact = _uniform_router_case()
    # Case 0, the all-experts setting, is judged on its inputs (``anchor``); the probe gets
    # inputs and targets ([B, T + 1]) for the backward.
    anchor = all_experts_case(67)
    drops = R.Cfg(experts=4, top_k=2, capacity_factor=0.5)
    meta_cases = [{**anchor, "tokens": R.fixed_tokens(4, 67)},
                  {"model_config": drops.model_config_kwargs(),
                   "params": R.make_params(drops, 2), "tokens": R.fixed_tokens(4, 71)}]
    fp32 = {"model_config": R.Cfg().model_config_kwargs(), "params": R.make_params(R.Cfg(), 1),
            "tokens": R.fixed_tokens(4, 73)}
    seen = probe.call(PROBE, "placement", timeout_s=PROBE_TIMEOUT_S, fp64_case=exact,
                      meta_cases=meta_cases, fp32_case=fp32)
    seen = seen if isinstance(seen, dict) else {}
    problems: list[str] = []

    # (1) fp64 end to end, against the reference.
    oracle_cfg = ALL_EXPERTS_CFG
    tokens = exact["tokens"]
    leaves = {k: v.clone().requires_grad_(True) for k, v in exact["params"].items()}
    ref = R.forward(leaves, tokens[:, :-1], oracle_cfg)
    (R.cross_entropy(ref.logits, tokens[:, 1:]) + ref.aux).backward()
    d_logits = max_abs_diff(seen.get("fp64_logits"), ref.logits.detach())
    d_aux = max_abs_diff(seen.get("fp64_aux"), ref.aux.detach())
    names = seen.get("param_names")
    grads = seen.get("grads") if isinstance(seen.get("grads"), dict) else {}
    if isinstance(names, list) and set(names) == set(leaves):
        d_grad = worst(max_abs_diff(_grad_of(grads, k, leaf), leaf.grad)
                       for k, leaf in leaves.items() if not k.endswith("ffn.router.weight"))
        d_router = worst(max_abs_diff(_grad_of(grads, k, leaf), leaf.grad)
                         for k, leaf in leaves.items() if k.endswith("ffn.router.weight"))
    else:
        d_grad = d_router = float("inf")
        problems.append(f"fp64: parameter names differ from the export schema ({names})")
    fp64_out = seen.get("fp64")
    record_property("fp64", f"outputs {fp64_out}; logits {d_logits:.3g}, aux {d_aux:.3g}, "
                    f"gradients outside the router {d_grad:.3g}, router gradients "
                    f"{d_router:.3g}; gradient dtypes {seen.get('grad_dtypes')}")
    if _dtype_of(fp64_out, 0) != "torch.float64":
        problems.append(f"fp64 model: logits are {_dtype_of(fp64_out, 0)}, not torch.float64")
    if seen.get("grad_dtypes") != ["torch.float64"]:
        problems.append(f"fp64 model: gradient dtypes {seen.get('grad_dtypes')}")
    if not (within(d_logits, FP64_EXACT_ATOL) and within(d_grad, FP64_EXACT_ATOL)):
        problems.append(f"fp64 model with exact gates: logits {d_logits:.3g}, gradients outside "
                        f"the router {d_grad:.3g} from the reference (tolerance "
                        f"{FP64_EXACT_ATOL:g}): the data path is not fp64 end to end")
    if not (within(d_aux, AUX_ATOL) and within(d_router, GRAD_ATOL)):
        problems.append(f"fp64 model: aux {d_aux:.3g}, router gradients {d_router:.3g} from "
                        "the reference")

    # (2) device-less tensors land on the meta device.
    metas = seen.get("meta") if isinstance(seen.get("meta"), list) else []
    lines = []
    for i in range(len(meta_cases)):
        got = metas[i] if i < len(metas) and isinstance(metas[i], dict) else {}
        lines.append(f"case {i}: train {got.get('train')}, eval {got.get('eval')}, grads on "
                     f"{got.get('grad_devices')}, factories moved to meta "
                     f"{got.get('redirected')}, error {got.get('error')}")
        if "error" in got or not got:
            problems.append(f"meta case {i}: {got.get('error') or 'no answer'} (tensor "
                            f"factories called without device=: {got.get('redirected')})")
            continue
        for phase in ("train", "eval"):
            where = got.get(phase)
            if (_device_of(where, 0), _device_of(where, 1)) != ("cpu", "cpu") \
                    or _dtype_of(where, 0) != "torch.float64" \
                    or where[1].get("shape") != [] or where[0].get("type") != "Tensor" \
                    or where[1].get("type") != "Tensor":
                problems.append(f"meta case {i} {phase}: outputs {where} (expected plain CPU "
                                "tensors, float64 logits, 0-dim aux)")
        if got.get("grad_devices") != ["cpu"]:
            problems.append(f"meta case {i}: gradients on {got.get('grad_devices')}")
        if i == 0:
            errs = [all_experts_error(anchor, [got.get(f"{p}_logits"), got.get(f"{p}_aux")])
                    for p in ("train", "eval")]
            d = worst(e for pair in errs for e in pair)
            lines[-1] += f"; all-experts max abs diff {d:.3g}"
            if not within(d, ALL_EXPERTS_ATOL):
                problems.append(f"meta case 0 (all experts): outputs differ from the "
                                f"reference by {d:.3g}")
    record_property("meta", " | ".join(lines))

    # (3) the fp32 model stays fp32.
    fp32_seen = seen.get("fp32") if isinstance(seen.get("fp32"), dict) else {}
    record_property("fp32", str(fp32_seen))
    for phase in ("train", "eval"):
        where = fp32_seen.get(phase)
        if _dtype_of(where, 0) != "torch.float32" or \
                _dtype_of(where, 1) not in ("torch.float32", "torch.float64") or \
                (_device_of(where, 0), _device_of(where, 1)) != ("cpu", "cpu"):
            problems.append(f"fp32 model {phase}: outputs {where} (expected float32 logits and "
                            "an fp32 or fp64 aux, on the CPU)")

    # (4) bf16 autocast, the cuda-* configurations' mixed precision, run on the CPU.
    ac = seen.get("autocast") if isinstance(seen.get("autocast"), dict) else {}
    record_property("autocast", str(ac))
    where = ac.get("train")
    if "error" in ac or not ac:
        problems.append(f"fp32 model under CPU bf16 autocast: {ac.get('error') or 'no answer'}")
    elif (_dtype_of(where, 1) not in ("torch.float32", "torch.float64")
          or where[1].get("shape") != [] or where[0].get("type") != "Tensor"
          or (_device_of(where, 0), _device_of(where, 1)) != ("cpu", "cpu")):
        problems.append(f"fp32 model under CPU bf16 autocast: outputs {where} (expected plain CPU "
                        "tensors, a 0-dim aux in fp32 or fp64: the balance statistics come from "
                        "router probabilities computed in at least fp32)")
    elif ac.get("finite") is not True or not ac.get("grads"):
        problems.append(f"fp32 model under CPU bf16 autocast: outputs or gradients not finite "
                        f"({ac.get('grads')} gradients)")
    assert not problems, " | ".join(problems)
