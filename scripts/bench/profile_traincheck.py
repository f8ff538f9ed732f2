"""Where one TrainCheck diagnostic answer spends its time: collect and check, by phase.

In one treatment container (network none, plus ``CAP_SYS_PTRACE`` so py-spy can sample its own
children), on the task's healthy baseline with the packet's diagnostic arguments: a plain run
(timed), then the traced run (``python -m diagnostics run --traced``, what the agent's tool
runs) and the check against the frozen reference invariants, each under ``py-spy record``.
The samples (on-CPU only) are sorted into phases by the frames on their stacks:

- collect: the ``traincheck-collect`` parent process; the traced process's imports, torch's
  instrumentation (``Instrumentor.instrument``), and its training split into the arguments'
  serialisation (every wrapped call's inputs and outputs turned into dicts), the parameter
  sampling after each optimizer step, and the rest (the training itself under the wrappers);
- check: reading the trace files, and each relation's checking.

Usage (the py-spy binary from ``pip download --no-deps py-spy``, unpacked):

    .venv/bin/python scripts/bench/profile_traincheck.py --task moe-router --config cpu-1 \
        --py-spy /path/to/py-spy [--rate 100]

Samples are on-CPU time at ``--rate`` Hz; wall times are printed beside them. On a shared
host the wall times are noisy; the phase shares are what this measures.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.infra import images  # noqa: E402
from harness.traincheck.reference import load_frozen  # noqa: E402
from harness.traincheck.variants import build_variants, task_files  # noqa: E402

SCRIPT = r"""
set -e
cd /prof
P=/opt/venv/bin/python
ms() { date +%s%N | cut -c1-13; }
s=$(ms); $P -m diagnostics run --src /prof/tree --out /tmp/plain --config {config} \
  --wall-s 1200 -- {args} > /prof/plain.json; echo "plain_ms $(( $(ms) - s ))"
s=$(ms); ./py-spy record --subprocesses --rate {rate} --format raw -o /prof/collect.raw -- \
  $P -m diagnostics run --src /prof/tree --out /tmp/traced --config {config} --wall-s 1200 \
  --traced -- {args} > /prof/traced.json 2> /prof/collect.err
echo "collect_ms $(( $(ms) - s ))"
s=$(ms); ./py-spy record --subprocesses --rate {rate} --format raw -o /prof/check.raw -- \
  $P -m diagnostics check --trace /tmp/traced/trace --invariants /prof/invariants.json \
  --out /tmp/check > /prof/check.json 2> /prof/check.err
