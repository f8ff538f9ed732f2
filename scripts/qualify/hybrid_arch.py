"""Qualify the hybrid-arch task packet: measure the baseline and the reference solution.

Runs the packet's baseline (``task_packets/hybrid-arch/repo``) and the reference
(the same tree with ``hidden/hybrid-arch/reference/solution.patch`` applied, trained with
``--layer-pattern AMAM``) on cpu-1, gloo-ddp-2 and gloo-fsdp-2, one job at a time, and
MEASURES (never asserts):

  (a) one process vs gloo-ddp-2 / gloo-fsdp-2 at the same global batch (final params, fp64
      and fp32),
  (b) resume from a step-10 checkpoint in a fresh launch vs the uninterrupted run (model and
      optimizer), per configuration,
  (c) gloo-fsdp-2 reconstructed full state vs gloo-ddp-2 (model and optimizer),
  (d) the quality objective: held-out loss after the default 200 steps (3 seeds on cpu-1,
      seed 0 on the two distributed configurations),
  (e) wall time of every run, per configuration,
  (f) torch.export success, the operators used against the public allow-list, exported vs
      eager, and cached (incremental) decoding vs the full forward,
  plus, for the reference only, a baseline checkpoint resumed by the reference code with the
  default (all "A") pattern vs the baseline's own uninterrupted run.

Writes ``task_packets/hybrid-arch/qualification.json`` and ``QUALIFICATION.md``.
Needs a Python with torch (the grading venv), e.g.:

    /tmp/gradevenv/bin/python scripts/qualify/hybrid_arch.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
PACKET = ROOT / "task_packets" / "hybrid-arch"
PATCH = ROOT / "hidden" / "hybrid-arch" / "reference" / "solution.patch"

# The architecture each variant is trained with; the reference uses its new mixer blocks.
VARIANTS: dict[str, list[str]] = {"baseline": [], "reference": ["--layer-pattern", "AMAM"]}
DIST_CONFIGS = ("gloo-ddp-2", "gloo-fsdp-2")
CONFIGS = ("cpu-1", *DIST_CONFIGS)
EQ_STEPS = 20  # equivalence and resume runs
RESUME_AT = 10
QUALITY_SEEDS = (0, 1, 2)
RUN_TIMEOUT_S = 180
RUN_BUDGET_S = 60.0  # every single run must stay under this (packet conventions)

# Declared tolerances: each is set from the measured value (see QUALIFICATION.md for why).
TOLERANCES: dict[str, dict[str, Any]] = {
    "cpu1_vs_ddp_fp64_params": {
        "value": 1e-10,
        "why": "reduction order differs (two half-batch gradients summed vs one batch); fp64 "
               "keeps that at ~1e-15 here (<= 3e-13 in earlier measurements on similar "
               "models), 1e-10 leaves orders of margin while a real bug (wrong slice, missing "
               "average, unsynchronised parameter) moves params by >1e-4",
    },
    "cpu1_vs_ddp_fp32_params": {
        "value": None,
        "why": "informational only: measured ~3.5e-7 here, but fp32 AdamW can amplify "
               "reassociation noise to ~1e-4 in 20 steps on other seeds and models, too close "
               "to small bugs to be a check; the fp64 row is the check",
    },
    "resume_vs_uninterrupted": {
        "value": 0.0,
        "why": "same process layout, same thread count, every state restored: bitwise",
    },
    "fsdp_vs_ddp_full_state": {
        "value": 0.0,
        "why": "two ranks, no clipping: FSDP2 reduce-scatter and DDP all-reduce add the same "
               "two numbers, so the full state is bitwise equal (fp32 and fp64)",
    },
    "baseline_ckpt_into_all_A": {
        "value": 0.0,
        "why": "the all-A model must be the baseline model (same keys, same init, same math)",
    },
    "cached_decode_fp32": {
        "value": 1e-4,
        "why": "chunked decoding runs other matmul shapes than the full forward; measured "
               "<= 3e-6 on O(1) logits, 1e-4 leaves ~30x margin and still catches a stale "
               "or missing cache (errors of order 1e-1)",
    },
    "cached_decode_fp64": {
        "value": 1e-10,
        "why": "the same comparison in fp64: measured <= 5e-15",
    },
    "export_vs_eager_fp32": {
        "value": 1e-5,
        "why": "the exported program runs the same ATen kernels (see the measured row); "
               "1e-5 allows a different but equivalent lowering",
    },
    "quality_margin_vs_baseline": {
        "value": None,
        "why": "see the quality section: a candidate is said to improve on the baseline when "
               "its seed-mean held-out loss is below the baseline seed-mean by more than twice "
               "the larger seed standard deviation",
    },
}

PROBE = r'''
import json, sys
import torch
torch.set_num_threads(1)
sys.path.insert(0, "tests")
from test_model import ALLOWED_EXPORT_OPS
from hybridlm.data import MarkovSource, heldout_batches
from hybridlm.export import build_export_model, export_model, exported_ops
from hybridlm.model import ModelArgs, Transformer, decode_logits

pattern, final_state, program_path = sys.argv[1], sys.argv[2], sys.argv[3]
kwargs = {"n_layers": len(pattern)}
if set(pattern) != {"A"}:
    kwargs["layer_pattern"] = pattern
args = ModelArgs(**kwargs)
out = {"decode": {}}
x = torch.randint(0, 64, (3, 32), generator=torch.Generator().manual_seed(1))
for name, dtype in (("fp32", torch.float32), ("fp64", torch.float64)):
    torch.manual_seed(0)
    model = Transformer(args).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.3)  # O(1) activations: the comparison is not trivially small
        full = model(x)
    out["decode"][name] = {
        f"chunk{c}": (decode_logits(model, x, chunk=c) - full).abs().max().item()
        for c in (1, 3, 5, 32)
    }
    out["decode"][name]["logit_scale"] = full.abs().max().item()
state = torch.load(final_state, weights_only=True)["model"]
trained = build_export_model(args, state)
try:
    program = export_model(trained)
    ops = sorted(exported_ops(program))
    # The program is exported for batch 1 (static shapes), so compare sequence by sequence.
    batch = heldout_batches(MarkovSource(), n_batches=1, batch_size=4)[0][:, :-1]
    with torch.no_grad():
        diff = max((program.module()(row[None]) - trained(row[None])).abs().max().item()
                   for row in batch)
    saved = torch.export.load(program_path)
    out["export"] = {
        "ok": True, "ops": ops, "not_allowed": sorted(set(ops) - ALLOWED_EXPORT_OPS),
        "exported_vs_eager": diff,
        "saved_program_keys_match": set(saved.state_dict) == set(trained.state_dict()),
    }
except Exception as exc:  # measured, not asserted
    out["export"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
print("PROBE " + json.dumps(out))
'''


@dataclass
class RunRecord:
    variant: str
    label: str
    config: str
    command: str
    rc: int | None = None
    wall_s: float | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.rc == 0


class Runner:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.records: list[RunRecord] = []

    def repo(self, variant: str) -> Path:
        return self.work / variant / "repo"

    def out(self, variant: str, label: str) -> Path:
        return self.work / variant / "runs" / label

    def train(self, variant: str, label: str, config: str, *args: str,
              code: str | None = None) -> RunRecord:
        """One training run, in ``code``'s tree (default: the variant's own)."""
        repo = self.repo(code or variant)
        out = self.out(variant, label)
        cmd = [sys.executable, "train.py", "--config", config, "--out", str(out / "run"), *args]
        if config != "cpu-1":
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
                   "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                   "--master-port", str(free_port()), *cmd[1:]]
        shown = " ".join(cmd).replace(sys.executable + " -m torch.distributed.run", "torchrun")
        shown = shown.replace(sys.executable, "python").replace(str(self.work), "$WORK")
        rec = RunRecord(variant, label, config, f"(cd $WORK/{code or variant}/repo && {shown})")
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
               "PYTHONDONTWRITEBYTECODE": "1"}
        started = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True,
                                  timeout=RUN_TIMEOUT_S)
            rec.rc = proc.returncode
            if proc.returncode != 0:
                rec.error = proc.stderr[-2000:]
        except subprocess.TimeoutExpired:
            rec.error = f"timed out after {RUN_TIMEOUT_S} s"
        rec.wall_s = round(time.perf_counter() - started, 2)
        summary = out / "run" / "summary.json"
        if rec.ok and summary.is_file():
            rec.summary = json.loads(summary.read_text())
        self.records.append(rec)
        status = "ok" if rec.ok else f"FAILED ({rec.error and rec.error.splitlines()[-1]})"
        print(f"[{variant:9s}] {label:24s} {config:12s} {rec.wall_s:6.1f} s  {status}",
              flush=True)
        return rec

    def final(self, variant: str, label: str) -> dict[str, Any] | None:
        path = self.out(variant, label) / "run" / "final_state.pt"
        return torch.load(path, weights_only=True) if path.is_file() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def max_abs_diff(a: Any, b: Any) -> float:
    """Largest |a - b| over nested state dicts (in fp64); inf when the structures differ."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape:
            return float("inf")
        return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return float("inf")
        return max((max_abs_diff(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return float("inf")
        return max((max_abs_diff(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    return 0.0 if a == b else float("inf")


def compare(runner: Runner, variant: str, a: str, b: str, *, b_variant: str | None = None
            ) -> dict[str, float | None]:
    fa, fb = runner.final(variant, a), runner.final(b_variant or variant, b)
    if fa is None or fb is None:
        return {"model": None, "optim": None}
    return {"model": max_abs_diff(fa["model"], fb["model"]),
            "optim": max_abs_diff(fa["optim"], fb["optim"])}


def prepare(work: Path) -> None:
    for variant in VARIANTS:
        repo = work / variant / "repo"
        shutil.copytree(PACKET / "repo", repo,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run(["git", "apply", "--binary", str(PATCH)], cwd=work / "reference" / "repo",
                   check=True)


def qualify_variant(runner: Runner, variant: str) -> dict[str, Any]:
    arch = VARIANTS[variant]
    eq = ["--steps", str(EQ_STEPS), *arch]
    ckpt = ["--save-every", str(RESUME_AT)]
    for config in CONFIGS:
        runner.train(variant, f"eq-fp32-{config}", config, *eq, *ckpt, "--ckpt",
                     str(runner.out(variant, f"eq-fp32-{config}") / "ckpt"))
        runner.train(variant, f"eq-fp64-{config}", config, *eq, "--dtype", "fp64")
    for config in CONFIGS:
        step = runner.out(variant, f"eq-fp32-{config}") / "ckpt" / f"step-{RESUME_AT}"
        runner.train(variant, f"resume-{config}", config, *eq, "--resume", str(step))
    for seed in QUALITY_SEEDS:
        extra = ["--export", str(runner.out(variant, "quality-cpu-1-s0") / "model.pt2")] \
            if seed == 0 else []
        runner.train(variant, f"quality-cpu-1-s{seed}", "cpu-1", "--seed", str(seed), *arch,
                     *extra)
    for config in DIST_CONFIGS:
        runner.train(variant, f"quality-{config}-s0", config, "--seed", "0", *arch)

    res: dict[str, Any] = {"layer_pattern": arch[1] if arch else "AAAA (default)"}
    res["a_one_process_vs_distributed"] = {
        f"{dtype}_cpu1_vs_{config}": compare(runner, variant, f"eq-{dtype}-cpu-1",
                                             f"eq-{dtype}-{config}")["model"]
        for dtype in ("fp64", "fp32") for config in DIST_CONFIGS
    }
    res["b_resume_vs_uninterrupted"] = {
        config: compare(runner, variant, f"resume-{config}", f"eq-fp32-{config}")
        for config in CONFIGS
    }
    res["c_fsdp_vs_ddp_full_state"] = {
        dtype: compare(runner, variant, f"eq-{dtype}-gloo-fsdp-2", f"eq-{dtype}-gloo-ddp-2")
        for dtype in ("fp32", "fp64")
    }
    heldout = {}
    for label in [f"quality-cpu-1-s{s}" for s in QUALITY_SEEDS] + \
                 [f"quality-{c}-s0" for c in DIST_CONFIGS]:
        rec = next(r for r in runner.records if r.variant == variant and r.label == label)
        heldout[label] = rec.summary.get("heldout_loss")
    cpu = [heldout[f"quality-cpu-1-s{s}"] for s in QUALITY_SEEDS]
    cpu = [v for v in cpu if v is not None]
    res["d_quality"] = {
        "heldout_loss": heldout,
        "cpu1_seed_mean": statistics.mean(cpu) if cpu else None,
        "cpu1_seed_std": statistics.stdev(cpu) if len(cpu) > 1 else None,
    }
    res["e_wall_s"] = {
        config: {
            "max_wall_s": max((r.wall_s or 0.0) for r in runner.records
                              if r.variant == variant and r.config == config),
            "quality_run_wall_s": next(r.wall_s for r in runner.records if r.variant == variant
                                       and r.label == f"quality-{config}-s0"),
            "quality_run_train_s": next(r.summary.get("train_s") for r in runner.records
                                        if r.variant == variant
                                        and r.label == f"quality-{config}-s0"),
        }
        for config in CONFIGS
    }
    res["f_export_and_decode"] = probe(runner, variant)
    return res


def probe(runner: Runner, variant: str) -> dict[str, Any]:
    arch = VARIANTS[variant]
    pattern = arch[1] if arch else "AAAA"
    run = runner.out(variant, "quality-cpu-1-s0")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, pattern, str(run / "run" / "final_state.pt"),
         str(run / "model.pt2")],
        cwd=runner.repo(variant), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    for line in proc.stdout.splitlines():
        if line.startswith("PROBE "):
            return json.loads(line[len("PROBE "):])
    return {"error": proc.stderr[-2000:]}


def compat(runner: Runner) -> dict[str, Any]:
    """Baseline checkpoints resumed by the reference code with the default pattern."""
    out: dict[str, Any] = {}
    for config in ("cpu-1", "gloo-fsdp-2"):
        step = runner.out("baseline", f"eq-fp32-{config}") / "ckpt" / f"step-{RESUME_AT}"
        label = f"compat-baseline-ckpt-{config}"
        runner.train("reference", label, config, "--steps", str(EQ_STEPS), "--resume", str(step),
                     code="reference")
        out[config] = compare(runner, "reference", label, f"eq-fp32-{config}",
                              b_variant="baseline")
    return out


def fmt(x: Any) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return "0" if x == 0.0 else f"{x:.3g}"
    return str(x)


def within(measured: Any, tol: Any) -> str:
    if measured is None or tol is None:
        return "n/a"
    return "yes" if measured <= tol else "NO"


def render_md(result: dict[str, Any]) -> str:
    v = result["variants"]
    tol = {k: t["value"] for k, t in TOLERANCES.items()}
    lines = [
        "# hybrid-arch qualification",
        "",
        "Generated by `scripts/qualify/hybrid_arch.py`; every number below is measured on "
        f"this machine ({result['host']['cpus']} CPUs, torch {result['torch']}, "
        f"{result['date']}), one job at a time (host load average at start / end: "
        f"{result['host']['loadavg_1_5_15_start'][0]} / {result['host']['loadavg_1_5_15_end'][0]}"
        "; the machine is shared, so wall times are upper-end). Nothing here is asserted by "
        "the script; the "
        "tolerance column is the one this packet declares, set from these measurements.",
        "",
        "Variants: **baseline** = `repo/` as shipped (all attention, `AAAA`); **reference** = "
        "`repo/` + the hidden reference patch, trained with `--layer-pattern AMAM`. "
        f"Equivalence and resume runs: {EQ_STEPS} AdamW steps, global batch 16, seed 0, "
        f"checkpoint at step {RESUME_AT}; quality runs: the default 200 steps.",
        "",
        "## Measured table",
        "",
        "| check | quantity | baseline | reference | declared tolerance | within |",
        "| --- | --- | --- | --- | --- | --- |",
    ]

    def row(check: str, what: str, get: Any, tkey: str | None) -> None:
        b, r = get(v["baseline"]), get(v["reference"])
        t = tol.get(tkey) if tkey else None
        ok = "n/a" if t is None else ("yes" if within(b, t) == within(r, t) == "yes"
                                      else "NO")
        lines.append(f"| {check} | {what} | {fmt(b)} | {fmt(r)} | {fmt(t)} | {ok} |")

    for config in DIST_CONFIGS:
        row("(a) 1 proc vs dist", f"fp64 final params, cpu-1 vs {config}",
            lambda x, c=config: x["a_one_process_vs_distributed"][f"fp64_cpu1_vs_{c}"],
            "cpu1_vs_ddp_fp64_params")
        row("(a) 1 proc vs dist", f"fp32 final params, cpu-1 vs {config}",
            lambda x, c=config: x["a_one_process_vs_distributed"][f"fp32_cpu1_vs_{c}"], None)
    for config in CONFIGS:
        for part in ("model", "optim"):
            row("(b) resume", f"{config}: {part}, resumed at {RESUME_AT} vs uninterrupted",
                lambda x, c=config, p=part: x["b_resume_vs_uninterrupted"][c][p],
                "resume_vs_uninterrupted")
    for dtype in ("fp32", "fp64"):
        for part in ("model", "optim"):
            row("(c) FSDP2 vs DDP", f"{dtype} full {part} state",
                lambda x, d=dtype, p=part: x["c_fsdp_vs_ddp_full_state"][d][p],
                "fsdp_vs_ddp_full_state")
    for seed in QUALITY_SEEDS:
        row("(d) quality", f"held-out loss, cpu-1, seed {seed}",
            lambda x, s=seed: x["d_quality"]["heldout_loss"][f"quality-cpu-1-s{s}"], None)
    row("(d) quality", "held-out loss, cpu-1, seed mean",
        lambda x: x["d_quality"]["cpu1_seed_mean"], None)
    row("(d) quality", "held-out loss, cpu-1, seed std",
        lambda x: x["d_quality"]["cpu1_seed_std"], None)
    for config in DIST_CONFIGS:
        row("(d) quality", f"held-out loss, {config}, seed 0",
            lambda x, c=config: x["d_quality"]["heldout_loss"][f"quality-{c}-s0"], None)
    for config in CONFIGS:
        row("(e) wall time", f"{config}: 200-step run, launch to exit (s)",
            lambda x, c=config: x["e_wall_s"][c]["quality_run_wall_s"], None)
        row("(e) wall time", f"{config}: slowest run of this config (s)",
            lambda x, c=config: x["e_wall_s"][c]["max_wall_s"], None)
    row("(f) export", "torch.export succeeds",
        lambda x: x["f_export_and_decode"].get("export", {}).get("ok"), None)
    row("(f) export", "ops outside the allow-list",
        lambda x: ", ".join(x["f_export_and_decode"].get("export", {})
                            .get("not_allowed", ["?"])) or "none", None)
    row("(f) export", "exported vs eager logits (trained model)",
        lambda x: x["f_export_and_decode"].get("export", {}).get("exported_vs_eager"),
        "export_vs_eager_fp32")
    for dtype in ("fp32", "fp64"):
        for chunk in (1, 3, 5, 32):
            row("(f) decoding", f"{dtype} cached (chunk {chunk}) vs full forward logits",
                lambda x, d=dtype, c=chunk: x["f_export_and_decode"]["decode"][d][f"chunk{c}"],
                f"cached_decode_{dtype}")
    for config, d in result["compat"].items():
        for part in ("model", "optim"):
            lines.append(
                f"| compat | {config}: baseline step-{RESUME_AT} checkpoint resumed by the "
                f"reference code (default pattern) vs baseline uninterrupted, {part} | - | "
                f"{fmt(d[part])} | 0 | {within(d[part], 0.0)} |")
    over = [f"{r['variant']}/{r['label']} ({r['wall_s']} s)" for r in result["runs"]
            if (r["wall_s"] or 0) >= RUN_BUDGET_S]
    failed = [f"{r['variant']}/{r['label']}" for r in result["runs"] if r["rc"] != 0]
    lines += [
        "",
        f"Runs: {len(result['runs'])}; failed: {', '.join(failed) or 'none'}; at or over the "
        f"{RUN_BUDGET_S:g} s per-run budget: {', '.join(over) or 'none'}.",
        "",
        "Export ops (reference): `" + ", ".join(
            v["reference"]["f_export_and_decode"].get("export", {}).get("ops", [])) + "`.",
        "",
        "## Declared tolerances and why",
        "",
    ]
    for key, t in TOLERANCES.items():
        lines.append(f"- `{key}` = {fmt(t['value'])}: {t['why']}.")
    q = result["quality"]
    lines += [
        "",
        "## Quality objective",
        "",
        "Held-out loss (mean cross-entropy over 8 fixed held-out batches of 64 sequences, "
        "independent of the run seed) after the default 200 steps, global batch 16, on cpu-1. "
        f"Baseline seed mean {fmt(q['baseline_mean'])} (std {fmt(q['baseline_std'])}); "
        f"reference (`AMAM`) {fmt(q['reference_mean'])} (std {fmt(q['reference_std'])}); "
        f"improvement {fmt(q['improvement'])}, i.e. {fmt(q['improvement_in_stds'])} x the "
        "larger seed std. The distributed configurations give the same held-out loss as "
        "cpu-1 up to fp32 noise (rows above). The source's floor is about 0.55 (entropy "
        "0.43 nats per predictable token, plus the uniform second token).",
        "",
        "## Integration depth",
        "",
        "The feature touches every contract of the codebase: the model definition and its "
        "state-dict key schema (new keys for mixer layers, unchanged keys for attention "
        "layers), initialisation order (the all-A pattern must stay bitwise the baseline), "
        "incremental decoding (a second kind of per-layer cache state, chunked prefill), "
        "`torch.export` (the mixer must lower to allow-listed ATen ops, no loops or in-place "
        "cache updates in the graph), FSDP2 per-block wrapping (the new block is a wrapping "
        "unit with its own parameters), DDP (every parameter used every step), DCP "
        "checkpoint save/resume (new parameters and their optimizer state resharded across "
        "world sizes; old checkpoints still load), the CLI (`--layer-pattern`) and "
        "`summary.json` (the pattern is recorded).",
        "",
        "## Commands",
        "",
        "Produced by `/tmp/gradevenv/bin/python scripts/qualify/hybrid_arch.py` (from the "
        "harness root); `$WORK/baseline/repo` is `task_packets/hybrid-arch/repo`, "
        "`$WORK/reference/repo` the same with `git apply --binary "
        "hidden/hybrid-arch/reference/solution.patch`. Every run, in order:",
        "",
        "```",
        *[r["command"] for r in result["runs"]],
        "```",
        "",
        "Check (f) runs a probe (`PROBE` in the script) in each tree: cached decoding vs "
        "full forward on a model with N(0, 0.3) weights (O(1) logits), and `torch.export` "
        "of the trained cpu-1 seed-0 model.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="qualify-hybrid-arch-"))
    if work.exists() and any(work.iterdir()):
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load_start = os.getloadavg()
    prepare(work)
    runner = Runner(work)
    variants = {name: qualify_variant(runner, name) for name in VARIANTS}
    compat_result = compat(runner)

    bq, rq = variants["baseline"]["d_quality"], variants["reference"]["d_quality"]
    quality: dict[str, Any] = {
        "baseline_mean": bq["cpu1_seed_mean"], "baseline_std": bq["cpu1_seed_std"],
        "reference_mean": rq["cpu1_seed_mean"], "reference_std": rq["cpu1_seed_std"],
    }
    if None not in quality.values():
        quality["improvement"] = quality["baseline_mean"] - quality["reference_mean"]
        spread = max(quality["baseline_std"], quality["reference_std"])
        quality["improvement_in_stds"] = quality["improvement"] / spread if spread else None
    result = {
        "task": "hybrid-arch",
        "torch": torch.__version__,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                 # The machine is shared: wall times scale with what else runs.
                 "loadavg_1_5_15_start": [round(x, 2) for x in load_start],
                 "loadavg_1_5_15_end": [round(x, 2) for x in os.getloadavg()]},
        "date": time.strftime("%Y-%m-%d"),
        "settings": {"eq_steps": EQ_STEPS, "resume_at": RESUME_AT,
                     "quality_seeds": list(QUALITY_SEEDS), "quality_steps": 200,
                     "global_batch": 16, "layer_patterns": {k: v[1] if v else "AAAA"
                                                            for k, v in VARIANTS.items()}},
        "tolerances": TOLERANCES,
        "variants": variants,
        "compat": compat_result,
        "quality": quality,
        "runs": [asdict(r) | {"summary": {k: r.summary.get(k) for k in
                                          ("final_loss", "heldout_loss", "train_s")}}
                 for r in runner.records],
        "total_wall_s": round(time.perf_counter() - started, 1),
    }
    # A failing run's stderr could quote the reference's source; the canary must never leave
    # hidden/, so it is scrubbed from everything written into the (public) packet.
    canary = (ROOT / "hidden" / "hybrid-arch" / "CANARY").read_text().strip()
    for name, text in (("qualification.json", json.dumps(result, indent=1) + "\n"),
                       ("QUALIFICATION.md", render_md(result))):
        (PACKET / name).write_text(text.replace(canary, "<canary>"))
    print(f"wrote {PACKET / 'qualification.json'} and QUALIFICATION.md "
          f"in {result['total_wall_s']} s")
    if not args.keep and args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
