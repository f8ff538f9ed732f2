"""The treatment arm's ``traincheck`` tool: TrainCheck on a scratch copy of the workspace.

At session start (treatment arm only, before any container) the task's frozen reference
(``reports/traincheck/<task>/reference/``) is loaded with its hashes checked, and refused
when it was built for another packet repo or other diagnostic arguments: stale invariants
would report the drift as violations. At the first call for a configuration its files are
uploaded into the container at ``/tmp/traincheck-reference/``, never under ``/workspace``,
so nothing lands in the diff; ``put_archive`` cannot write to the ``/tmp`` tmpfs, so they go
as base64 chunks through exec, and their SHA-256 is checked inside the container against the
manifest. The agent shares ``/tmp``: every call re-checks them and uploads again if changed.

The run itself is ``python -I -m diagnostics diagnose`` (diagnostics/checking.py) started
from ``/tmp``: ``-I`` and that working directory keep a ``diagnostics`` folder the agent may
create in ``/workspace`` from shadowing the runner. The runner traces a copy of the tree, so
TrainCheck's ``_traincheck_*.py`` files and traces never touch ``/workspace``. Everything a
call costs (check, upload, run) is one "diagnostics" entry in the ledger, and the tool
result's details carry the split (``diagnostics_s``, ``upload_s``, ``collect_s``, ``check_s``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field

from diagnostics.checking import invariant_id, render_report
from grading.hashing import reference_tree_sha256
from grading.packet import CUDA_CONFIGURATIONS, DiagnosticsSpec, ResumeProbeSpec
from harness.agent.tools import ToolError, ToolResult, ToolRunner
from harness.errors import HarnessError
from harness.records.packets import TaskPacket
from harness.traincheck.reference import (
    ReferenceManifest,
    Violation,
    load_frozen,
    overlap_args,
)
from harness.traincheck.variants import REPORTS_ROOT, TaskFiles

REFERENCE_DIR = "/tmp/traincheck-reference"
RUNS_DIR = "/tmp/traincheck"
# Linux caps one argv element at 128 KiB; one chunk of base64 text stays well below.
CHUNK_CHARS = 96 * 1024
# Kept back from the session's time left: the checker may run up to 30 s past the run's wall
# limit (diagnostics/checking.py), and the session still has to end cleanly.
RESERVE_S = 60.0
MIN_WALL_S = 60.0
# Beyond the run's wall limit: the checker's minimum (30 s), interpreter start, the report.
EXEC_MARGIN_S = 90.0
OUTPUT_TAIL_CHARS = 4000
# TrainCheck colours what it prints; the model reads plain text.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# Positional arguments only ($1...), so no file name or hash is ever parsed by the shell.
_VERIFY = ('cd "$1" && shift && while [ "$#" -gt 0 ]; do printf "%s  %s\\n" "$1" "$2"; '
           'shift 2; done | sha256sum --check --quiet --strict -')
_WRITE = 'mkdir -p "$1" && printf %s "$3" | base64 -d > "$1/$2"'
_APPEND = 'printf %s "$3" | base64 -d >> "$1/$2"'
_UNPACK = 'cd "$1" && gunzip -c "$2" > "$3" && rm -f "$2"'


class FrozenConfigFiles(BaseModel):
    """One configuration's frozen files as they are uploaded, with their hashes."""

    config: str
    invariants_gz: bytes  # the file as frozen (its hash is the manifest's)
    invariants_gz_sha256: str
    invariants_sha256: str  # of the uncompressed JSON lines the runner reads
    control: bytes
    control_sha256: str
    # The resume rules (JSON lines, uploaded as they are), where the reference has them.
    resume_rules: bytes | None = None
    resume_rules_sha256: str | None = None
    # TrainCheck's selective collection (only the calls the invariants name are recorded),
    # where the reference's policy was decided on runs collected that way.
    selective: bool = False
    liveness_overlap: float | None = None  # the checks' threshold, as the manifest says
    # The invariants by id (diagnostics.checking.invariant_id), to explain a violated rule.
    by_id: dict[str, dict[str, Any]] = Field(default_factory=dict, repr=False)

    @property
    def invariants_name(self) -> str:
        return f"{self.config}.invariants.json"

    @property
    def control_name(self) -> str:
        return f"{self.config}.control.json"

    @property
    def resume_name(self) -> str:
        return f"{self.config}.resume.json"

    def plain_files(self) -> list[tuple[str, bytes, str]]:
        """(name, bytes, sha256) of the files uploaded as they are frozen."""
        files = [(self.control_name, self.control, self.control_sha256)]
        if self.resume_rules is not None and self.resume_rules_sha256 is not None:
            files.append((self.resume_name, self.resume_rules, self.resume_rules_sha256))
        return files

    def checked_files(self) -> list[tuple[str, str]]:
        """(sha256, name) of what the runner reads, for ``sha256sum --check``."""
        return [(self.invariants_sha256, self.invariants_name),
                *((sha, name) for name, _, sha in self.plain_files())]


