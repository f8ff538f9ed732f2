"""The frozen reference invariants of a task: learned once per study build, never in a session.

Per CPU configuration, in a fresh treatment container:

1. ``learn``: a traced healthy run of the baseline (the packet's repo, validated by the
   grader: every contract the baseline must pass, it passes) at the packet's seed ->
   ``traincheck-infer`` with the declared relation set;
2. ``policy``: traced healthy baseline runs at other seeds, and traced runs of the reference
   solution (the task's intended modification), each checked against (1). An invariant that
   any of them violates is dropped before the freeze: what a healthy baseline at another seed
   violates depends on the seed, on one rank's history or on timing (TrainCheck's noise on
   healthy code), and what the reference violates is not expected to survive the intended
   modification. So the frozen set holds, by construction, no rule a healthy run of these
   seeds breaks; calibration measures it on further seeds it was not decided on.

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
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import docker
from pydantic import BaseModel, Field

from diagnostics.checking import invariant_id  # the id the container computes too
from grading.hashing import file_sha256, reference_tree_sha256
from grading.packet import DiagnosticsSpec, ResumeProbeSpec
from harness.errors import HarnessError
from harness.infra import images
from harness.paths import REPO_ROOT
from harness.traincheck.box import RUNS, DiagnosticsBox
from harness.traincheck.variants import TaskFiles, build_variants

CPU_CONFIGURATIONS = ("cpu-1", "gloo-ddp-2", "gloo-fsdp-2")
# Cross-rank consistency, API containment and call order: the relations that can speak about
# distributed training and whose inference cost fits a study build (measured: ~32 s for a
# 4-step DDP trace; ConsistentOutput/InputOutput/Threshold/FunctionCover are left out for
# cost, and because they restate FunctionLead/APIContain on these traces).
# DistinctArgumentRelation is left out because it is noise on these tasks: its rules ("X
# receives distinct arguments at each step") compare object identities and tensor metadata,
# so the same healthy code satisfies them on some runs and not others. It gave every false
# alarm of moe-router's calibrations (gloo-fsdp-2: `WeakIdKeyDictionary.get()`,
# `functional.split()`; 3 of 12 healthy runs on 2026-12-06, after four policy runs had not
# caught them) and hybrid-arch's cpu-1 false alarms in November, and no detection rested on it
# alone in either task's latest calibration.
RELATIONS = ["ConsistencyRelation", "APIContainRelation", "FunctionLeadRelation"]
INFER_WALL_S = 1800.0
CHECK_WALL_S = 900.0
# The applicability policy's runs, as offsets from the packet's seed (the learning run's).
# With the learning run, the healthy baseline runs at three seeds; calibration's held-out
# seeds (offsets 1 and 2) are none of these, so it measures the policy on seeds it was not
# decided on.
HEALTHY_POLICY_OFFSETS = (10, 20)
REFERENCE_POLICY_OFFSETS = (0, 10)
# The selective policy's rounds (``build_selective``): measured, it settles in two or three.
MAX_SELECTIVE_ROUNDS = 6
# The liveness-overlap threshold of a configuration's checks once it collects selectively
# (TrainCheck's default is 1%): a selectively collected step takes about 100 ms, and the
# ranks' parameter dumps are 4-5 ms apart after a barrier, so at 1% a rank's step-k values
# are paired with the other rank's step k+1 and healthy DDP runs break the cross-rank
# Parameter.data/.grad consistency rules (measured on moe-router gloo-ddp-2; a full
# collection's steps take seconds). Same-step values overlap by about 90% and adjacent
# steps' by under 5%, so a quarter separates them with room on both sides.
SELECTIVE_LIVENESS_OVERLAP = 0.25
PolicyRole = Literal["healthy", "reference"]


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


class PolicyRun(BaseModel):
    """One traced run the applicability policy decided on, and what it violated."""

    role: PolicyRole
    run: RunSummary
    violated_ids: list[str]
    check_s: float
    # The selective policy's round (``build_selective``); 0 for the full collection's runs.
    round: int = 0


class ProbeSummary(BaseModel):
    """One resume probe (a straight traced run and its resume), as the runner reported it."""

    variant: str
    config: str
    seed: int
    outcome: str
    cause: str = ""
    wall_s: float


class ResumePolicyProbe(BaseModel):
    role: PolicyRole
    probe: ProbeSummary
    violated_ids: list[str]


class FrozenResume(BaseModel):
    """The resume rules of one configuration (``diagnostics/resume.py``), frozen like the
    invariants: learned from a healthy baseline probe at the packet's seed, minus every rule a
    policy probe violated."""

    rules_file: str
    rules_sha256: str
    spec: ResumeProbeSpec  # the packet's diagnostics.resume the probes ran with
    n_learned: int
    n_dropped: int
    n_kept: int
    learn_probe: ProbeSummary
    policy_probes: list[ResumePolicyProbe]
    # The same policy again with probes that record no torch call, as the agent's tool
    # probes where the configuration's collection is selective.
    selective_policy_probes: list[ResumePolicyProbe] = Field(default_factory=list)


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
    # What the healthy runs violated (all of it dropped from the frozen set since the
    # multi-seed policy; before it, a same-seed control run's violations, kept but discounted).
    control_violations: list[Violation]
    learn_run: RunSummary
    infer_s: float
    policy_runs: list[PolicyRun] = Field(default_factory=list)
    # A reference frozen under the one-control-run policy (see ``policy``) has these instead.
    control_run: RunSummary | None = None
    applicability_run: RunSummary | None = None
    check_s: list[float] = Field(default_factory=list)
    # The resume rules, where the packet declares how its runs checkpoint and resume.
    resume: FrozenResume | None = None
    # How a diagnostic run of this configuration collects: "full" records every torch call;
    # "selective" records only the calls the frozen invariants name (TrainCheck's selective
    # collection), and the policy was applied again to runs collected that way
    # (``selective_policy_runs``): what TrainCheck records changes what it sees, so the
    # rules are decided in the collection the agent's tool makes.
    collection: Literal["full", "selective"] = "full"
    selective_policy_runs: list[PolicyRun] = Field(default_factory=list)
    # TrainCheck's liveness-overlap threshold every check of this configuration uses (its
    # own 1% when None); set with the selective collection (``SELECTIVE_LIVENESS_OVERLAP``).
    liveness_overlap: float | None = None

    def runs(self) -> list[RunSummary]:
        """Every traced run the build made for this configuration."""
        legacy = [r for r in (self.control_run, self.applicability_run) if r is not None]
        return [self.learn_run, *legacy,
                *(p.run for p in (*self.policy_runs, *self.selective_policy_runs))]

    def check_seconds(self) -> float:
        return sum(self.check_s) + sum(p.check_s for p in
                                       (*self.policy_runs, *self.selective_policy_runs))


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
    # The runner the resume rules were built with (added later, with ``resume_only``, it may
    # differ from the one the invariants were built with).
    resume_diagnostics_sha256: str | None = None
    # A build that only added resume rules: the manifest it extends (its invariants are
    # byte for byte that manifest's, so a calibration of that manifest still holds for them).
    extends_sha256: str | None = None
    # The runner the selective policy runs were made with, where a later build added them.
    selective_diagnostics_sha256: str | None = None


POLICY = (
    "Invariants are learned from one traced healthy baseline run per configuration at the "
    f"packet's seed with the relations {', '.join(RELATIONS)}. The applicability policy then "
    "checks them against traced healthy baseline runs at the seeds offset by "
    f"{', '.join(f'+{o}' for o in HEALTHY_POLICY_OFFSETS)} (with the learning run: three "
    "healthy runs at three seeds) and traced runs of the reference solution (the intended "
    f"modification) at the seeds offset by {', '.join(f'+{o}' for o in REFERENCE_POLICY_OFFSETS)}. "
    "An invariant any of these runs violates is dropped before the freeze: a healthy run's "
    "violation is seed-dependent, rank-local or timing noise, and a reference run's is not "
    "expected to survive the intended modification. Everything else is kept, including "
    "invariants the reference runs never trigger. Where the packet declares how its runs "
    "checkpoint and resume, the same policy applies to the resume rules (a value preserved "
    "between a straight run and its resume from a mid checkpoint), learned from a healthy "
    "baseline probe at the packet's seed and checked against probes at the same seeds. "
    "Then the policy runs again with the kept rules in the collection the agent's tool makes "
    "(TrainCheck's selective collection: only the calls the kept invariants name are "
    "recorded, and the resume probes record none), and what those runs violate is dropped "
    "too, in rounds until a round's runs, collected for exactly the rules then kept, violate "
    "none; those runs and every later check of the configuration pair ranks' values at a "
    f"liveness overlap above {SELECTIVE_LIVENESS_OVERLAP:g} (TrainCheck's default: 0.01)."
)


def run_summary(variant: str, seed: int, record: dict[str, Any]) -> RunSummary:
    return RunSummary(variant=variant, config=record["config"], seed=seed,
                      traced=record["traced"], outcome=record["outcome"],
                      cause=record.get("cause", ""), wall_s=record["wall_s"],
                      ranks=record.get("ranks") or {})


def traced_run(box: DiagnosticsBox, tree: str, out: str, config: str, args: list[str],
               wall_s: float, *, traced: bool = True,
               selective: str | None = None) -> dict[str, Any]:
    """One contained run; ``selective`` (an invariants file in the box) narrows what the
    traced run records to what those invariants name."""
    cmd = ["run", "--src", tree, "--out", out, "--config", config, "--wall-s", str(wall_s)]
    if traced:
        cmd.append("--traced")
    if selective is not None:
        cmd += ["--invariants", selective]
    return box.call([*cmd, "--", *args], timeout_s=wall_s + 120)


def overlap_args(overlap: float | None) -> list[str]:
    """The runner's check arguments for a liveness-overlap threshold (none for the default)."""
    return [] if overlap is None else ["--liveness-overlap", repr(overlap)]


