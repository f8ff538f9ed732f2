"""Cost of one TrainCheck diagnostic answer vs the plain run, side by side.

In one treatment container, on the task's healthy baseline and the packet's diagnostic run
arguments, each repetition runs every arm in turn (interleaved, so the shared machine's noise
lands on every side), and the ratio of medians is printed per configuration:

- ``plain``: ``train.py`` run by the contained runner without tracing;
- ``full``: the traced run recording every torch call, plus ``traincheck-check`` against the
  frozen reference invariants, plus (where the reference has resume rules) the resume probe
  recording every call and its check: what the agent's tool does where the configuration's
  collection is full;
- ``selective``: the same with TrainCheck's selective collection (the traced run given the
  frozen invariants, so only the functions they name dump records; the probe records no
  call): what the tool does where the configuration's collection is selective;
- ``wrapped``: a traced run given an empty selection, not checked: every torch function
  wrapped, nothing recorded but the sampled parameters, the floor of TrainCheck's collection;
- ``answer``: the agent's tool call itself (``python -m diagnostics diagnose``, collection and
  liveness overlap as the frozen manifest says, the resume probe beside the check), timed
  whole: what an answer costs now. ``full`` and ``selective`` sum their parts run one after
  the other, as the tool did before the probe ran beside the check.

The floor of an answer that relates a resume to its straight run is printed too: the
selective probe's two launches alone (they record no torch call; each pays TrainCheck's
start-up). Its straight run is a wrapped run that also saves the checkpoint and observes
state, so it could stand for the traced run too; the figure leaves out the check altogether.

Usage: .venv/bin/python scripts/bench/bench_traincheck.py --task moe-router
       [--config cpu-1 --config gloo-ddp-2] [--reps 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from grading.packet import DiagnosticsSpec
from harness.agent.traincheck_tool import diagnose_args
from harness.infra import images
from harness.traincheck.box import RUNS, DiagnosticsBox
from harness.traincheck.reference import (
    CPU_CONFIGURATIONS,
    SELECTIVE_LIVENESS_OVERLAP,
    FrozenConfig,
    load_frozen,
    overlap_args,
    resume_check,
    resume_probe,
    traced_run,
)
from harness.traincheck.variants import build_variants, task_files

ARMS = ("plain", "full", "selective", "wrapped", "answer")
SELECTION = {"selective": "/workspace/ref.json", "wrapped": "/workspace/none.json"}
PARTS = ("traced run", "check", "resume probe")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="moe-router")
    parser.add_argument("--config", action="append")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    files = task_files(args.task)
    spec = files.packet.spec.diagnostics
    assert spec is not None
    client = images.docker_client()
    with tempfile.TemporaryDirectory() as tmp:
        baseline = build_variants(files, Path(tmp), faults=False)[0]
        for config in args.config or list(CPU_CONFIGURATIONS):
            manifest, frozen = load_frozen(files, config)
            probing = frozen.resume_rules is not None and spec.resume is not None
            seconds: dict[str, dict[str, list[float]]] = {
                arm: {part: [] for part in PARTS} for arm in ARMS}
            violations: dict[str, list[int]] = {arm: [] for arm in ARMS}
            probe_runs: dict[str, list[float]] = {"straight": [], "resumed": []}
            with DiagnosticsBox(client, f"bench-{args.task}-{config}") as box:
                tree = box.put_tree("baseline", baseline.tree)
                box.sandbox.put_file("/workspace", "ref.json", frozen.invariants)
                box.sandbox.put_file("/workspace", "none.json", b"")
                if frozen.resume_rules is not None:
                    box.sandbox.put_file("/workspace", "resume.json", frozen.resume_rules)
                reference = "/workspace/reference"
                for name, data in ((f"{config}.invariants.json", frozen.invariants),
                                   (f"{config}.control.json", frozen.control),
                                   (f"{config}.resume.json", frozen.resume_rules)):
                    if data is not None:
                        box.sandbox.put_file("/workspace", f"reference/{name}", data)
                for rep in range(args.reps):
                    for arm in ARMS:
                        if arm == "answer":
                            answered = answer(box, tree, f"{RUNS}/answer-{rep}", config,
                                              manifest.configs[config], spec, reference,
                                              probing)
                            assert answered["outcome"] in ("violations", "no_new_violations"), (
                                answered["outcome"], answered.get("cause"))
                            seconds[arm]["traced run"].append(answered["wall_s"])
                            violations[arm].append(len(answered.get("new_violations") or []))
                            continue
                        run = traced_run(box, tree, f"{RUNS}/{arm}-{rep}", config,
                                         spec.train_args(feature=False), spec.wall_s,
                                         traced=arm != "plain", selective=SELECTION.get(arm))
                        assert run["outcome"] == "ok", (arm, run["outcome"], run["cause"])
                        seconds[arm]["traced run"].append(run["wall_s"])
                        if arm not in ("full", "selective"):
                            continue
                        # Each arm checked as the tool checks that collection.
                        overlap = overlap_args(SELECTIVE_LIVENESS_OVERLAP
                                               if arm == "selective" else None)
                        checked = box.call(["check", "--trace", run["trace_dir"],
                                            "--invariants", "/workspace/ref.json",
                                            "--out", f"{RUNS}/chk-{arm}-{rep}", *overlap],
                                           timeout_s=1200)
                        seconds[arm]["check"].append(checked["wall_s"])
                        found = len(checked.get("violations") or [])
                        if probing:
                            assert spec.resume is not None
                            probe_dir = f"{RUNS}/probe-{arm}-{rep}"
                            probed = resume_probe(box, tree, probe_dir, config,
                                                  spec.train_args(feature=False), spec.resume,
                                                  spec.wall_s, selective=arm == "selective")
                            assert probed["outcome"] == "ok", (arm, probed["cause"])
                            seconds[arm]["resume probe"].append(probed["wall_s"])
                            if arm == "selective":
                                for part in probe_runs:
                                    probe_runs[part].append(probed[part]["wall_s"])
                            found += len(resume_check(box, probe_dir,
                                                      "/workspace/resume.json")["violations"])
                        violations[arm].append(found)
            plain = statistics.median(seconds["plain"]["traced run"])
            print(f"{args.task} {config}: plain {plain:.1f} s  (medians of {args.reps} "
                  "interleaved reps)")
            for arm in ("full", "selective"):
                parts = {p: statistics.median(v) for p, v in seconds[arm].items() if v}
                total = sum(parts.values())
                print(f"  {arm:9s} " + " + ".join(f"{p} {s:.1f} s" for p, s in parts.items())
                      + f" = {total:.1f} s, ratio {total / plain:.1f}x; violations of the "
                      f"healthy baseline per rep {violations[arm]}")
            wrapped = statistics.median(seconds["wrapped"]["traced run"])
            print(f"  wrapped   traced run recording no call {wrapped:.1f} s, "
                  f"{wrapped / plain:.1f}x (the floor of collection)")
            if probing:
                launches = {part: statistics.median(v) for part, v in probe_runs.items()}
                floor = sum(launches.values())
                print(f"  floor with the resume relation: the probe's straight run "
                      f"{launches['straight']:.1f} s + resumed run {launches['resumed']:.1f} s "
                      f"(recording no call, no check) = {floor:.1f} s, {floor / plain:.1f}x")
            whole = statistics.median(seconds["answer"]["traced run"])
            print(f"  answer    the tool's diagnose call, timed whole {whole:.1f} s, "
                  f"{whole / plain:.1f}x; violations of the healthy baseline per rep "
                  f"{violations['answer']}")


def answer(box: DiagnosticsBox, tree: str, out: str, config: str, entry: FrozenConfig,
           spec: DiagnosticsSpec, reference: str, probing: bool) -> dict[str, Any]:
    """The agent's tool call: ``diagnose`` with the arguments the tool builds."""
    return box.call(diagnose_args(tree, out, config, reference, spec.wall_s,
                                  spec.resume if probing else None,
                                  entry.collection == "selective", entry.liveness_overlap,
                                  spec.train_args(feature=False)),
                    timeout_s=spec.wall_s + 300)


if __name__ == "__main__":
    main()