class DiagnosticCost(BaseModel):
    """Seconds one call spent, all counted as "diagnostics" compute."""

    upload_s: float = 0.0  # reference check and (re)upload
    run_s: float = 0.0  # the whole diagnose exec
    collect_s: float = 0.0  # the traced run, as the runner measured it
    check_s: float = 0.0  # traincheck-check, as the runner measured it
    resume_s: float = 0.0  # the resume probe and its check, as the runner measured them

    @property
    def total_s(self) -> float:
        return round(self.upload_s + self.run_s, 3)


class DiagnosticReport(BaseModel):
    """The part of the runner's report the tool shows and records."""

    outcome: str
    cause: str = ""
    new_violations: list[Violation] = Field(default_factory=list)
    control_violations_seen: int = 0
    n_checked: int | None = None
    n_not_triggered: int | None = None
    # The resume probe's part, where the reference has resume rules: its outcome and counts.
    resume: dict[str, Any] | None = None
    output_tail: str = ""
    has_report: bool = False  # the runner wrote report.md (not when it never answered)


class TraincheckTool:
    """Per-session state of the tool: the frozen reference, what was uploaded, the run count."""

    def __init__(self, task: str, spec: DiagnosticsSpec, frozen: dict[str, FrozenConfigFiles]):
        self.task = task
        self.spec = spec
        self.frozen = frozen
        self.runs = 0

    @classmethod
    def for_task(cls, task: str, packet: TaskPacket, hidden: Path,
                 reports_root: Path = REPORTS_ROOT) -> TraincheckTool:
        """Load and check the task's frozen reference on the host; any problem is one line.

        ``reports_root``: the folder holding ``<task>/reference/`` (a study may name its own).
        """
        spec = packet.spec.diagnostics
        if spec is None:
            raise HarnessError(f"task {task} declares no diagnostics runs, so the treatment "
                               "arm's traincheck tool has nothing to run",
                               "add a `diagnostics:` section to its packet.yaml")
        files = TaskFiles(task=task, packet=packet, hidden=hidden, reports_root=reports_root)
        manifest_path = files.reports / "reference" / "manifest.json"
        if not manifest_path.exists():
            raise HarnessError(f"no frozen TrainCheck reference for {task} at {manifest_path}",
                               f"build it with `harness traincheck reference --task {task}`")
        manifest = ReferenceManifest.model_validate_json(manifest_path.read_text())
        cpu_configs = [c for c in packet.spec.configurations if c not in CUDA_CONFIGURATIONS]
        offered = [c for c in cpu_configs if c in manifest.configs]
        if not offered:
            raise HarnessError(f"the frozen TrainCheck reference of {task} covers none of its "
                               f"CPU configurations {cpu_configs}",
                               f"build it with `harness traincheck reference --task {task}`")
        frozen: dict[str, FrozenConfigFiles] = {}
        for config in offered:
            _, loaded = load_frozen(files, config)  # checks the files against the manifest
            entry = manifest.configs[config]
            frozen[config] = FrozenConfigFiles(
                config=config, invariants_gz=loaded.invariants_gz,
                invariants_gz_sha256=entry.invariants_sha256,
                invariants_sha256=hashlib.sha256(loaded.invariants).hexdigest(),
                control=loaded.control, control_sha256=entry.control_sha256,
                resume_rules=loaded.resume_rules,
                resume_rules_sha256=entry.resume.rules_sha256 if entry.resume else None,
                selective=entry.collection == "selective",
                liveness_overlap=entry.liveness_overlap,
                by_id={invariant_id(inv): inv for inv in
                       map(json.loads, loaded.invariants.decode().splitlines())})
        stale = []
        if manifest.packet_repo_sha256 != reference_tree_sha256(packet.repo):
            stale.append("the packet's repo/")
        if (manifest.train_args != spec.train_args(feature=False)
                or manifest.feature_args != spec.feature_args):
            stale.append("the packet's diagnostics arguments")
        if any(entry.resume is not None and entry.resume.spec != spec.resume
               for entry in manifest.configs.values()):
            stale.append("the packet's diagnostics.resume")
        if stale:
            raise HarnessError(f"the frozen TrainCheck reference of {task} was built for other "
                               f"inputs: {' and '.join(stale)} changed since",
                               f"rebuild it with `harness traincheck reference --task {task}`")
        return cls(task, spec, frozen)

    # --- the call -------------------------------------------------------------------------

    def __call__(
        self, runner: ToolRunner, /,
        configuration: Annotated[str, "a CPU configuration of the task with a TrainCheck "
                                      "reference, e.g. gloo-ddp-2"],
    ) -> ToolResult:
        """Trace a short training run of the current workspace under TrainCheck, in a scratch
        copy (your files are not touched), check it against invariants learned from healthy
        baseline runs, and report the violations beyond those a healthy control run shows,
        with where each first fired. Its compute counts against your time budget."""
        if not isinstance(configuration, str) or configuration not in self.frozen:
            offered = ", ".join(sorted(self.frozen))
            raise ToolError(f"no TrainCheck reference for configuration {configuration!r}; "
                            f"use one of: {offered}")
        frozen = self.frozen[configuration]
        wall_s = min(self.spec.wall_s, runner.ledger.time_left() - RESERVE_S)
        if wall_s < MIN_WALL_S:
            raise ToolError(f"only {runner.ledger.time_left():.0f} s of session time left; "
                            f"a TrainCheck run needs at least {MIN_WALL_S + RESERVE_S:.0f} s")
        cost = DiagnosticCost()
        try:
            started = time.monotonic()
            uploaded = self._ensure_reference(runner, frozen)
            cost.upload_s = round(time.monotonic() - started, 3)
            return self._diagnose(runner, frozen, wall_s, cost, uploaded)
        finally:
            # One ledger entry per call (the ledger counts each as one diagnostic run).
            runner.ledger.add_compute("diagnostics", cost.total_s)

    def _sh(self, runner: ToolRunner, script: str, *args: str) -> tuple[bool, str]:
        result = runner.sandbox.exec(["bash", "-c", script, "traincheck-tool", *args],
                                     timeout_s=runner.ledger.bounded_timeout(60), workdir="/tmp")
        return (not result.timed_out and result.exit_code == 0), result.output.strip()

    def _ensure_reference(self, runner: ToolRunner, frozen: FrozenConfigFiles) -> bool:
        """Make the container's copy match the manifest; True when it had to be uploaded."""
        checks = [word for pair in frozen.checked_files() for word in pair]
        if self._sh(runner, _VERIFY, REFERENCE_DIR, *checks)[0]:
            return False
        gz_name = frozen.invariants_name + ".gz"
        uploads = [(gz_name, frozen.invariants_gz),
                   *((name, data) for name, data, _ in frozen.plain_files())]
        for name, data in uploads:
            text = base64.b64encode(data).decode()
            for i in range(0, max(len(text), 1), CHUNK_CHARS):
                ok, out = self._sh(runner, _WRITE if i == 0 else _APPEND, REFERENCE_DIR, name,
                                   text[i:i + CHUNK_CHARS])
                if not ok:
                    raise ToolError(f"could not upload the TrainCheck reference to "
                                    f"{REFERENCE_DIR}: {out[-300:]}")
        # Checked against the manifest as frozen, then the unpacked file the runner reads.
        ok, out = self._sh(runner, _VERIFY, REFERENCE_DIR, frozen.invariants_gz_sha256, gz_name,
                           *(word for name, _, sha in frozen.plain_files()
                             for word in (sha, name)))
        if ok:
            ok, out = self._sh(runner, _UNPACK, REFERENCE_DIR, gz_name, frozen.invariants_name)
        if ok:
            ok, out = self._sh(runner, _VERIFY, REFERENCE_DIR, *checks)
        if not ok:
            raise ToolError(f"the TrainCheck reference uploaded to {REFERENCE_DIR} does not "
                            f"match its manifest hashes: {out[-300:]}")
        return True

    def _diagnose(self, runner: ToolRunner, frozen: FrozenConfigFiles, wall_s: float,
                  cost: DiagnosticCost, uploaded: bool) -> ToolResult:
        self.runs += 1
        out_dir = f"{RUNS_DIR}/run-{self.runs}"
        report_path = f"{out_dir}/report.md"
        command = ["python", "-I", "-m", "diagnostics", *diagnose_args(
            "/workspace", out_dir, frozen.config, REFERENCE_DIR, wall_s,
            self.spec.resume if frozen.resume_rules is not None else None, frozen.selective,
            frozen.liveness_overlap, self.spec.train_args(feature=True))]
        artifact = runner.artifact_path(f"traincheck-{frozen.config}")
        timeout = runner.ledger.bounded_timeout(wall_s + EXEC_MARGIN_S)
        # Not cut by the session's artifact allowance (the report is read from this output),
        # but counted in it.
        result = runner.sandbox.exec(command, timeout_s=timeout, artifact=artifact,
                                     workdir="/tmp")
        runner.artifact_bytes += result.artifact_bytes
        cost.run_s = result.duration_s
        raw: dict[str, Any] = {}
        if result.timed_out:
            report = DiagnosticReport(
                outcome="diagnostic_timeout",
                cause=f"the whole diagnostic did not finish within {timeout:.0f} s (bounded "
                "by the session's time left) and was killed by the harness")
        else:
            raw = _last_json_line(artifact)
            report = _parse_report(raw, result.exit_code)
        cost.collect_s = float((raw.get("run") or {}).get("wall_s") or 0.0)
        cost.check_s = float((raw.get("check") or {}).get("wall_s") or 0.0)
        cost.resume_s = float((raw.get("resume") or {}).get("wall_s") or 0.0)
        if "run" in raw and "outcome" in raw:
            # The full report on the host too, beside the runner's JSON in the artifact.
            runner.artifact_path(f"traincheck-{frozen.config}-report").with_suffix(".md") \
                .write_text(render_report(raw))
        plain = {v.id: plain_rule(frozen.by_id.get(v.id), v.rule) for v in report.new_violations}
        text = render_for_model(frozen.config, report, report_path, cost, plain,
                                traced=_traced_run_line(frozen.config, self.spec,
                                                       frozen.selective))
        details = {
            "configuration": frozen.config, "outcome": report.outcome, "cause": report.cause,
            "new_violations": [{**v.model_dump(), "plain_rule": plain[v.id]}
                               for v in report.new_violations],
            "control_violations_seen": report.control_violations_seen,
            "n_checked": report.n_checked, "n_not_triggered": report.n_not_triggered,
            "report": report_path, "diagnostics_s": cost.total_s, "upload_s": cost.upload_s,
            "run_s": cost.run_s, "collect_s": cost.collect_s, "check_s": cost.check_s,
            "resume_s": cost.resume_s, "resume": report.resume,
            "reference_resume_sha256": frozen.resume_rules_sha256,
            "wall_limit_s": round(wall_s, 1), "reference_uploaded": uploaded,
            "reference_invariants_sha256": frozen.invariants_gz_sha256,
            "reference_control_sha256": frozen.control_sha256,
            "train_args": self.spec.train_args(feature=True),
            "call_id": result.call_id, "kill_note": result.kill_note,
        }
        return ToolResult(
            ok=report.outcome in ("violations", "no_new_violations"), output=text,
            exit_code=result.exit_code, timed_out=result.timed_out, duration_s=cost.total_s,
            output_bytes=result.output_bytes, output_truncated=False, artifact=str(artifact),
            kill=result.kill, details=details)