def checked(box: DiagnosticsBox, trace_dir: str, invariants: str, out: str,
            overlap: float | None = None) -> dict[str, Any]:
    result = box.call(["check", "--trace", trace_dir, "--invariants", invariants, "--out", out,
                       "--wall-s", str(CHECK_WALL_S), *overlap_args(overlap)],
                      timeout_s=CHECK_WALL_S + 60)
    if result["outcome"] != "ok":
        raise HarnessError(f"traincheck-check {result['outcome']} on {trace_dir}: "
                           f"{result.get('cause', '')}", "see the check log in the container")
    return result


def _require_ok(record: dict[str, Any], what: str) -> None:
    if record["outcome"] != "ok":
        raise HarnessError(f"{what} did not complete: {record['outcome']} ({record['cause']})",
                           "a healthy run must pass before invariants can be learned from it")


class PolicyDecision(BaseModel):
    """The frozen set of one configuration and why each dropped invariant went."""

    kept: list[dict[str, Any]]
    # invariant id -> its violation record and the runs that violated it
    dropped: dict[str, dict[str, Any]]


HEALTHY_REASON = "violated by a healthy baseline run: seed-dependent, rank-local or timing noise"
REFERENCE_REASON = ("violated by the reference solution: not expected to survive the intended "
                    "modification")


