"""The frozen reference invariants of a task: learned once per study build, never in a session.

Per CPU configuration, in a fresh treatment container:

1. ``learn``: a traced healthy run of the baseline (the packet's repo, validated by the
   grader: every contract the baseline must pass, it passes) -> ``traincheck-infer`` with the
   declared relation set;
2. ``control``: a second traced healthy baseline run, checked against (1). What it violates
   is TrainCheck's noise on healthy code (call-order relations that depend on timing or on
   evaluation steps); every later verdict counts only violations beyond this set;
3. ``applicability``: a traced run of the reference solution (the task's intended
   modification), checked against (1). Invariants it violates beyond the control set are
   expected not to survive the modification and are dropped from the frozen set.

What the frozen set reveals: only baseline behaviour (relations over torch API calls and
parameter/gradient hashes of the public baseline), minus the invariants the reference
solution breaks. The absence of a dropped invariant hints at which baseline behaviour the
intended change touches; the dropped rules are listed in ``policy.json`` (operator side,
never in a container) so that disclosure can be audited. No hidden source text is in the
files (canary test).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
from pydantic import BaseModel, Field

from diagnostics.checking import invariant_id  # the id the container computes too
from grading.hashing import file_sha256, reference_tree_sha256
from harness.errors import HarnessError
from harness.infra import images
from harness.paths import REPO_ROOT
from harness.traincheck.box import RUNS, DiagnosticsBox
from harness.traincheck.variants import TaskFiles, build_variants

CPU_CONFIGURATIONS = ("cpu-1", "gloo-ddp-2", "gloo-fsdp-2")
# Cross-rank consistency, API containment, call order and distinct arguments: the relations
# that can speak about distributed training and whose inference cost fits a study build
# (measured: ~32 s for a 4-step DDP trace; ConsistentOutput/InputOutput/Threshold/FunctionCover
# are left out for cost, and because they restate FunctionLead/APIContain on these traces).
RELATIONS = ["ConsistencyRelation", "APIContainRelation", "FunctionLeadRelation",
             "DistinctArgumentRelation"]
INFER_WALL_S = 1800.0
CHECK_WALL_S = 900.0


class RunSummary(BaseModel):
    """One traced or plain run, as the in-container runner reported it."""

    variant: str
    config: str
    seed: int
    traced: bool
    outcome: str
    cause: str = ""
    wall_s: float
    ranks: dict[str, dict[str, Any]] = Field(default_factory=dict)


class Violation(BaseModel):
    id: str
    relation: str | None
    rule: str
    first_step: int | None
    ranks: list[int]


class FrozenConfig(BaseModel):
    config: str
    invariants_file: str
    invariants_sha256: str
    control_file: str
    control_sha256: str
    n_learned: int
    n_dropped: int
    n_kept: int
    kept_by_relation: dict[str, int]
    control_violations: list[Violation]
    learn_run: RunSummary
    control_run: RunSummary
    applicability_run: RunSummary
    infer_s: float
    check_s: list[float]


class ReferenceManifest(BaseModel):
    task: str
    built_at: str
    traincheck_version: str
    relations: list[str]
    steps: int
    seed: int
    train_args: list[str]
    feature_args: list[str]
    packet_repo_sha256: str
    diagnostics_sha256: str
    policy: str
    configs: dict[str, FrozenConfig]


POLICY = (
    "Invariants are learned from one traced healthy baseline run per configuration with the "
    f"relations {', '.join(RELATIONS)}. A second healthy baseline run is the control: its "
    "violations are TrainCheck noise and never count. An invariant is dropped (not expected "
    "to survive the intended modification) when a traced run of the reference solution "
    "violates it beyond the control set; everything else is kept, including invariants the "
    "reference run never triggers."
)


def run_summary(variant: str, seed: int, record: dict[str, Any]) -> RunSummary:
    return RunSummary(variant=variant, config=record["config"], seed=seed,
                      traced=record["traced"], outcome=record["outcome"],
                      cause=record.get("cause", ""), wall_s=record["wall_s"],
                      ranks=record.get("ranks") or {})


def traced_run(box: DiagnosticsBox, tree: str, out: str, config: str, args: list[str],
               wall_s: float, *, traced: bool = True) -> dict[str, Any]:
    cmd = ["run", "--src", tree, "--out", out, "--config", config, "--wall-s", str(wall_s)]
    if traced:
        cmd.append("--traced")
    return box.call([*cmd, "--", *args], timeout_s=wall_s + 120)


def checked(box: DiagnosticsBox, trace_dir: str, invariants: str, out: str) -> dict[str, Any]:
    result = box.call(["check", "--trace", trace_dir, "--invariants", invariants, "--out", out,
                       "--wall-s", str(CHECK_WALL_S)], timeout_s=CHECK_WALL_S + 60)
    if result["outcome"] != "ok":
        raise HarnessError(f"traincheck-check {result['outcome']} on {trace_dir}: "
                           f"{result.get('cause', '')}", "see the check log in the container")
    return result


def _require_ok(record: dict[str, Any], what: str) -> None:
    if record["outcome"] != "ok":
        raise HarnessError(f"{what} did not complete: {record['outcome']} ({record['cause']})",
                           "a healthy run must pass before invariants can be learned from it")


def build_config(box: DiagnosticsBox, files: TaskFiles, baseline: str, reference: str,
                 config: str, dest: Path, log: Callable[[str], None]) -> FrozenConfig:
    spec = files.packet.spec.diagnostics
    assert spec is not None
    base_args, feat_args = spec.train_args(feature=False), spec.train_args(feature=True)
    learn = traced_run(box, baseline, f"{RUNS}/{config}-learn", config, base_args, spec.wall_s)
    _require_ok(learn, f"{config} learning run")
    log(f"{config}: learning run {learn['wall_s']:.0f} s; inferring")
    invariants = f"{RUNS}/{config}.learned.json"
    inferred = box.call(["infer", "--trace", learn["trace_dir"], "--out", invariants,
                         "--relations", *RELATIONS, "--wall-s", str(INFER_WALL_S)],
                        timeout_s=INFER_WALL_S + 60)
    if inferred["outcome"] != "ok" or not inferred.get("n_invariants"):
        raise HarnessError(f"{config}: inference gave no invariants ({inferred['outcome']}): "
                           f"{inferred.get('log_tail', '')[-300:]}", "see the infer log")
    log(f"{config}: {inferred['n_invariants']} invariants in {inferred['wall_s']:.0f} s")
    control = traced_run(box, baseline, f"{RUNS}/{config}-control", config, base_args,
                         spec.wall_s)
    _require_ok(control, f"{config} control run")
    control_check = checked(box, control["trace_dir"], invariants, f"{RUNS}/{config}-control-chk")
    control_ids = {v["id"] for v in control_check["violations"]}
    applic = traced_run(box, reference, f"{RUNS}/{config}-applicability", config, feat_args,
                        spec.wall_s)
    _require_ok(applic, f"{config} reference run")
    applic_check = checked(box, applic["trace_dir"], invariants, f"{RUNS}/{config}-applic-chk")
    dropped = {v["id"]: v for v in applic_check["violations"] if v["id"] not in control_ids}
    log(f"{config}: control violates {len(control_ids)}, reference drops {len(dropped)}")

    learned = [json.loads(line) for line in box.read_bytes(invariants).decode().splitlines()
               if line.strip()]
    kept_lines: list[str] = []
    by_relation: dict[str, int] = {}
    for inv in learned:
        if invariant_id(inv) in dropped:
            continue
        kept_lines.append(json.dumps(inv, sort_keys=True))
        by_relation[inv["relation"]] = by_relation.get(inv["relation"], 0) + 1
    inv_path = dest / f"{config}.invariants.json.gz"
    # mtime=0: the same invariants give the same bytes, so the hash pins the content.
    inv_path.write_bytes(gzip.compress(("\n".join(kept_lines) + "\n").encode(), mtime=0))
    control_path = dest / f"{config}.control.json"
    control_violations = [Violation.model_validate(v) for v in control_check["violations"]]
    control_path.write_text(json.dumps(
        {"config": config, "violated_ids": sorted(control_ids),
         "violations": [v.model_dump() for v in control_violations]}, indent=1) + "\n")
    policy_path = dest / "policy.json"
    policy: dict[str, Any] = (json.loads(policy_path.read_text()) if policy_path.exists()
                              else {"policy": POLICY, "dropped": {}})
    policy["dropped"][config] = [
        {"id": v["id"], "relation": v["relation"], "rule": v["rule"],
         "reason": "violated by the reference solution's traced run beyond the control set"}
        for v in sorted(dropped.values(), key=lambda v: v["id"])]
    policy_path.write_text(json.dumps(policy, indent=1, sort_keys=True) + "\n")
    return FrozenConfig(
        config=config, invariants_file=inv_path.name, invariants_sha256=file_sha256(inv_path),
        control_file=control_path.name, control_sha256=file_sha256(control_path),
        n_learned=len(learned), n_dropped=len(dropped), n_kept=len(kept_lines),
        kept_by_relation=dict(sorted(by_relation.items())),
        control_violations=control_violations,
        learn_run=run_summary("baseline", spec.seed, learn),
        control_run=run_summary("baseline", spec.seed, control),
        applicability_run=run_summary("reference", spec.seed, applic),
        infer_s=inferred["wall_s"],
        check_s=[control_check["wall_s"], applic_check["wall_s"]],
    )


def traincheck_version(box: DiagnosticsBox) -> str:
    result = box.sandbox.exec(["python", "-c", "import importlib.metadata as m;"
                               "print(m.version('traincheck'))"], timeout_s=60)
    return result.output.strip().splitlines()[-1]


def build_reference(files: TaskFiles, configs: list[str], *,
                    client: docker.DockerClient | None = None,
                    log: Callable[[str], None] = print) -> ReferenceManifest:
    spec = files.packet.spec.diagnostics
    assert spec is not None
    client = client or images.docker_client()
    dest = files.reports / "reference"
    dest.mkdir(parents=True, exist_ok=True)
    manifest_path = dest / "manifest.json"
    previous = (ReferenceManifest.model_validate_json(manifest_path.read_text())
                if manifest_path.exists() else None)
    frozen: dict[str, FrozenConfig] = dict(previous.configs) if previous else {}
    version = ""
    with tempfile.TemporaryDirectory(prefix="harness-tc-ref-") as tmp:
        variants = {v.name: v for v in build_variants(files, Path(tmp), faults=False)}
        for config in configs:
            with DiagnosticsBox(client, f"{files.task}-{config}-ref") as box:
                version = version or traincheck_version(box)
                baseline = box.put_tree("baseline", variants["baseline"].tree)
                reference = box.put_tree("reference", variants["reference"].tree)
                frozen[config] = build_config(box, files, baseline, reference, config, dest, log)
    manifest = ReferenceManifest(
        task=files.task, built_at=datetime.now(UTC).isoformat(timespec="seconds"),
        traincheck_version=version, relations=RELATIONS, steps=spec.steps, seed=spec.seed,
        train_args=spec.train_args(feature=False), feature_args=spec.feature_args,
        packet_repo_sha256=reference_tree_sha256(files.packet.repo),
        diagnostics_sha256=reference_tree_sha256(REPO_ROOT / "diagnostics"), policy=POLICY,
        configs=dict(sorted(frozen.items())))
    manifest_path.write_text(manifest.model_dump_json(indent=1) + "\n")
    return manifest


class FrozenFiles(BaseModel):
    """The files the treatment tool uploads for one configuration, hash-checked."""

    invariants: bytes  # uncompressed JSON lines, what the runner reads
    invariants_gz: bytes  # the frozen file itself (its hash is the manifest's)
    control: bytes


def load_frozen(files: TaskFiles, config: str) -> tuple[ReferenceManifest, FrozenFiles]:
    dest = files.reports / "reference"
    manifest_path = dest / "manifest.json"
    if not manifest_path.exists():
        raise HarnessError(f"no frozen TrainCheck reference for {files.task}",
                           f"build it with `harness traincheck reference --task {files.task}`")
    manifest = ReferenceManifest.model_validate_json(manifest_path.read_text())
    if config not in manifest.configs:
        raise HarnessError(f"the frozen reference of {files.task} has no {config}",
                           f"build it with `harness traincheck reference --task {files.task} "
                           f"--config {config}`")
    entry = manifest.configs[config]
    read = {}
    for name, sha in ((entry.invariants_file, entry.invariants_sha256),
                      (entry.control_file, entry.control_sha256)):
        read[name] = (dest / name).read_bytes()  # hashed as read: no second read to race
        if hashlib.sha256(read[name]).hexdigest() != sha:
            raise HarnessError(f"{dest / name} does not match its hash in the manifest",
                               "rebuild the reference; frozen files must not be edited")
    gz = read[entry.invariants_file]
    return manifest, FrozenFiles(invariants=gzip.decompress(gz), invariants_gz=gz,
                                 control=read[entry.control_file])