def diagnose_args(src: str, out: str, config: str, reference: str, wall_s: float,
                  resume: ResumeProbeSpec | None, selective: bool, overlap: float | None,
                  train_args: list[str]) -> list[str]:
    """The runner's ``diagnose`` arguments for one answer (after ``-m diagnostics``): the
    tool's, and the bench's that times it."""
    args = ["diagnose", "--src", src, "--out", out, "--config", config, "--reference",
            reference, "--wall-s", f"{wall_s:.0f}"]
    if resume is not None:
        args += ["--resume-spec", resume.model_dump_json()]
    if selective:
        args.append("--selective")
    return [*args, *overlap_args(overlap), "--", *train_args]


def _last_json_line(artifact: Path) -> dict[str, Any]:
    """The runner's result: the last stdout line (read from the whole output on the host)."""
    lines = [line for line in artifact.read_text(errors="replace").splitlines() if line.strip()]
    try:
        value = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        tail = "\n".join(lines[-5:])[-500:]
        return {"error": f"the runner printed no result line; its output ends: {tail!r}"}
    return value


def _parse_report(raw: dict[str, Any], exit_code: int | None) -> DiagnosticReport:
    if "error" in raw or "outcome" not in raw:
        return DiagnosticReport(outcome="runner_error",
                                cause=str(raw.get("error") or f"exit code {exit_code}"))
    check = raw.get("check") or {}
    return DiagnosticReport(
        outcome=raw["outcome"], cause=raw.get("cause") or "",
        new_violations=[Violation.model_validate(v) for v in raw.get("new_violations", [])],
        control_violations_seen=raw.get("control_violations_seen", 0),
        n_checked=check.get("n_checked"), n_not_triggered=check.get("n_not_triggered"),
        resume=({k: raw["resume"].get(k) for k in ("outcome", "cause", "wall_s", "save_every",
                                                   "n_checked", "n_not_triggered")}
                if isinstance(raw.get("resume"), dict) else None),
        output_tail=(raw.get("run") or {}).get("output_tail", ""), has_report=True)