def _run_label(role: PolicyRole, seed: int) -> str:
    return f"{'healthy baseline' if role == 'healthy' else 'reference solution'} at seed {seed}"


def apply_policy(learned: list[dict[str, Any]],
                 checks: list[tuple[PolicyRole, int, list[dict[str, Any]]]]) -> PolicyDecision:
    """Drop every learned invariant that a policy run violated; ``checks`` holds each run's
    (role, seed, violations as the container's checker reports them)."""
    dropped: dict[str, dict[str, Any]] = {}
    for role, seed, violations in checks:
        for violation in violations:
            entry = dropped.setdefault(violation["id"], {
                "id": violation["id"], "relation": violation["relation"],
                "rule": violation["rule"], "violated_by": [], "reason": REFERENCE_REASON})
            entry["violated_by"].append(_run_label(role, seed))
            if role == "healthy":  # noise explains a drop before the modification does
                entry["reason"] = HEALTHY_REASON
    ids = [invariant_id(inv) for inv in learned]
    # A violation of an invariant that was never learned would mean the checker read another
    # set: refuse rather than freeze a policy decided on the wrong rules.
    unknown = sorted(set(dropped) - set(ids))
    if unknown:
        raise HarnessError(f"policy runs violated {len(unknown)} invariant(s) not in the "
                           f"learned set (first: {unknown[0]})",
                           "rebuild the reference from a clean start")
    kept = [inv for inv, inv_id in zip(learned, ids, strict=True) if inv_id not in dropped]
    return PolicyDecision(kept=kept, dropped=dropped)


