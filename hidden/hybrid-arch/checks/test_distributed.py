# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""Hidden checks of a hybrid (AMAM) stack under gloo-ddp-2 and gloo-fsdp-2, and its resume.

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

Every run is the candidate's own train.py, launched by grading.launch (static loopback
rendezvous, one log per rank, every rank as the candidate uid, outputs in a job folder sealed
before the judge reads them); a crash or hang fails the check with the rank and its log.
Fixed for every comparison: global batch 16, seed 0, 20 AdamW steps, one thread per rank.
The FSDP wrapping is observed by ``probes/fsdp_probe.py`` (run as both ranks), and a
checkpoint's DCP metadata (a pickle) is read by a probe process, never by the judge.
"""

from __future__ import annotations

import json
from typing import Any

from grading import probe
from oracle_lib import EQ_STEPS, PATTERN, PROBE, RESUME_AT, tree_max_diff, worst_key

# QUALIFICATION.md: cpu-1 vs gloo-ddp-2 fp64 final params 8.9e-16 (reference, AMAM); only the
# reduction order differs, a real bug moves params by > 1e-4.
DDP_VS_CPU_FP64_TOL = 1e-10


def _check_pattern(run: Any) -> None:
    model = run.summary().get("model", {})
    assert model.get("layer_pattern") == PATTERN, f"{run.name} ran pattern {model}"


def _shard0(placements: list[dict[str, Any]] | None) -> bool:
    """A parameter's placements (None: a plain tensor) are exactly ``(Shard(0),)``."""
    return (placements is not None and len(placements) == 1
            and placements[0]["type"] == "Shard" and placements[0]["dim"] == 0)


def test_gloo_ddp2_matches_cpu1_fp64(cpu1_fp64: Any, ddp_fp64: Any, record_property: Any) -> None:
    """A hybrid (AMAM) model after 20 fp64 AdamW steps at global batch 16: gloo-ddp-2 final parameters within 1e-10 of cpu-1."""
    record_property("oracle", "differential")
    record_property("configurations", "cpu-1,gloo-ddp-2")
    record_property("tolerance", DDP_VS_CPU_FP64_TOL)
    record_property("why", "measured 8.9e-16 (reference) / 5.6e-16 (baseline): only reduction "
                    "order differs; a wrong slice or missing average moves params by > 1e-4")
    cpu1_fp64.require(record_property)
    ddp_fp64.require(record_property)
    _check_pattern(cpu1_fp64)
    _check_pattern(ddp_fp64)
    cpu, ddp = cpu1_fp64.final()["model"], ddp_fp64.final()["model"]
    diff = tree_max_diff(ddp, cpu)
    key, _ = worst_key(ddp, cpu)
    record_property("max_abs_param_diff", diff)
    record_property("worst_key", key)
    assert diff <= DDP_VS_CPU_FP64_TOL, f"gloo-ddp-2 vs cpu-1: {diff} at {key}"


def test_gloo_fsdp2_matches_gloo_ddp2_bitwise(
    ddp_fp64: Any, fsdp_fp64: Any, ddp_fp32_ckpt: Any, fsdp_fp32: Any, record_property: Any
) -> None:
    """A hybrid (AMAM) model after 20 steps: the gloo-fsdp-2 reconstructed full model and optimizer state are bitwise equal to gloo-ddp-2, in fp64 and fp32."""
    record_property("oracle", "differential")
    record_property("configurations", "gloo-ddp-2,gloo-fsdp-2")
    record_property("tolerance", 0.0)
    record_property("why", "measured 0 (model and optimizer, fp32 and fp64, reference and "
                    "baseline): with two ranks and no clipping, FSDP2's reduce-scatter and DDP's "
                    "all-reduce add the same two numbers")
    for ddp, fsdp, dtype in ((ddp_fp64, fsdp_fp64, "fp64"), (ddp_fp32_ckpt, fsdp_fp32, "fp32")):
        ddp.require(record_property)
        fsdp.require(record_property)
        _check_pattern(ddp)
        _check_pattern(fsdp)
        a, b = ddp.final(), fsdp.final()
        for part in ("model", "optim"):
            diff = tree_max_diff(b[part], a[part], part)
            record_property(f"{dtype}_{part}_max_abs_diff", diff)
            assert diff == 0.0, f"{dtype} {part}: gloo-fsdp-2 vs gloo-ddp-2 differ by {diff}"