def plain_rule(invariant: dict[str, Any] | None, rule: str) -> str:
    """The rule in plain words where TrainCheck's own text misleads.

    TrainCheck words every Consistency invariant "X stays consistent across training steps",
    but one whose precondition pairs the same variable name on different ranks compares the
    ranks' copies with each other (TrainCheck pairs them by overlapping time, not by step).
    """
    if not invariant or invariant.get("relation") != "ConsistencyRelation":
        return rule
    pre = (invariant.get("precondition") or {}).get("var") or {}
    clauses = {(c.get("prop_name"), c.get("type"))
               for group in pre.get("preconditions") or []
               if isinstance(group, dict) and isinstance(group.get("clauses"), list)
               for c in group["clauses"] if isinstance(c, dict)}
    params = invariant.get("params") or [{}]
    if (("var_name", "consistent") in clauses and ("meta_vars.rank", "unequal") in clauses
            and params[0].get("var_type") and params[0].get("attr_name")):
        kind = str(params[0]["var_type"]).rsplit(".", 1)[-1]
        return (f"every rank must hold the same {kind}.{params[0]['attr_name']} for each "
                f"{kind.lower()} (the ranks' copies are compared with each other)")
    return rule


def _ranks(ranks: list[int]) -> str:
    if not ranks:
        return "rank unknown"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