def _parse_rules(text: str) -> list[dict[str, Any]]:
    """A rule file's content: one JSON object per line (invariants or resume rules)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _rules_text(rules: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rules)


def _json_lines(box: DiagnosticsBox, path: str) -> list[dict[str, Any]]:
    """A learned rule file in the container."""
    return _parse_rules(box.read_bytes(path).decode())


def _policy_plan(spec: DiagnosticsSpec) -> list[tuple[PolicyRole, int]]:
    return [*(("healthy", spec.seed + o) for o in HEALTHY_POLICY_OFFSETS),
            *(("reference", spec.seed + o) for o in REFERENCE_POLICY_OFFSETS)]


def _record_dropped(dest: Path, section: str, config: str,
                    dropped: dict[str, dict[str, Any]]) -> None:
    """``policy.json``'s list of what the policy dropped, under ``section`` and ``config``."""
    policy_path = dest / "policy.json"
    policy: dict[str, Any] = (json.loads(policy_path.read_text()) if policy_path.exists()
                              else {})
    policy["policy"] = POLICY
    policy.setdefault(section, {})[config] = [dropped[k] for k in sorted(dropped)]
    policy_path.write_text(json.dumps(policy, indent=1, sort_keys=True) + "\n")


def resume_probe(box: DiagnosticsBox, tree: str, out: str, config: str, args: list[str],
                 spec: ResumeProbeSpec, wall_s: float, *,
                 selective: bool = False) -> dict[str, Any]:
    """A straight traced run and its resume (``python -m diagnostics resume-probe``)."""
    return box.call(["resume-probe", "--src", tree, "--out", out, "--config", config,
                     "--spec", spec.model_dump_json(), "--wall-s", str(wall_s),
                     *(["--selective"] if selective else []), "--", *args],
                    timeout_s=2 * wall_s + 180)


def resume_check(box: DiagnosticsBox, probe_dir: str, rules: str) -> dict[str, Any]:
    return box.call(["resume-check", "--probe", probe_dir, "--rules", rules], timeout_s=600)


def probe_summary(variant: str, seed: int, record: dict[str, Any]) -> ProbeSummary:
    return ProbeSummary(variant=variant, config=record["config"], seed=seed,
                        outcome=record["outcome"], cause=record.get("cause", ""),
                        wall_s=record["wall_s"])


Checks = list[tuple[PolicyRole, int, list[dict[str, Any]]]]


def _resume_policy(box: DiagnosticsBox, spec: DiagnosticsSpec, trees: dict[PolicyRole, str],
                   config: str, rules: str, *, selective: bool,
                   log: Callable[[str], None]) -> tuple[Checks, list[ResumePolicyProbe]]:
    """The policy's probes (healthy baseline and reference at the policy seeds) checked
    against the resume rules in ``rules``."""
    assert spec.resume is not None
    probes: list[ResumePolicyProbe] = []
    checks: Checks = []
    for role, seed in _policy_plan(spec):
        name = f"{config}-resume-{'sel-' if selective else ''}{role}-s{seed}"
        record = resume_probe(box, trees[role], f"{RUNS}/{name}", config,
                              spec.train_args(feature=role == "reference", seed=seed),
                              spec.resume, spec.wall_s, selective=selective)
        _require_ok(record, f"{config} resume probe of the {_run_label(role, seed)}")
        result = resume_check(box, f"{RUNS}/{name}", rules)
        box.clean(f"{RUNS}/{name}")
        checks.append((role, seed, result["violations"]))
        probes.append(ResumePolicyProbe(
            role=role, probe=probe_summary("baseline" if role == "healthy" else "reference",
                                           seed, record),
            violated_ids=sorted({v["id"] for v in result["violations"]})))
        log(f"{config}: {'selective ' if selective else ''}resume probe of the "
            f"{_run_label(role, seed)} violates {len(result['violations'])}")
    return checks, probes


