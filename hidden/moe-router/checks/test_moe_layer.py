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
and every comparison is made here.
"""

# HARNESS-CANARY-8a0e5fe7-3b11-4c19-b138-53348751b84e

from __future__ import annotations

from typing import Any

import torch

import moe_reference as R
from grading import probe

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


def test_moe_forward_matches_independent_reference(record_property: Any) -> None:
    """TinyLM with MoE (top-k routing, unrenormalised gates, per-sequence capacity in position order, dropped tokens passed through, aux = W * mean of E*sum f*P) matches an independent re-implementation in logits, aux loss and gradients (fp64; logits 1e-5, aux 1e-7, grads 1e-6)."""
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
    for (cfg, params, tokens), got in zip(fixed, seen):
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        assert got["plain_tensors"], \
            f"forward returned {got['logits_type']}, {got['aux_type']}"
        assert len(got["aux_shape"]) == 0, \
            f"aux loss has shape {tuple(got['aux_shape'])}, expected a 0-dim tensor"
        logits, aux = got["logits"], got["aux"]

        leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        ref = R.forward(leaves, inputs, cfg)
        (R.cross_entropy(ref.logits, targets) + ref.aux).backward()
        gap = min(s.topk_gap for s in ref.layers)
        assert gap > MIN_ROUTING_GAP, f"fixture problem: near-tie routing ({gap:g})"

        d_logits = (logits.double() - ref.logits.detach()).abs().max().item()
        d_aux = abs(float(aux) - float(ref.aux.detach()))
        d_grad: float | str = "not compared (parameter names differ from the export schema)"
        if set(got["param_names"]) == set(params):
            d_grad = 0.0
            for key, leaf in leaves.items():
                g = got["grads"][key]
                g = torch.zeros_like(leaf) if g is None else g.double()
                d_grad = max(d_grad, (g - leaf.grad).abs().max().item())
        e_logits, e_aux = got["eval_logits"], got["eval_aux"]
        d_eval = max((e_logits.double() - ref.logits.detach()).abs().max().item(),
                     abs(float(e_aux) - float(ref.aux.detach())))
        dropped_tokens = sum(int((~s.kept).all(-1).sum()) for s in ref.layers)
        dropped_assignments = sum(int((~s.kept).sum()) for s in ref.layers)
        line = (f"E{cfg.experts} top-{cfg.top_k} F{cfg.capacity_factor} W{cfg.aux_weight}: "
                f"logits {d_logits:.3g}, aux {d_aux:.3g} (ref {float(ref.aux.detach()):.6g}), "
                f"grads {d_grad if isinstance(d_grad, str) else f'{d_grad:.3g}'}, "
                f"eval {d_eval:.3g}; dropped assignments {dropped_assignments}, "
                f"fully dropped tokens {dropped_tokens}, min top-k gap {gap:.3g}")
        evidence.append(line)
        if d_logits > LOGITS_ATOL or d_aux > AUX_ATOL or d_eval > LOGITS_ATOL or \
                (not isinstance(d_grad, str) and d_grad > GRAD_ATOL):
            failures.append(line)
    record_property("measured", " | ".join(evidence))
    assert not failures, "differs from the independent reference: " + " | ".join(failures)


def test_config_fields_and_validation(record_property: Any) -> None:
    """ModelConfig has moe_experts=0, moe_top_k=2, moe_capacity_factor=1.25, moe_aux_weight=0.01 by default; validate() raises ValueError for E<0 and, with E>0, for K<1, K>E, F<=0, W<0; train.py maps the four --moe-* flags onto them."""
    _record(record_property, oracle="reference", configurations="cpu-1", tolerance="exact",
            why="defaults and rejected settings are fixed by TASK.md")
    valid = [dict(moe_experts=4, moe_top_k=4), dict(moe_experts=4, moe_aux_weight=0.0),
             dict(moe_experts=1, moe_top_k=1, moe_capacity_factor=0.1), dict(moe_experts=0)]
    bad = [dict(moe_experts=-1), dict(moe_experts=4, moe_top_k=0),
           dict(moe_experts=4, moe_top_k=5), dict(moe_experts=4, moe_capacity_factor=0.0),
           dict(moe_experts=4, moe_capacity_factor=-1.0), dict(moe_experts=4, moe_aux_weight=-0.1)]
    seen = probe.call(PROBE, "config_fields", timeout_s=PROBE_TIMEOUT_S, valid=valid,
                      invalid=bad, flags=["--moe-experts", "6", "--moe-top-k", "3",
                                          "--moe-capacity-factor", "0.75",
                                          "--moe-aux-weight", "0.05"])
    got = tuple(seen["defaults"])
    record_property("defaults", seen["defaults_repr"])
    assert got == (0, 2, 1.25, 0.01), f"defaults {seen['defaults_repr']}"
    rejected = [(kwargs, raised) for kwargs, raised in zip(valid, seen["valid"], strict=True)
                if raised]
    assert not rejected, f"validate() raised for valid settings: {rejected}"
    # Only ValueError is a rejection; anything else raised fails the check as an error would.
    other = [(kwargs, raised) for kwargs, raised in zip(bad, seen["invalid"], strict=True)
             if raised and "ValueError" not in raised]
    assert not other, f"validate() raised something other than ValueError: {other}"
    accepted = [kwargs for kwargs, raised in zip(bad, seen["invalid"], strict=True)
                if raised is None]
    assert not accepted, f"validate() accepted invalid settings: {accepted}"

    assert "parse_error" not in seen, f"train.py's parse_args raised {seen['parse_error']}"
    if not seen["has_parse"]:
        return  # the CLI is exercised by every training check instead
    got = tuple(seen["flags"])
    assert got == (6, 3, 0.75, 0.05), f"train.py flags gave {got}"
    assert seen["default_experts"] == 0, \
        "train.py without --moe-experts must keep the dense model"


def test_eval_pure_and_stateless(record_property: Any) -> None:
    """With MoE, an eval() forward changes no parameter, buffer, RNG state or Python attribute and gives the same bits twice (grad on or off); a training forward+backward stashes nothing on the modules; outputs are two plain tensors, the aux loss 0-dim."""
    _record(record_property, oracle="metamorphic", configurations="cpu-1", tolerance="bitwise",
            why="TASK.md: eval is pure and deterministic; all state lives in parameters/buffers")
    tokens = R.fixed_tokens(4, 21)[:, :-1]
    seen = probe.call(PROBE, "eval_purity", timeout_s=PROBE_TIMEOUT_S,
                      model_config=R.Cfg().model_config_kwargs(), tokens=tokens.clone())
    train_changes = seen["train_changes"]
    assert seen["train_outputs_ok"]

    sd_before, sd_after = seen["state_before"], seen["state_after"]
    rng_before, rng_after = seen["rng_before"], seen["rng_after"]
    eval_changes = seen["eval_changes"]
    state_changes = sorted(set(sd_before) ^ set(sd_after)) + [
        k for k in sd_before if k in sd_after and not torch.equal(sd_before[k], sd_after[k])]
    record_property("measured", f"train-mode attribute changes {train_changes[:5]}; eval-mode "
                    f"attribute changes {eval_changes[:5]}; state changes {state_changes[:5]}; "
                    f"rng unchanged {torch.equal(rng_before, rng_after)}")
    assert seen["outputs_plain"], f"outputs are {seen['output_types']}"
    assert not train_changes, f"a training forward stashed state on modules: {train_changes}"
    assert not eval_changes, f"an eval forward changed module attributes: {eval_changes}"
    assert not state_changes, f"an eval forward changed the state dict: {state_changes}"
    assert torch.equal(rng_before, rng_after), "an eval forward consumed the global RNG"
    out1, out2 = seen["first"], seen["second"]
    assert torch.equal(out1[0], out2[0]) and torch.equal(out1[1], out2[1]), \
        "two eval forwards on the same input differ"