# What each outcome without a verdict means, in plain words: never "0 violations".
_NO_VERDICT = {
    "diagnostic_crash": "the traced run of your code CRASHED",
    "diagnostic_hang": "the traced run of your code HUNG and was killed",
    "diagnostic_missing_rank_trace": "the traced run left no trace for every rank",
    "checker_crash": "the traced run finished, but TrainCheck's checker CRASHED",
    "checker_hang": "the traced run finished, but TrainCheck's checker HUNG and was killed",
    "diagnostic_timeout": "the diagnostic (traced run and check) ran out of time and was killed",
    "resume_probe_crash": "the traced run showed no new violation, but the resume probe's run "
                          "of your code CRASHED",
    "resume_probe_hang": "the traced run showed no new violation, but the resume probe's run of "
                         "your code HUNG and was killed",
    "resume_probe_missing_rank_trace": "the traced run showed no new violation, but the resume "
                                       "probe's run left no trace for every rank",
    "resume_probe_no_checkpoint": "the traced run showed no new violation, but the resume "
                                  "probe's run of your code left no checkpoint at the step it "
                                  "was asked to save",
    "runner_error": "the diagnostic runner could not start the run",
}


def _traced_run_line(config: str, spec: DiagnosticsSpec, selective: bool = False) -> str:
    """What the traced run was, so the answer says how it differs from the task's own runs."""
    args = " ".join(spec.train_args(feature=True))
    recorded = (" It records only the torch calls the frozen invariants name, with every "
                "parameter after each step." if selective else "")
    if spec.resume is None:
        return (f"Traced run: `train.py --config {config} {args}`: {spec.steps} optimizer "
                "step(s), shorter than the task's full runs, so what shows only later in "
                "training (or in checkpoint, resume and export paths this run does not take) "
                f"is not seen.{recorded}")
    return (f"Traced run: `train.py --config {config} {args}`: {spec.steps} optimizer step(s), "
            "shorter than the task's full runs, so what shows only later in training (or in "
            f"export paths this run does not take) is not seen.{recorded} Resume probe: the "
            f"same run with a checkpoint at step {spec.resume.save_every}, and a run resumed "
            "from it, compared with it step by step (rules ResumePreservation: a value the "
            "healthy code's resume preserves).")