def _invariant_policy(box: DiagnosticsBox, spec: DiagnosticsSpec, trees: dict[PolicyRole, str],
                      config: str, invariants: str, *, selective: bool,
                      log: Callable[[str], None], round_: int = 0,
                      overlap: float | None = None) -> tuple[Checks, list[PolicyRun]]:
    """The policy's traced runs checked against the invariants in ``invariants``; with
    ``selective``, each run collects only what those invariants name."""
    policy_runs: list[PolicyRun] = []
    checks: Checks = []
    for role, seed in _policy_plan(spec):
        name = f"{config}-{f'sel{round_}-' if selective else ''}{role}-s{seed}"
        record = traced_run(box, trees[role], f"{RUNS}/{name}", config,
                            spec.train_args(feature=role == "reference", seed=seed),
                            spec.wall_s, selective=invariants if selective else None)
        _require_ok(record, f"{config} {_run_label(role, seed)}")
        result = checked(box, record["trace_dir"], invariants, f"{RUNS}/{name}-chk", overlap)
        box.clean(f"{RUNS}/{name}")  # the run and its check
        checks.append((role, seed, result["violations"]))
        policy_runs.append(PolicyRun(
            role=role, run=run_summary("baseline" if role == "healthy" else "reference", seed,
                                       record),
            violated_ids=sorted({v["id"] for v in result["violations"]}),
            check_s=result["wall_s"], round=round_))
        log(f"{config}: {f'selective round {round_}, ' if selective else ''}"
            f"{_run_label(role, seed)} violates {len(result['violations'])}")
    return checks, policy_runs


def _write_rules(path: Path, rules: list[dict[str, Any]]) -> None:
    path.write_text(_rules_text(rules))


def build_resume(box: DiagnosticsBox, spec: DiagnosticsSpec, trees: dict[PolicyRole, str],
                 config: str, dest: Path, log: Callable[[str], None]) -> FrozenResume:
    """Learn the resume rules from a healthy baseline probe and apply the same policy as to
    the invariants: a rule any policy probe violates is dropped."""
    assert spec.resume is not None
    learn = resume_probe(box, trees["healthy"], f"{RUNS}/{config}-resume-learn", config,
                         spec.train_args(feature=False), spec.resume, spec.wall_s)
    _require_ok(learn, f"{config} resume learning probe")
    learned_path = f"{RUNS}/{config}.resume-learned.json"
    made = box.call(["resume-learn", "--probe", f"{RUNS}/{config}-resume-learn", "--out",
                     learned_path], timeout_s=600)
    box.clean(f"{RUNS}/{config}-resume-learn")
    if not made["n_rules"]:
        raise HarnessError(f"{config}: the healthy resume probe gave no resume rule",
                           "see the probe's traces; the state observation recorded nothing")
    log(f"{config}: {made['n_rules']} resume rules from a probe of {learn['wall_s']:.0f} s")
    checks, probes = _resume_policy(box, spec, trees, config, learned_path, selective=False,
                                    log=log)
    learned = _json_lines(box, learned_path)
    decision = apply_policy(learned, checks)
    rules_path = dest / f"{config}.resume.json"
    _write_rules(rules_path, decision.kept)
    _record_dropped(dest, "resume_dropped", config, decision.dropped)
    log(f"{config}: kept {len(decision.kept)} of {len(learned)} resume rules")
    return FrozenResume(
        rules_file=rules_path.name, rules_sha256=file_sha256(rules_path),
        spec=spec.resume, n_learned=len(learned),
        n_dropped=len(decision.dropped), n_kept=len(decision.kept),
        learn_probe=probe_summary("baseline", spec.seed, learn), policy_probes=probes)


def _freeze_invariants(dest: Path, config: str, kept: list[dict[str, Any]],
                       ) -> tuple[Path, dict[str, int]]:
    """The frozen invariants file and the kept count per relation."""
    by_relation: dict[str, int] = {}
    for inv in kept:
        by_relation[inv["relation"]] = by_relation.get(inv["relation"], 0) + 1
    inv_path = dest / f"{config}.invariants.json.gz"
    # mtime=0: the same invariants give the same bytes, so the hash pins the content.
    inv_path.write_bytes(gzip.compress(
        ("\n".join(json.dumps(inv, sort_keys=True) for inv in kept) + "\n").encode(), mtime=0))
    return inv_path, dict(sorted(by_relation.items()))


def _freeze_control(dest: Path, config: str, violations: list[Violation]) -> Path:
    """What the healthy runs violated: none of it is in the frozen set, so a diagnostic that
    discounts it (the agent's tool does) discounts nothing it could report."""
    control_path = dest / f"{config}.control.json"
    control_path.write_text(json.dumps(
        {"config": config, "violated_ids": [v.id for v in violations],
         "violations": [v.model_dump() for v in violations]}, indent=1) + "\n")
    return control_path


def _healthy_violations(checks: Checks, earlier: list[Violation]) -> list[Violation]:
    found = {v.id: v for v in earlier}
    found.update({v["id"]: Violation.model_validate(v)
                  for role, _, violations in checks if role == "healthy" for v in violations})
    return [found[k] for k in sorted(found)]


