"""``harness replay ATTEMPT --reexecute``: run the recorded tool calls again, not the model.

A fresh container from the image the session recorded (by its ID, not a tag) gets the
attempt's recorded baseline; every tool call of the verified transcript is run in order
through the same :class:`~harness.agent.tools.ToolRunner`, each result is compared with the
recorded one (ok, exit code, timed out, and the output's SHA-256 after the normalisation
below), and the final tree's diff is compared with the recorded ``submission.diff`` by
digest. Every difference is listed; none is hidden or explained away.

The normalisation is declared, not guessed: :data:`NORMALISATIONS` names each rule, and the
report carries the list. It covers what differs between two runs of the same deterministic
command: durations, dates and clock times, glog-style stamps, process ids, memory addresses,
random temp names and the attempt's own artifact folder. A training run whose numbers
differ stays a divergence.

Nothing is written into the attempt folder (its manifest covers it): the re-execution goes
to a new ``reexecute-of-attempt<N>-<K>/`` folder beside it, with its own artifacts, final
tree, diff, ``reexecute.json`` and a manifest. A broken transcript is refused: only verified
calls can be replayed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
from pydantic import BaseModel, Field

from harness.agent.tools import ExtraTool, ToolResult, ToolRunner
from harness.audit import replay as rp
from harness.errors import HarnessError
from harness.infra import images
from harness.infra.sandbox import WORKSPACE, Sandbox, SandboxLimits, SandboxLost
from harness.infra.workspace import compute_diff, extract_tree, workspace_archive
from harness.records.attempt import (
    MANIFEST_NAME,
    AttemptPaths,
    SessionRecord,
    manifest_files,
    new_numbered_dir,
    read_record,
    write_manifest,
)
from harness.records.budget import Budget, Ledger
from harness.records.events import call_result_pairs
from harness.records.packets import load_packet
from harness.records.transcript import read_text
from harness.text import one_line

MAX_TREE_BYTES = 512 * 1024**2  # harness.study.session's caps, not imported (that pulls providers)
MAX_DIFF_BYTES = 32 * 1024**2
# Each call gets at least this much time, whatever was left of the session's budget then.
MIN_WALL_S = 4 * 3600.0

NORMALISATIONS: list[tuple[str, str, str]] = [
    ("artifact paths", r"[^\s'\"]*/artifacts/([0-9]{4}-[A-Za-z0-9_.-]+\.log)",
     r"<artifacts>/\1"),
    ("ISO dates and times",
     r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?", "<time>"),
    ("glog stamps", r"\b[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+", "<glog>"),
    ("clock times", r"\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b", "<time>"),
    ("timing fields in JSON (wall_s, duration_s, *_time, elapsed ...)",
     r"\"([A-Za-z_]*(?:_s|_ms|_sec|_secs|_seconds|time|elapsed|duration))\"\s*:\s*"
     r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", r'"\1": <duration>'),
    ("durations", r"\b\d+(?:\.\d+)?\s?(?:s|ms|us|µs|ns|sec|secs|seconds|min)\b", "<duration>"),
    ("rates", r"\b\d+(?:\.\d+)?\s?(?:it/s|s/it|samples/s|tokens/s|tok/s)", "<rate>"),
    ("process ids", r"\b(pid|PID|process|Process)([ =:#]+)\d+", r"\1\2<pid>"),
    ("memory addresses", r"\b0x[0-9a-fA-F]{6,}\b", "<addr>"),
    ("random temp names", r"/tmp/(?:tmp|pymp-|torchelastic_)[A-Za-z0-9_]{4,}", "/tmp/<temp>"),
    ("hex ids (uuid, 32 hex)", r"\b[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?"
                               r"[0-9a-f]{12}\b", "<id>"),
]
_COMPILED = [(name, re.compile(pattern), repl) for name, pattern, repl in NORMALISATIONS]


def normalise(text: str) -> str:
    """``text`` with every declared rule applied, in order."""
    for _name, pattern, repl in _COMPILED:
        text = pattern.sub(repl, text)
    return text


def output_digest(text: str) -> str:
    return hashlib.sha256(normalise(text).encode("utf-8", "surrogatepass")).hexdigest()


class CallComparison(BaseModel):
    seq: int | None
    line: int
    tool: str
    args: str  # in short
    recorded: dict[str, Any]
    again: dict[str, Any]
    divergences: list[str] = Field(default_factory=list)


class ReexecuteReport(BaseModel):
    attempt: str
    folder: str
    image_id: str
    packet_dir: str
    packet_yaml_sha256: str | None
    normalisations: list[tuple[str, str, str]] = Field(
        default_factory=lambda: list(NORMALISATIONS))
    calls: list[CallComparison] = Field(default_factory=list)
    recorded_diff_sha256: str | None = None
    diff_sha256: str | None = None
    divergences: list[str] = Field(default_factory=list)  # every one, calls' included
    notes: list[str] = Field(default_factory=list)

    @property
    def reproduced(self) -> bool:
        return not self.divergences


def _facts(result: ToolResult | dict[str, Any], output: str) -> dict[str, Any]:
    get = result.get if isinstance(result, dict) else lambda k, d=None: getattr(result, k, d)
    return {"ok": get("ok"), "exit_code": get("exit_code"), "timed_out": get("timed_out"),
            "output_sha256": output_digest(output), "output_head": one_line(output, 120)}


def _baseline_problem(attempt: Path) -> str | None:
    """Why the recorded baseline no longer matches the manifest, or None."""
    listed = {rel: digest for rel, digest in rp.manifest_digests(attempt).items()
              if rel.startswith("baseline/")}
    if not listed:
        return f"{MANIFEST_NAME} lists no baseline/ files"
    now = {rel: digest for rel, digest in manifest_files(attempt).items()
           if rel.startswith("baseline/")}
    for rel, digest in listed.items():
        if now.get(rel) != digest:
            return f"{rel} {'changed' if rel in now else 'is missing'} since the manifest"
    extra = sorted(set(now) - set(listed))
    return f"{extra[0]} is not in the manifest" if extra else None


def _extras(start: dict[str, Any], record: SessionRecord,
            packet: Any) -> dict[str, ExtraTool]:
    listed = start.get("tools")
    tools = listed if isinstance(listed, list) else []
    extras: dict[str, ExtraTool] = {}
    if "traincheck" in tools:
        from harness.agent.traincheck_tool import TraincheckTool

        extras["traincheck"] = TraincheckTool.for_task(record.task, packet,
                                                       Path(record.hidden_dir))
    return extras


def reexecute(attempt: Path, *, loaded: rp.Replay | None = None,
              client: docker.DockerClient | None = None,
              log: Callable[[str], None] = print) -> ReexecuteReport:
    """Run the attempt's recorded tool calls again in a fresh container and compare.

    ``loaded``: the attempt already read by :func:`harness.audit.replay.load` (verified there).
    """
    loaded = loaded or rp.load(attempt)
    attempt = loaded.attempt_dir
    if not loaded.verification.ok:
        raise HarnessError(f"the transcript of {attempt} is broken: "
                           f"{loaded.verification.error}",
                           "only a verified transcript can be re-executed; `harness replay` "
                           "shows where it breaks")
    record = read_record(attempt)
    problem = _baseline_problem(attempt)
    if problem is not None:
        raise HarnessError(f"the recorded baseline of {attempt} cannot be trusted: {problem}",
                           "restore the attempt folder as the session left it")
    packet = load_packet(Path(record.packet_dir))
    client = client or images.docker_client()
    try:
        client.images.get(record.image_id)
    except docker.errors.ImageNotFound:
        raise HarnessError(f"the recorded image {record.image_id} is not on this host",
                           "load or rebuild that exact image; a tag is not enough") from None
    events = [e for e in loaded.events if e.status == "verified"]
    start = next((e.data for e in events if e.kind == "session_start"), {})
    sandbox_start = next((e.data for e in events if e.kind == "sandbox_start"), {})
    limits = SandboxLimits.model_validate(sandbox_start.get("limits") or {})
    recorded_budget = next((e.data.get("budget") for e in events if e.kind == "budget_start"),
                           None) or {}
    budget = Budget.model_validate({**recorded_budget, "tool_calls": None, "candidate_runs": None,
                                    "gpu_hours": None, "cpu_hours": None,
                                    "wall_seconds": max(MIN_WALL_S, float(
                                        recorded_budget.get("wall_seconds") or 0))})

    folder = new_numbered_dir(attempt.parent, f"reexecute-of-attempt{record.attempt}")
    packet_yaml = rp.file_sha256(packet.spec_path)
    report = ReexecuteReport(attempt=str(attempt), folder=str(folder), image_id=record.image_id,
                             packet_dir=str(packet.root), packet_yaml_sha256=packet_yaml)
    report.notes.append(f"the task's commands come from {packet.spec_path} as it is now "
                        f"(sha256 {str(packet_yaml)[:16]})")
    if record.gpu_ids:
        report.notes.append(f"the session held GPUs {record.gpu_ids}; the re-execution holds "
                            "none, so a CUDA run is refused here and shows as a divergence")
    result_of = results_by_call(events)
    transcript = loaded.transcript
    log(f"re-executing {attempt} in a fresh container of {record.image_id[:19]} -> {folder}")
    sandbox = Sandbox(client, record.image_id, limits=limits,
                      name_hint=f"reexecute-{record.session_id}",
                      labels={"org.harness.study": record.study,
                              "org.harness.session": record.session_id,
                              "org.harness.attempt": str(record.attempt),
                              "org.harness.role": "reexecute"})
    with sandbox:
        sandbox.put_archive(WORKSPACE, workspace_archive(AttemptPaths(root=attempt).baseline))
        ledger = Ledger(budget, cpus=limits.cpus)
        ledger.start()
        runner = ToolRunner(sandbox, packet, ledger, AttemptPaths(root=folder).artifacts,
                            extra_tools=_extras(start, record, packet))
        for event in events:
            if event.kind != "tool_call":
                continue
            name = str(event.data.get("name"))
            args = read_text(transcript, event.data.get("args") or {})
            comparison = CallComparison(seq=event.seq, line=event.line, tool=name,
                                        args=rp.short_args(name, event.data.get("args")),
                                        recorded={}, again={})
            recorded = result_of.get(event.seq)
            try:
                result = runner.run(name, args if isinstance(args, dict) else {})
            except SandboxLost as exc:
                comparison.again = {"error": exc.line()}
                comparison.divergences.append(f"the container was lost: {exc.line()}")
                report.calls.append(comparison)
                break
            comparison.again = _facts(result, result.output)
            if recorded is None:
                comparison.divergences.append("no recorded result to compare with")
            else:
                text = read_text(transcript, recorded.data.get("output", ""))
                comparison.recorded = _facts(recorded.data, text if isinstance(text, str)
                                             else "")
                for key in ("ok", "exit_code", "timed_out", "output_sha256"):
                    if comparison.recorded[key] != comparison.again[key]:
                        comparison.divergences.append(
                            f"{key}: recorded {comparison.recorded[key]!r}, now "
                            f"{comparison.again[key]!r}")
            report.calls.append(comparison)
            report.divergences += [f"line {event.line} ({name} {comparison.args}): {d}"
                                   for d in comparison.divergences]
            log(f"line {event.line} {name}: "
                + ("same" if not comparison.divergences else "; ".join(comparison.divergences)))
            if result.ends_session:
                break
        _final_diff(sandbox, attempt, record, folder, report)
    (folder / "reexecute.json").write_text(report.model_dump_json(indent=1) + "\n")
    write_manifest(folder)
    return report


def results_by_call(events: list[Any]) -> dict[int | None, Any]:
    """Each tool_call's seq -> its tool_result (paired as :func:`events.call_result_pairs`
    pairs them, as the evidence chains do)."""
    by_seq = {e.seq: e for e in events}
    pairs = call_result_pairs((e.seq, e.kind, e.data.get("id")) for e in events)
    return {call: by_seq[result] for call, result in pairs.items()}


def _final_diff(sandbox: Sandbox, attempt: Path, record: SessionRecord, folder: Path,
                report: ReexecuteReport) -> None:
    report.recorded_diff_sha256 = record.diff.sha256 if record.diff else None
    try:
        sandbox.stop_processes()
        final = AttemptPaths(root=folder).final
        extract_tree(sandbox.get_archive(WORKSPACE), final, max_bytes=MAX_TREE_BYTES)
        patch, _result = compute_diff(AttemptPaths(root=attempt).baseline, final,
                                      max_diff_bytes=MAX_DIFF_BYTES)
    except (HarnessError, SandboxLost) as exc:
        report.divergences.append(f"final diff: could not be made again ({exc})")
        return
    (AttemptPaths(root=folder).diff).write_bytes(patch)
    report.diff_sha256 = hashlib.sha256(patch).hexdigest()
    if report.recorded_diff_sha256 is None:
        report.divergences.append("final diff: the session recorded none")
    elif report.diff_sha256 != report.recorded_diff_sha256:
        report.divergences.append(f"final diff: recorded sha256 {report.recorded_diff_sha256}, "
                                  f"now {report.diff_sha256}")


def report_lines(report: ReexecuteReport) -> list[str]:
    """The report as plain lines (the caller prints them inert)."""
    lines = [f"re-executed {len(report.calls)} tool call(s) in {report.folder}"]
    lines += [f"note: {note}" for note in report.notes]
    lines.append("normalised before comparing outputs: "
                 + ", ".join(name for name, _p, _r in report.normalisations))
    for call in report.calls:
        state = "same" if not call.divergences else "DIVERGES: " + "; ".join(call.divergences)
        lines.append(f"  line {call.line} {call.tool} {call.args}: {state}")
    same = report.diff_sha256 == report.recorded_diff_sha256 and report.diff_sha256 is not None
    lines.append(f"final diff sha256: recorded {report.recorded_diff_sha256}, now "
                 f"{report.diff_sha256} ({'same' if same else 'DIFFERENT'})")
    if report.reproduced:
        lines.append("reproduced: every call and the final diff are the same")
    else:
        lines.append(f"{len(report.divergences)} divergence(s):")
        lines += [f"  - {d}" for d in report.divergences]
    return lines