echo "check_ms $(( $(ms) - s ))"
du -sb /tmp/traced/trace | cut -f1 | sed 's/^/trace_bytes /'
"""

# First match wins: (phase, a pattern searched in the sample's whole stack).
COLLECT_PHASES = [
    ("instrumentation (wrapping torch's functions)", r"Instrumentor\.instrument"),
    ("arguments' serialisation (inputs and outputs of every wrapped call)",
     r"to_dict_args_kwargs|to_dict_return_value|var_to_serializable|obj_to_serializable"),
    ("parameter sampling after each optimizer step", r"VarSampler|dump_sample"),
    ("torch.save under the wrappers", r"\bsave \(torch/serialization"),
    ("training under the wrappers (the rest of train())", r"\btrain \("),
    ("imports and start-up", r"_find_and_load|_call_with_frames_removed"),
]
CHECK_PHASES = [
    ("reading the trace", r"read_trace_file|read_jsonlines|TracePandas\.__init__"),
    ("reading the invariants", r"read_inv_file"),
    ("imports and start-up", r"_find_and_load"),
]


def _samples(raw: Path) -> list[tuple[str, list[str], int]]:
    rows = []
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        # With --subprocesses a child's stack hangs under its parents' "process N:" frames:
        # the sample belongs to the innermost process.
        last = max(i for i, f in enumerate(frames) if f.startswith("process ")) \
            if any(f.startswith("process ") for f in frames) else 0
        rows.append((frames[last], frames[last + 1:], int(count)))
    return rows


def collect_phases(raw: Path) -> collections.Counter[str]:
    phases: collections.Counter[str] = collections.Counter()
    for process, frames, count in _samples(raw):
        stack = ";".join(frames)
        if "traincheck-collect" in process:
            phases["traincheck-collect parent process"] += count
        elif "_traincheck_" in process:
            phase = next((p for p, pat in COLLECT_PHASES if re.search(pat, stack)),
                         "other" if frames else "native code outside any Python frame")
            phases[f"traced process: {phase}"] += count
        else:
            phases["the runner and launcher (diagnostics, torchrun, shell)"] += count
    return phases


def check_phases(raw: Path) -> collections.Counter[str]:
    phases: collections.Counter[str] = collections.Counter()
    for process, frames, count in _samples(raw):
        stack = ";".join(frames)
        if "traincheck-check" not in process:
            phases["the runner (diagnostics)"] += count
            continue
        relation = re.search(r"(\w+Relation)\.(static_check_all|check)", stack)
        phase = next((p for p, pat in CHECK_PHASES if re.search(pat, stack)), None)
        if phase is None:
            phase = (f"checking {relation.group(1)}" if relation else "other" if frames
                     else "native code outside any Python frame")
        phases[f"traincheck-check: {phase}"] += count
    return phases


def _table(title: str, phases: collections.Counter[str], rate: int) -> list[str]:
    total = sum(phases.values()) or 1
    lines = [f"| {title} | CPU s | share |", "|---|---|---|"]
    for phase, count in phases.most_common():
        lines.append(f"| {phase} | {count / rate:.1f} | {100 * count / total:.0f}% |")
    lines.append(f"| **total** | **{total / rate:.1f}** | |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="moe-router")
    parser.add_argument("--config", default="cpu-1")
    parser.add_argument("--py-spy", type=Path, required=True)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--keep", type=Path, help="copy the raw py-spy samples here")
    args = parser.parse_args()
    files = task_files(args.task)
    spec = files.packet.spec.diagnostics
    assert spec is not None
    client = images.docker_client()
    with tempfile.TemporaryDirectory(prefix="harness-tc-prof-") as tmp:
        work = Path(tmp) / "prof"
        work.mkdir()
        baseline = build_variants(files, Path(tmp) / "variants", faults=False)[0]
        shutil.copytree(baseline.tree, work / "tree")
        shutil.copy(args.py_spy, work / "py-spy")
        _, frozen = load_frozen(files, args.config)
        (work / "invariants.json").write_bytes(frozen.invariants)
        train_args = " ".join(spec.train_args(feature=False))
        (work / "prof.sh").write_text(SCRIPT.replace("{config}", args.config)
                                      .replace("{args}", train_args)
                                      .replace("{rate}", str(args.rate)))
        for path in [work, *work.rglob("*")]:
            path.chmod(0o777 if path.is_dir() or path.name in ("py-spy", "prof.sh") else 0o666)
        output = client.containers.run(
            images.image_tag("treatment"), ["bash", "/prof/prof.sh"], remove=True,
            network_mode="none", cap_add=["SYS_PTRACE"], volumes={str(work): {
                "bind": "/prof", "mode": "rw"}}).decode()
        times = dict(line.split() for line in output.splitlines() if line.count(" ") == 1)
        results = {}
        for step in ("plain", "traced", "check"):
            # py-spy prints its own lines on stdout too; the runner's result is the JSON line.
            found = [line for line in (work / f"{step}.json").read_text().splitlines()
                     if line.startswith("{")]
            if not found:
                err = work / f"{'collect' if step == 'traced' else step}.err"
                sys.exit(f"the {step} step printed no result: "
                         f"{err.read_text()[-2000:] if err.exists() else output[-2000:]}")
            results[step] = json.loads(found[-1])
        traced, checked = results["traced"], results["check"]
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for name in ("collect.raw", "check.raw"):
                shutil.copy(work / name, args.keep / f"{args.config}-{name}")
        plain_s = int(times["plain_ms"]) / 1000
        collect_s, check_s = int(times["collect_ms"]) / 1000, int(times["check_ms"]) / 1000
        n_invariants = frozen.invariants.count(b"\n")
        lines = [f"## {args.task} {args.config} (`{' '.join(spec.train_args(feature=False))}`)",
                 "", f"Wall: plain {plain_s:.1f} s; traced run {collect_s:.1f} s "
                 f"({traced['outcome']}, trace {int(times['trace_bytes']) / 1e6:.0f} MB); check "
                 f"{check_s:.1f} s ({checked['outcome']}, {len(checked.get('violations', []))} "
                 f"violations of {n_invariants} frozen invariants); (traced + check) / plain = "
                 f"{(collect_s + check_s) / plain_s:.1f}x (with py-spy sampling).", ""]
        lines += _table("collect phase", collect_phases(work / "collect.raw"), args.rate)
        lines.append("")
        lines += _table("check phase", check_phases(work / "check.raw"), args.rate)
        print("\n".join(lines))


if __name__ == "__main__":
    main()