def build_config(box: DiagnosticsBox, files: TaskFiles, trees: dict[PolicyRole, str],
                 config: str, dest: Path, log: Callable[[str], None]) -> FrozenConfig:
    spec = files.packet.spec.diagnostics
    assert spec is not None
    base_args = spec.train_args(feature=False)
    learn = traced_run(box, trees["healthy"], f"{RUNS}/{config}-learn", config, base_args,
                       spec.wall_s)
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
    box.clean(f"{RUNS}/{config}-learn")
    checks, policy_runs = _invariant_policy(box, spec, trees, config, invariants,
                                            selective=False, log=log)
    learned = _json_lines(box, invariants)
    decision = apply_policy(learned, checks)
    inv_path, by_relation = _freeze_invariants(dest, config, decision.kept)
    control_violations = _healthy_violations(checks, [])
    control_path = _freeze_control(dest, config, control_violations)
    _record_dropped(dest, "dropped", config, decision.dropped)
    log(f"{config}: kept {len(decision.kept)} of {len(learned)}, "
        f"dropped {len(decision.dropped)}")
    resume = (build_resume(box, spec, trees, config, dest, log)
              if spec.resume is not None else None)
    entry = FrozenConfig(
        config=config, invariants_file=inv_path.name, invariants_sha256=file_sha256(inv_path),
        control_file=control_path.name, control_sha256=file_sha256(control_path),
        n_learned=len(learned), n_dropped=len(decision.dropped), n_kept=len(decision.kept),
        kept_by_relation=by_relation, control_violations=control_violations,
        learn_run=run_summary("baseline", spec.seed, learn),
        infer_s=inferred["wall_s"], policy_runs=policy_runs, resume=resume,
    )
    return build_selective(box, spec, trees, entry, dest, log)


def build_selective(box: DiagnosticsBox, spec: DiagnosticsSpec, trees: dict[PolicyRole, str],
                    entry: FrozenConfig, dest: Path,
                    log: Callable[[str], None]) -> FrozenConfig:
    """The policy again, in the collection the agent's tool will make: each policy run
    collects selectively for the kept invariants (the resume probes record no torch call),
    and what it violates is dropped too, in rounds until a round drops nothing. The frozen
    files are read from and written to ``dest``; the entry returned says the configuration
    collects selectively.

    Why again: what TrainCheck records changes what it sees. Measured on moe-router cpu-1,
    a healthy baseline collected selectively violates three frozen APIContain rules
    (``Optimizer.add_param_group() always calls CustomOpDef.register_fake()``) that every
    fully collected healthy run satisfies. Why rounds: the selection is the kept set, so a
    drop changes what the next run records. After the first round dropped twelve rules on
    moe-router cpu-1, the call sequences of healthy runs were unchanged, yet every healthy
    run collected for the smaller set violated six FunctionLead rules ("X always precedes
    compiler.is_compiling()") that the runs collected for the larger set satisfied. The last
    round's runs are collected exactly as the agent's tool collects, and violate nothing."""
    config = entry.config
    kept = _parse_rules(gzip.decompress((dest / entry.invariants_file).read_bytes()).decode())
    control_violations = entry.control_violations
    policy_runs: list[PolicyRun] = []
    dropped: dict[str, dict[str, Any]] = {}
    for round_ in range(1, MAX_SELECTIVE_ROUNDS + 1):
        selection = f"{RUNS}/{config}.kept-{round_}.json"
        box.sandbox.put_file(RUNS, f"{config}.kept-{round_}.json", _rules_text(kept).encode())
        checks, runs = _invariant_policy(box, spec, trees, config, selection, selective=True,
                                         log=log, round_=round_,
                                         overlap=SELECTIVE_LIVENESS_OVERLAP)
        policy_runs += runs
        control_violations = _healthy_violations(checks, control_violations)
        decision = apply_policy(kept, checks)
        dropped.update({k: {**v, "round": round_} for k, v in decision.dropped.items()})
        log(f"{config}: selective round {round_} kept {len(decision.kept)} of {len(kept)}")
        kept = decision.kept
        if not decision.dropped:
            break
    else:
        raise HarnessError(f"{config}: the selective policy still dropped rules after "
                           f"{MAX_SELECTIVE_ROUNDS} rounds", "see the log; the selection does "
                           "not settle, so this configuration cannot collect selectively")
    inv_path, by_relation = _freeze_invariants(dest, config, kept)
    control_path = _freeze_control(dest, config, control_violations)
    _record_dropped(dest, "selective_dropped", config, dropped)
    resume = (selective_resume(box, spec, trees, config, entry.resume, dest, log)
              if entry.resume is not None else None)
    return entry.model_copy(update={
        "invariants_sha256": file_sha256(inv_path), "control_sha256": file_sha256(control_path),
        "n_dropped": entry.n_dropped + len(dropped), "n_kept": len(kept),
        "kept_by_relation": by_relation, "control_violations": control_violations,
        "collection": "selective", "selective_policy_runs": policy_runs, "resume": resume,
        "liveness_overlap": SELECTIVE_LIVENESS_OVERLAP})