def test_gloo_fsdp2_wraps_every_block(fsdp_probe: Any, record_property: Any) -> None:
    """Under gloo-fsdp-2 every block of a hybrid model, attention or mixer, is its own fully_shard unit with its parameters sharded on dim 0, and the root is a unit too."""
    record_property("oracle", "reference")
    record_property("configurations", "gloo-fsdp-2")
    record_property("tolerance", "exact (structure)")
    record_property("why", "TASK.md: one fully_shard unit per block, then the root; a block left "
                    "to the root's unit trains the same numbers but all-gathers its weights "
                    "for the whole forward, which only a structural probe can see")
    fsdp_probe.require(record_property)
    for rank in (0, 1):
        report = json.loads((fsdp_probe.out / f"probe-rank{rank}.json").read_text())
        assert report["world_size"] == 2
        assert report["root_is_fsdp_unit"], f"rank {rank}: the root is not a fully_shard unit"
        # None: the unit could not be introspected (no verdict on what it manages).
        root_managed = report["root_managed_param_ids"]
        root_manages_block_params = (None if root_managed is None else
                                     bool(set(root_managed) & set(report["block_param_ids"])))
        assert root_manages_block_params in (False, None), (
            f"rank {rank}: the root unit manages block parameters")
        blocks = report["blocks"]
        assert [b["kind"] for b in blocks] == list(PATTERN)
        for b in blocks:
            managed = b["managed_param_ids"]
            b["manages_exactly_its_params"] = (
                None if managed is None else sorted(managed) == sorted(b["param_ids"]))
        record_property(f"rank{rank}_blocks", json.dumps(
            [(b["index"], b["class"], b["is_fsdp_unit"], b["manages_exactly_its_params"])
             for b in blocks]))
        for b in blocks:
            where = f"rank {rank} block {b['index']} ({b['kind']}, {b['class']})"
            assert b["is_fsdp_unit"], f"{where} is not its own fully_shard unit"
            assert b["manages_exactly_its_params"] in (True, None), (
                f"{where}: its unit does not manage exactly its parameters")
            assert b["n_params"] > 0, f"{where} has no parameters"
            unsharded = {n: p for n, p in b["placements"].items() if not _shard0(p)}
            assert not unsharded, f"{where}: parameters not sharded on dim 0: {unsharded}"


def test_resume_gloo_ddp2_bitwise(
    ddp_fp32_ckpt: Any, ddp_fp32_resumed: Any, record_property: Any
) -> None:
    """A hybrid (AMAM) gloo-ddp-2 run resumed in a fresh launch from its step-10 checkpoint ends bitwise equal (model, optimizer, losses, LRs) to the uninterrupted run; the checkpoint keeps per-rank RNG under rank-suffixed keys."""
    record_property("oracle", "differential")
    record_property("configurations", "gloo-ddp-2")
    record_property("tolerance", 0.0)
    record_property("why", "measured 0 for model and optimizer on every configuration: same "
                    "process layout and thread count, every state restored")
    ddp_fp32_ckpt.require(record_property)
    ckpt = ddp_fp32_ckpt.out / "ckpt" / f"step-{RESUME_AT}"
    assert ckpt.is_dir(), f"no checkpoint at {ckpt}"
    keys = set(probe.call(PROBE, "checkpoint_keys", path=str(ckpt)))
    top = sorted({k.split(".", 1)[0] for k in keys})
    record_property("checkpoint_top_level_keys", ",".join(top))
    for needed in ("model", "optim", "scheduler", "train", "rng_rank0", "rng_rank1"):
        assert needed in top, f"checkpoint lacks {needed!r} (has {top})"
    mixer_keys = [k for k in keys if k.startswith(("model.layers.1.", "model.layers.3."))]
    assert mixer_keys, "checkpoint holds no mixer-layer parameters"

    ddp_fp32_resumed.require(record_property)
    _check_pattern(ddp_fp32_resumed)
    assert ddp_fp32_resumed.summary().get("resumed_from") == RESUME_AT
    full, resumed = ddp_fp32_ckpt.final(), ddp_fp32_resumed.final()
    for part in ("model", "optim"):
        diff = tree_max_diff(resumed[part], full[part], part)
        record_property(f"{part}_max_abs_diff", diff)
        assert diff == 0.0, f"resumed vs uninterrupted {part} differ by {diff}"
    steps_full = {m["step"]: m for m in ddp_fp32_ckpt.metrics()}
    steps_resumed = ddp_fp32_resumed.metrics()
    assert [m["step"] for m in steps_resumed] == list(range(RESUME_AT, EQ_STEPS))
    for m in steps_resumed:
        ref = steps_full[m["step"]]
        assert (m["loss"], m["lr"]) == (ref["loss"], ref["lr"]), (m, ref)