def render_for_model(config: str, report: DiagnosticReport, report_path: str,
                     cost: DiagnosticCost, plain: dict[str, str] | None = None, *,
                     traced: str) -> str:
    """What the model reads: the outcome, each new violation, what was traced, the report's
    path, the cost."""
    plain = plain or {}
    run_dir = report_path.rsplit("/", 1)[0]
    lines: list[str] = []
    if report.outcome == "violations":
        n = len(report.new_violations)
        lines.append(f"TrainCheck on {config}: {n} violation(s) of the invariants learned from "
                     "healthy runs of the unmodified code.")
        for v in report.new_violations:
            where = f"step {v.first_step}" if v.first_step is not None else "an unknown step"
            words = plain.get(v.id, v.rule)
            said = f"{words}; TrainCheck's rule: \"{v.rule}\"" if words != v.rule else v.rule
            lines.append(f"- [{v.relation}] {said} (first fired at {where}, "
                         f"{_ranks(v.ranks)})")
    elif report.outcome == "no_new_violations":
        lines.append(f"TrainCheck on {config}: no violation of the invariants learned from "
                     "healthy runs of the unmodified code.")
    else:
        what = _NO_VERDICT.get(report.outcome, f"outcome {report.outcome}")
        unchecked = ("its resume rules were not checked" if report.outcome.startswith(
            "resume_probe_") else "nothing was checked")
        lines.append(f"TrainCheck on {config}: {what}, so {unchecked}: there is no verdict, "
                     "and this is not a clean result.")
        lines.append(f"Cause: {report.cause or 'unknown'}")
        if report.output_tail and report.outcome.startswith("diagnostic_"):
            tail = _ANSI.sub("", report.output_tail)[-OUTPUT_TAIL_CHARS:].strip("\n")
            lines += ["Program output (tail):", tail,
                      f"Whole program output (inside the container): {run_dir}/run/output.log"]
    if report.outcome in ("violations", "no_new_violations"):
        extra = []
        if report.control_violations_seen:
            extra.append(f"{report.control_violations_seen} more that the healthy control run "
                         "shows too are not listed")
        if report.n_checked is not None and report.n_not_triggered is not None:
            extra.append(f"{report.n_checked} invariants checked, {report.n_not_triggered} of "
                         "them not triggered by this run")
        resumed = report.resume or {}
        if resumed.get("outcome") == "ok" and isinstance(resumed.get("n_checked"), int) \
                and isinstance(resumed.get("n_not_triggered"), int):
            extra.append(f"{resumed['n_checked']} resume rules checked, "
                         f"{resumed['n_not_triggered']} of them not triggered")
        elif resumed:
            extra.append(f"the resume probe did not finish ({str(resumed.get('outcome'))[:40]}: "
                         f"{str(resumed.get('cause'))[:300]}), so its rules were not checked")
        if extra:
            lines.append("(" + "; ".join(extra) + ".)")
    if report.outcome in ("violations", "no_new_violations"):
        lines.append(traced)
    if report.has_report:
        lines.append(f"Full report (inside the container, not in your workspace): {report_path}")
    parts = [f"reference upload/check {cost.upload_s:.1f} s"]
    if cost.collect_s:
        parts.append(f"traced run {cost.collect_s:.1f} s")
    if cost.check_s:
        parts.append(f"check {cost.check_s:.1f} s")
    if cost.resume_s:
        parts.append(f"resume probe {cost.resume_s:.1f} s, beside the check")
    lines.append(f"Cost: {cost.total_s:.1f} s of diagnostic compute ({', '.join(parts)}), "
                 "counted against your time budget.")
    return "\n".join(lines)