def selective_resume(box: DiagnosticsBox, spec: DiagnosticsSpec, trees: dict[PolicyRole, str],
                     config: str, resume: FrozenResume, dest: Path,
                     log: Callable[[str], None]) -> FrozenResume:
    """The resume rules' policy again with probes that record no torch call, as the agent's
    tool probes a configuration that collects selectively."""
    rules_path = dest / resume.rules_file
    rules = _parse_rules(rules_path.read_text())
    box.sandbox.put_file(RUNS, f"{config}.resume-kept.json", rules_path.read_bytes())
    checks, probes = _resume_policy(box, spec, trees, config,
                                    f"{RUNS}/{config}.resume-kept.json", selective=True,
                                    log=log)
    decision = apply_policy(rules, checks)
    _write_rules(rules_path, decision.kept)
    _record_dropped(dest, "selective_resume_dropped", config, decision.dropped)
    log(f"{config}: selective resume probes kept {len(decision.kept)} of {len(rules)} "
        "resume rules")
    return resume.model_copy(update={
        "rules_sha256": file_sha256(rules_path),
        "n_dropped": resume.n_dropped + len(decision.dropped),
        "n_kept": len(decision.kept), "selective_policy_probes": probes})


def traincheck_version(box: DiagnosticsBox) -> str:
    result = box.sandbox.exec(["python", "-c", "import importlib.metadata as m;"
                               "print(m.version('traincheck'))"], timeout_s=60)
    return result.output.strip().splitlines()[-1]


