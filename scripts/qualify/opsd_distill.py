"""Qualify the opsd-distill task packet: measure the baseline and the hidden reference.

Runs every training job the packet's contracts rest on, for the baseline (``--mode sft``) and
the reference solution (``--mode opsd``), on cpu-1, gloo-ddp-2 and gloo-fsdp-2, and MEASURES:

  (a) one process vs gloo-ddp-2 at the same global batch (fp64): max abs diff of final params
  (b) resume from a mid-run checkpoint in a fresh launch vs the uninterrupted run (fp32):
      max abs diff of final params and of the optimizer state, per configuration
  (c) gloo-fsdp-2 reconstructed full state vs gloo-ddp-2 (fp32): max abs diff
  (d) the quality objective (held-out answer loss and greedy exact match after the fixed
      300 steps at the defaults), reference vs baseline, per configuration
  (e) wall time of every run (each must stay under 60 s on a 2-core machine)
  (f) the reference in its default --mode sft vs the baseline (SFT must be unchanged)
  (g) a negative control for (a): the reference with the classic per-rank-mean bug (the
      distillation loss divided by the LOCAL completion-token count), gloo-ddp-2 vs the
      correct reference on cpu-1, so the declared tolerance of (a) is shown to catch it

Nothing is asserted; the declared tolerances (below) are compared with the measurements and
the verdicts recorded. Writes ``task_packets/opsd-distill/qualification.json`` and
``QUALIFICATION.md``.

Usage (from the harness root; torch 2.13 CPU):
    python scripts/qualify/opsd_distill.py [--python /tmp/gradevenv/bin/python] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKET = ROOT / "task_packets" / "opsd-distill"
PATCH = ROOT / "hidden" / "opsd-distill" / "reference" / "solution.patch"
# Not the packet's 29511: other qualification scripts may run on this machine at the same time.
PORT = 29561
RUN_LIMIT_S = 60.0

# Short runs for the equivalence and resume checks: long enough to cross the OPSD start step
# (10) and a checkpoint (20), short enough to keep the whole qualification to a few minutes.
EQ_STEPS, EQ_START, EQ_SAVE = 40, 10, 20

# Declared tolerances, set from the measured values (see QUALIFICATION.md for the reasoning).
TOLERANCES: dict[str, float] = {
    # fp64, 40 AdamW steps: measured ~1e-14..1e-13; 1e-9 leaves four orders of margin while a
    # per-rank-mean normalisation bug moves parameters by >= 1e-6 (see the reasoning).
    "one_vs_ddp_fp64": 1e-9,
    # Checkpoint resume must be bit-exact (model and optimizer) in every configuration.
    "resume": 0.0,
    # DDP and FSDP2 without gradient clipping reduce identically: bit-exact.
    "fsdp_vs_ddp": 0.0,
    # Reference --mode sft vs baseline: the default mode must not change.
    "sft_unchanged": 0.0,
    # Quality: the reference's held-out answer loss may exceed the baseline's by at most this.
    "quality_heldout_loss_margin": 0.05,
}


@dataclass
class Run:
    name: str
    wall_s: float
    out: Path
    summary: dict[str, Any]


class Runner:
    def __init__(self, python: str, work: Path) -> None:
        self.python = python
        self.work = work
        self.runs: list[dict[str, Any]] = []

    def train(self, tree: Path, label: str, config: str, args: list[str]) -> Run:
        out = self.work / label
        if config == "cpu-1":
            cmd = [self.python, "train.py", "--config", config]
        else:
            cmd = [
                self.python,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "1",
                "--nproc-per-node",
                "2",
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(PORT),
                "train.py",
                "--config",
                config,
            ]
        cmd += [*args, "--out", str(out)]
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": "lo",
            "PYTHONHASHSEED": "0",
        }
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=300, env=env)
        wall = time.perf_counter() - t0
        shown = " ".join(c if c != self.python else "python" for c in cmd).replace(
            str(self.work) + "/", "$WORK/"
        )
        record = {
            "label": label,
            "config": config,
            "command": shown,
            "wall_s": round(wall, 2),
            "rc": proc.returncode,
            "under_60s": wall < RUN_LIMIT_S,
        }
        self.runs.append(record)
        print(f"  {label:<40} {config:<12} rc={proc.returncode} {wall:6.1f} s", flush=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{label} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        summary_path = out / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
        return Run(label, wall, out, summary)


def load_state(out: Path) -> dict[str, Any]:
    import torch

    return torch.load(out / "final_state.pt", weights_only=False)


def max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Max abs difference over every tensor of two (nested) state dicts; inf on a key mismatch."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape:
            return float("inf")
        return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return float("inf")
        return max((max_diff(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return float("inf")
        return max((max_diff(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    return 0.0 if a == b else float("inf")


LOCAL_MEAN_BUG = (
    "    global_count = rt.all_reduce_sum(mask.sum())\n"
    "    loss = local_sum * rt.world_size / global_count\n",
    "    global_count = rt.all_reduce_sum(mask.sum())\n"
    "    loss = local_sum / mask.sum()  # negative control: per-rank mean\n",
)


def prepare_bug_tree(work: Path, reference: Path) -> Path:
    tree = work / "reference-local-mean-bug"
    shutil.copytree(reference, tree)
    opsd = tree / "tinylm" / "opsd.py"
    text = opsd.read_text()
    if LOCAL_MEAN_BUG[0] not in text:
        raise RuntimeError("the reference's distill_loss changed; update LOCAL_MEAN_BUG")
    opsd.write_text(text.replace(*LOCAL_MEAN_BUG))
    return tree


def prepare_trees(work: Path) -> tuple[Path, Path]:
    baseline = work / "baseline"
    reference = work / "reference"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(PACKET / "repo", baseline, ignore=ignore)
    shutil.copytree(PACKET / "repo", reference, ignore=ignore)
    subprocess.run(["git", "init", "-q"], cwd=reference, check=True)
    subprocess.run(["git", "apply", "--binary", str(PATCH)], cwd=reference, check=True)
    shutil.rmtree(reference / ".git")
    return baseline, reference


def measure_tree(r: Runner, tree: Path, variant: str, quick: bool) -> dict[str, Any]:
    mode = ["--mode", "opsd", "--opsd-start-step", str(EQ_START)] if variant == "reference" else []
    eq = ["--steps", str(EQ_STEPS), "--no-eval", *mode]
    res: dict[str, Any] = {}

    # (a) one process vs two DDP ranks at the same global batch, fp64. For the reference the
    # student samples greedily (temperature 0) so both runs see the same completions; with
    # temperature 1 each rank draws from its own stream and the runs legitimately differ.
    temps = (
        [("greedy", ["--opsd-temperature", "0"]), ("sampled", [])]
        if variant == "reference"
        else [("", [])]
    )
    for tag, extra in temps:
        one = r.train(
            tree,
            f"{variant}-a-cpu1-fp64{('-' + tag) if tag else ''}",
            "cpu-1",
            [*eq, "--dtype", "fp64", *extra],
        )
        ddp = r.train(
            tree,
            f"{variant}-a-ddp-fp64{('-' + tag) if tag else ''}",
            "gloo-ddp-2",
            [*eq, "--dtype", "fp64", *extra],
        )
        key = "one_vs_ddp_fp64" + (f"_{tag}" if tag else "")
        res[key] = max_diff(load_state(one.out)["model"], load_state(ddp.out)["model"])

    # (b) resume in a fresh launch vs uninterrupted, and (c) FSDP vs DDP, fp32.
    full: dict[str, dict[str, Any]] = {}
    for config in ("cpu-1", "gloo-ddp-2", "gloo-fsdp-2"):
        ck = r.work / f"{variant}-ck-{config}"
        u = r.train(
            tree,
            f"{variant}-b-{config}-uninterrupted",
            config,
            [*eq, "--ckpt", str(ck), "--save-every", str(EQ_SAVE)],
        )
        s = r.train(
            tree,
            f"{variant}-b-{config}-resumed",
            config,
            [*eq, "--resume", str(ck / f"step-{EQ_SAVE}")],
        )
        a, b = load_state(u.out), load_state(s.out)
        full[config] = a
        res[f"resume_{config}"] = {
            "model": max_diff(a["model"], b["model"]),
            "optimizer": max_diff(a["optimizer"], b["optimizer"]),
        }
    res["fsdp_vs_ddp"] = {
        "model": max_diff(full["gloo-fsdp-2"]["model"], full["gloo-ddp-2"]["model"]),
        "optimizer": max_diff(full["gloo-fsdp-2"]["optimizer"], full["gloo-ddp-2"]["optimizer"]),
    }

    # (d) the quality objective at the fixed defaults (300 steps, global batch 32, seed 0).
    quality_mode = ["--mode", "opsd"] if variant == "reference" else []
    res["quality"] = {}
    for config in ("cpu-1",) if quick else ("cpu-1", "gloo-ddp-2", "gloo-fsdp-2"):
        q = r.train(tree, f"{variant}-d-{config}-quality", config, quality_mode)
        res["quality"][config] = {
            **q.summary["heldout"],
            "final_train_loss": q.summary["final_loss"],
            "wall_s": round(q.wall_s, 2),
        }
    return res


def verdicts(m: dict[str, Any]) -> dict[str, Any]:
    tol = TOLERANCES
    out: dict[str, Any] = {}
    for v in ("baseline", "reference"):
        d = m[v]
        a_key = "one_vs_ddp_fp64" if v == "baseline" else "one_vs_ddp_fp64_greedy"
        out[v] = {
            "a_one_vs_ddp": d[a_key] <= tol["one_vs_ddp_fp64"],
            "b_resume": all(
                max(d[f"resume_{c}"].values()) <= tol["resume"]
                for c in ("cpu-1", "gloo-ddp-2", "gloo-fsdp-2")
            ),
            "c_fsdp_vs_ddp": max(d["fsdp_vs_ddp"].values()) <= tol["fsdp_vs_ddp"],
        }
    out["d_quality"] = {
        c: m["reference"]["quality"][c]["loss"]
        <= m["baseline"]["quality"][c]["loss"] + tol["quality_heldout_loss_margin"]
        for c in m["reference"]["quality"]
    }
    out["f_sft_unchanged"] = m["sft_unchanged"] <= tol["sft_unchanged"]
    # A negative control passes when the check CATCHES the bug.
    out["g_negative_control_caught"] = m["negative_local_mean_vs_one"] > tol["one_vs_ddp_fp64"]
    return out


def fmt(x: float) -> str:
    return "0 (bitwise)" if x == 0 else f"{x:.3g}"


def write_markdown(report: dict[str, Any], path: Path) -> None:
    m, v = report["measurements"], report["verdicts"]
    b, r = m["baseline"], m["reference"]
    lines = [
        "# Qualification of opsd-distill",
        "",
        f"Generated by `{report['command']}` on {report['machine']} "
        f"(torch {report['torch']}, {report['cpus']} CPUs, shared machine: timings carry about +-50% noise).",
        "Equivalence and resume runs: "
        f"{EQ_STEPS} steps, global batch 32, seed 0, checkpoint at step {EQ_SAVE}; the reference runs "
        f"`--mode opsd --opsd-start-step {EQ_START}` so the distillation term, the sampler and its "
        "checkpointed state are all exercised before and after the checkpoint. Quality runs: the "
        "defaults (300 steps, global batch 32, seed 0, lr 3e-3; reference `--mode opsd`, OPSD from step 150).",
        "",
        "## Measured",
        "",
        "| check | baseline (sft) | reference (opsd) | declared tolerance | verdict (b / r) |",
        "|---|---|---|---|---|",
        f"| (a) cpu-1 vs gloo-ddp-2, fp64, max abs param diff | {fmt(b['one_vs_ddp_fp64'])} | "
        f"greedy sampling: {fmt(r['one_vs_ddp_fp64_greedy'])}; temperature 1: {fmt(r['one_vs_ddp_fp64_sampled'])} "
        f"(not comparable, see below) | {TOLERANCES['one_vs_ddp_fp64']:g} | "
        f"{v['baseline']['a_one_vs_ddp']} / {v['reference']['a_one_vs_ddp']} |",
    ]
    for c in ("cpu-1", "gloo-ddp-2", "gloo-fsdp-2"):
        lines.append(
            f"| (b) resume vs uninterrupted, {c}, fp32 (model / optimizer) | "
            f"{fmt(b[f'resume_{c}']['model'])} / {fmt(b[f'resume_{c}']['optimizer'])} | "
            f"{fmt(r[f'resume_{c}']['model'])} / {fmt(r[f'resume_{c}']['optimizer'])} | 0 | "
            f"{v['baseline']['b_resume']} / {v['reference']['b_resume']} |"
        )
    lines.append(
        f"| (c) gloo-fsdp-2 full state vs gloo-ddp-2, fp32 (model / optimizer) | "
        f"{fmt(b['fsdp_vs_ddp']['model'])} / {fmt(b['fsdp_vs_ddp']['optimizer'])} | "
        f"{fmt(r['fsdp_vs_ddp']['model'])} / {fmt(r['fsdp_vs_ddp']['optimizer'])} | 0 | "
        f"{v['baseline']['c_fsdp_vs_ddp']} / {v['reference']['c_fsdp_vs_ddp']} |"
    )
    lines.append(
        f"| (f) reference `--mode sft` vs baseline, cpu-1, 40 steps, max abs param diff | | "
        f"{fmt(m['sft_unchanged'])} | 0 | {v['f_sft_unchanged']} |"
    )
    lines.append(
        f"| (g) negative control: reference with the per-rank-mean bug on gloo-ddp-2 vs correct "
        f"reference on cpu-1, fp64, greedy | | {fmt(m['negative_local_mean_vs_one'])} | must exceed "
        f"{TOLERANCES['one_vs_ddp_fp64']:g} | caught: {v['g_negative_control_caught']} |"
    )
    lines += [
        "",
        "### (d) Quality objective (held-out set of 512 problems, after 300 steps)",
        "",
        "| configuration | baseline loss | baseline exact match | reference loss | reference exact match | "
        "reference loss <= baseline + 0.05 |",
        "|---|---|---|---|---|---|",
    ]
    for c, q in r["quality"].items():
        bq = b["quality"][c]
        lines.append(
            f"| {c} | {bq['loss']:.4f} | {bq['exact_match']:.4f} | {q['loss']:.4f} | "
            f"{q['exact_match']:.4f} | {v['d_quality'][c]} |"
        )
    lines += [
        "",
        "### (e) Wall time per run (seconds, including interpreter start and launch)",
        "",
        "| run | configuration | wall s | under 60 s |",
        "|---|---|---|---|",
    ]
    for run in report["runs"]:
        lines.append(
            f"| {run['label']} | {run['config']} | {run['wall_s']:.1f} | {run['under_60s']} |"
        )
    lines += [
        "",
        "## Declared tolerances and why",
        "",
        "- **(a) one process vs gloo-ddp-2: 1e-9 in fp64.** Two ranks never match one process bit for bit "
        "(the gradient sum is reduced in a different order), so the check runs in fp64 where the measured "
        "drift after 40 AdamW steps is at rounding level. 1e-9 keeps orders of magnitude of margin and is "
        "still far below what a real bug produces: the negative control (g), which divides the "
        "distillation loss by the per-rank completion-token count instead of the all-reduced global "
        f"count, measures {fmt(m['negative_local_mean_vs_one'])} (completion lengths vary from 1 to 3 "
        "tokens, so the ranks' counts differ). For the reference the check uses "
        "`--opsd-temperature 0` (greedy): with temperature 1, each rank samples from its own stream, "
        "so one process and two ranks see different completions and their parameters differ at the "
        "level of the training noise (the measured temperature-1 value is reported only to show that).",
        "- **(b) resume: 0 (bitwise), model and optimizer, every configuration.** DCP restores model, "
        "optimizer, scheduler, data stream position and every rank's RNG states under rank-suffixed "
        "keys; nothing in a resumed step depends on anything else, so any difference is a lost piece of "
        "state (e.g. the per-rank sampling generator, whose omission changes every sampled completion).",
        "- **(c) gloo-fsdp-2 vs gloo-ddp-2: 0 (bitwise).** Without gradient clipping FSDP2's "
        "reduce-scatter and DDP's all-reduce produce the same bits on gloo/CPU, and the sampler streams "
        "are per rank in both, so the OPSD samples match too.",
        "- **(d) quality: reference held-out answer loss <= baseline + 0.05.** The objective is the "
        "teacher-forced held-out loss per answer token (exact match is reported alongside). Measured, "
        "the reference is at least as good as the baseline; the margin absorbs the small seed-to-seed "
        "and configuration-to-configuration variation (cpu-1 vs two ranks differ in fp32 rounding, which "
        "changes the sampled completions of the reference).",
        "- **(f) SFT unchanged: 0 (bitwise).** `--mode sft` is the default and must reproduce the baseline.",
        "",
        "## Integration depth (contracts the feature touches)",
        "",
        "- **Model forward**: the teacher view needs position ids aligned with the student view "
        "(extra `position_ids` argument); export keys unchanged.",
        "- **Data / collation**: teacher inputs (solution hint + prompt + the student's sample), completion "
        "masks up to the first EOS, logit index alignment between the two views.",
        "- **Loss normalisation across ranks**: the distillation term is averaged over the GLOBAL count of "
        "completion tokens (all-reduced), scaled for DDP/FSDP gradient averaging.",
        "- **DDP / FSDP2 collectives**: generation runs a fixed number of forwards on every rank (FSDP2 "
        "all-gathers parameters in each forward; an early exit on one rank deadlocks); the teacher pass "
        "runs under no_grad; several forwards share one backward.",
        "- **Randomness**: a per-rank sampling generator seeded from --seed and the rank.",
        "- **Checkpoint/resume**: the sampler state is saved per rank under rank-suffixed DCP keys and "
        "restored; the mode switch at --opsd-start-step must resume correctly across it.",
        "- **Metrics**: per-step sft / teacher_sft / distill losses and global completion-token counts.",
        "",
        "## Commands",
        "",
        f"    {report['command']}",
        "",
        "Each run (paths relative to a scratch folder `$WORK`; baseline = `repo/`, reference = `repo/` + "
        "`git apply hidden/opsd-distill/reference/solution.patch`):",
        "",
    ]
    lines += [f"    [{run['label']}] {run['command']}" for run in report["runs"]]
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=sys.executable, help="interpreter with torch for the runs")
    p.add_argument("--quick", action="store_true", help="quality on cpu-1 only")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = p.parse_args()

    import torch

    work = Path(tempfile.mkdtemp(prefix="qualify-opsd-"))
    t0 = time.perf_counter()
    try:
        baseline, reference = prepare_trees(work)
        r = Runner(args.python, work)
        measurements: dict[str, Any] = {}
        for variant, tree in (("baseline", baseline), ("reference", reference)):
            print(f"{variant}:", flush=True)
            measurements[variant] = measure_tree(r, tree, variant, args.quick)
        sb = r.train(baseline, "baseline-f-sft", "cpu-1", ["--steps", str(EQ_STEPS), "--no-eval"])
        sr = r.train(reference, "reference-f-sft", "cpu-1", ["--steps", str(EQ_STEPS), "--no-eval"])
        measurements["sft_unchanged"] = max_diff(
            load_state(sb.out)["model"], load_state(sr.out)["model"]
        )
        bug = prepare_bug_tree(work, reference)
        bug_args = [
            "--steps",
            str(EQ_STEPS),
            "--no-eval",
            "--mode",
            "opsd",
            "--opsd-start-step",
            str(EQ_START),
            "--dtype",
            "fp64",
            "--opsd-temperature",
            "0",
        ]
        g = r.train(bug, "negative-g-local-mean-ddp-fp64-greedy", "gloo-ddp-2", bug_args)
        measurements["negative_local_mean_vs_one"] = max_diff(
            load_state(work / "reference-a-cpu1-fp64-greedy")["model"], load_state(g.out)["model"]
        )

        report = {
            "task": "opsd-distill",
            "command": "python scripts/qualify/opsd_distill.py"
            + (" --quick" if args.quick else ""),
            "machine": platform.machine() + " " + platform.platform(terse=True),
            "torch": torch.__version__,
            "cpus": os.cpu_count(),
            "equivalence_runs": {
                "steps": EQ_STEPS,
                "opsd_start_step": EQ_START,
                "save_every": EQ_SAVE,
                "global_batch": 32,
                "seed": 0,
            },
            "quality_runs": {
                "steps": 300,
                "opsd_start_step": 150,
                "global_batch": 32,
                "seed": 0,
                "lr": 3e-3,
            },
            "tolerances": TOLERANCES,
            "measurements": measurements,
            "runs": r.runs,
            "max_run_wall_s": max(x["wall_s"] for x in r.runs),
            "all_runs_under_60s": all(x["under_60s"] for x in r.runs),
            "total_wall_s": round(time.perf_counter() - t0, 1),
        }
        report["verdicts"] = verdicts(measurements)
        (PACKET / "qualification.json").write_text(json.dumps(report, indent=2) + "\n")
        write_markdown(report, PACKET / "QUALIFICATION.md")
        print(json.dumps(report["verdicts"], indent=2))
        print(
            f"wrote {PACKET / 'qualification.json'} and QUALIFICATION.md in {report['total_wall_s']} s"
        )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