def build_reference(files: TaskFiles, configs: list[str], *,
                    client: docker.DockerClient | None = None, resume_only: bool = False,
                    selective_only: bool = False,
                    log: Callable[[str], None] = print) -> ReferenceManifest:
    """Build and freeze the reference of ``configs``. With ``resume_only``, add the resume
    rules to configurations already frozen and keep their invariants as they are; with
    ``selective_only``, apply the policy again to configurations already frozen with runs
    collected selectively (``build_selective``), dropping what those runs violate."""
    spec = files.packet.spec.diagnostics
    assert spec is not None
    if resume_only and selective_only:
        raise HarnessError("--resume-only and --selective-only are two separate builds",
                           "run one, then the other")
    client = client or images.docker_client()
    dest = files.reports / "reference"
    dest.mkdir(parents=True, exist_ok=True)
    manifest_path = dest / "manifest.json"
    previous = (ReferenceManifest.model_validate_json(manifest_path.read_text())
                if manifest_path.exists() else None)
    frozen: dict[str, FrozenConfig] = dict(previous.configs) if previous else {}
    partial = resume_only or selective_only
    if resume_only and spec.resume is None:
        raise HarnessError(f"the packet of {files.task} declares no diagnostics.resume",
                           "declare how its runs checkpoint and resume in packet.yaml")
    if partial:
        missing = [c for c in configs if c not in frozen]
        if previous is None or missing:
            raise HarnessError(f"no frozen invariants of {files.task} for "
                               f"{', '.join(missing or configs)} to add to",
                               f"build the whole reference: `harness traincheck reference "
                               f"--task {files.task}`")
        if previous.packet_repo_sha256 != reference_tree_sha256(files.packet.repo):
            raise HarnessError(f"the frozen reference of {files.task} was built from another "
                               "packet repo", "rebuild the whole reference")
        again = [c for c in configs if selective_only and frozen[c].collection == "selective"]
        if again:
            raise HarnessError(f"{', '.join(again)} of {files.task} already collect "
                               "selectively", "rebuild the whole reference to decide again")
        for config in configs:
            load_frozen(files, config)  # the files a partial build starts from, hash-checked
    # What a partial build keeps of the manifest it extends (checked to exist above).
    kept = previous if partial else None
    version = kept.traincheck_version if kept else ""
    # Only a resume-only build leaves the invariants byte for byte as they were.
    extended = file_sha256(manifest_path) if resume_only else None
    with tempfile.TemporaryDirectory(prefix="harness-tc-ref-") as tmp:
        variants = {v.name: v for v in build_variants(files, Path(tmp), faults=False)}
        # The new files are made apart and replace the frozen ones only once every
        # configuration is built: a build that fails or is killed while it runs (the runs
        # take most of an hour) leaves the frozen reference as it was.
        staging = Path(tmp) / "frozen-files"
        staging.mkdir()
        if partial:  # the files a partial build changes in place
            for config in configs:
                entry = frozen[config]
                names = [entry.invariants_file, entry.control_file,
                         *([entry.resume.rules_file] if entry.resume else [])]
                for name in names:
                    shutil.copy(dest / name, staging / name)
        if (dest / "policy.json").is_file():
            shutil.copy(dest / "policy.json", staging / "policy.json")
        for config in configs:
            with DiagnosticsBox(client, f"{files.task}-{config}-ref") as box:
                version = version or traincheck_version(box)
                trees: dict[PolicyRole, str] = {
                    "healthy": box.put_tree("baseline", variants["baseline"].tree),
                    "reference": box.put_tree("reference", variants["reference"].tree)}
                if resume_only:
                    resume = build_resume(box, spec, trees, config, staging, log)
                    if frozen[config].collection == "selective":
                        resume = selective_resume(box, spec, trees, config, resume, staging,
                                                  log)
                    frozen[config] = frozen[config].model_copy(update={"resume": resume})
                elif selective_only:
                    frozen[config] = build_selective(box, spec, trees, frozen[config],
                                                     staging, log)
                else:
                    frozen[config] = build_config(box, files, trees, config, staging, log)
        for made in sorted(staging.iterdir()):
            shutil.copy(made, dest / made.name)
    runner = reference_tree_sha256(REPO_ROOT / "diagnostics")
    manifest = ReferenceManifest(
        task=files.task, built_at=datetime.now(UTC).isoformat(timespec="seconds"),
        traincheck_version=version,
        relations=kept.relations if kept else RELATIONS,
        steps=spec.steps, seed=spec.seed,
        train_args=spec.train_args(feature=False), feature_args=spec.feature_args,
        packet_repo_sha256=reference_tree_sha256(files.packet.repo),
        diagnostics_sha256=kept.diagnostics_sha256 if kept else runner, policy=POLICY,
        configs=dict(sorted(frozen.items())),
        resume_diagnostics_sha256=(
            (runner if resume_only or not kept else kept.resume_diagnostics_sha256)
            if any(c.resume for c in frozen.values()) else None),
        extends_sha256=extended,
        selective_diagnostics_sha256=(runner if selective_only or not kept
                                      else kept.selective_diagnostics_sha256))
    manifest_path.write_text(manifest.model_dump_json(indent=1) + "\n")
    return manifest


class FrozenFiles(BaseModel):
    """The files the treatment tool uploads for one configuration, hash-checked."""

    invariants: bytes  # uncompressed JSON lines, what the runner reads
    invariants_gz: bytes  # the frozen file itself (its hash is the manifest's)
    control: bytes
    resume_rules: bytes | None = None  # JSON lines, where the configuration has resume rules


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
    frozen_files = [(entry.invariants_file, entry.invariants_sha256),
                    (entry.control_file, entry.control_sha256)]
    if entry.resume is not None:
        frozen_files.append((entry.resume.rules_file, entry.resume.rules_sha256))
    for name, sha in frozen_files:
        read[name] = (dest / name).read_bytes()  # hashed as read: no second read to race
        if hashlib.sha256(read[name]).hexdigest() != sha:
            raise HarnessError(f"{dest / name} does not match its hash in the manifest",
                               "rebuild the reference; frozen files must not be edited")
    gz = read[entry.invariants_file]
    return manifest, FrozenFiles(
        invariants=gzip.decompress(gz), invariants_gz=gz, control=read[entry.control_file],
        resume_rules=read[entry.resume.rules_file] if entry.resume is not None else None)
