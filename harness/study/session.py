"""One session end to end: prepare -> sandbox -> agent -> finalize -> artifacts (-> grade).

Every way out of ``run_session`` (normal end, budget, exception, Ctrl-C, SIGTERM) removes
the container and writes the session record; a SIGKILL leaves the record ``running`` and
the transcript valid up to its last event, and ``harness cleanup`` then marks it
``interrupted`` and removes the container by label.

Before the final tree is copied out, every process the agent left running is frozen and
killed, so the tree is the one of that instant (the record says what was still running).
The record and the manifest end with the transcript's head, which ``harness verify`` checks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker
from pydantic import BaseModel, Field, ValidationError

from grading.hashing import file_sha256, tree_sha256
from harness.agent.cli_agents.commands import COMMON_COMMANDS, HarnessCommands
from harness.agent.cli_agents.launch import cli_launch
from harness.agent.cli_agents.prompt import build_cli_prompt
from harness.agent.cli_agents.run import CliRun, run_cli_agent
from harness.agent.cli_agents.setup import CliSetup, prepare_cli, provider_for
from harness.agent.gateway.server import CONTAINER_SOCKET_DIR, Gateway, GatewaySettings
from harness.agent.loop import (
    AgentOutcome,
    AgentParts,
    AgentPrompt,
    build_system_prompt,
    run_agent,
)
from harness.agent.providers import make_provider
from harness.agent.providers.base import Provider
from harness.agent.snapshots import Snapshots
from harness.agent.tools import ExtraTool, ToolRunner, ToolSpec
from harness.agent.toolsets import tools_for_arm
from harness.agent.traincheck_tool import TraincheckTool
from harness.errors import HarnessError, Interrupted, signals_as_interrupt
from harness.infra import images
from harness.infra.gpu_slots import GpuSlots, require_gpus
from harness.infra.sandbox import (
    RUNS_LABEL,
    WORKSPACE,
    Sandbox,
    SandboxLimits,
    SandboxLost,
    host_id,
    process_alive,
)
from harness.infra.workspace import (
    check_applies,
    compute_diff,
    extract_tree,
    snapshot_baseline,
    workspace_archive,
)
from harness.records import events
from harness.records.attempt import (
    SESSION_SCHEMA_VERSION,
    AttemptPaths,
    DiffSummary,
    LaunchInfo,
    SessionRecord,
    TranscriptHead,
    all_records,
    new_attempt_dir,
    study_records,
    write_manifest,
    write_record,
)
from harness.records.budget import Budget, Ledger
from harness.records.clock import utc_timestamp
from harness.records.packets import TaskPacket, load_packet
from harness.records.processes import StopReport
from harness.records.study import (
    AgentSettings,
    Study,
    assignment,
    load_study,
    session_budget,
    session_resources,
    task_ref,
)
from harness.records.transcript import TranscriptWriter
from harness.study import freeze
from harness.study.progress import SessionProgress

MAX_TREE_BYTES = 512 * 1024**2
MAX_DIFF_BYTES = 32 * 1024**2
# Agent outcomes that are failures: the record's ``error`` says what happened.
ERROR_OUTCOMES = ("provider_error", "sandbox_lost")


class SessionOptions(BaseModel):
    study_path: Path
    pair: int
    arm: str
    model: str | None = None  # overrides the study's model; the session is then outside the study
    grade: bool = True
    # Trajectory snapshots (harness/agent/snapshots.py); off only to measure what they cost.
    snapshots: bool = True
    # GPUs to hold exclusively; None: what the study promises its sessions. Another number
    # puts the session outside the frozen study.
    gpus: int | None = Field(default=None, ge=0)
    # The same session outside the study: runs/scratch/<study>/, never under a lock.
    scratch: bool = False
    # Set by a matrix worker: how it was launched; its ``queued_at`` starts the queue time.
    launch: LaunchInfo | None = None
    queued_at: float | None = None  # epoch seconds of ``launch.queued_at``


def run_session(options: SessionOptions, log: Callable[[str], None] = print,
                progress: SessionProgress | None = None) -> Path:
    """Run one session; returns its attempt folder. Bad input fails before any container."""
    study = load_study(options.study_path)
    spec = assignment(study, options.pair, options.arm)
    task = task_ref(study, spec.task)
    packet = load_packet(task.packet_dir())
    if not task.hidden_dir().is_dir():
        raise HarnessError(f"hidden folder {task.hidden_dir()} is missing", "restore hidden/")
    agent_settings = study.agent_for(spec)
    if options.model:
        try:
            agent_settings = AgentSettings.model_validate(
                {**study.agent.model_dump(), "model": options.model})
        except ValidationError as exc:
            raise HarnessError(f"--model {options.model!r} is not PROVIDER:NAME",
                               "use scripted:<file>, openai:<model> or anthropic:<model>") from exc
    # A missing API key (or a CLI pinned at another version) fails here, before Docker.
    provider: Provider | None = None
    cli: CliSetup | None = None
    if agent_settings.kind == "loop":
        provider = make_provider(agent_settings)
    else:
        cli = prepare_cli(agent_settings)
    arm = study.arms[spec.arm]
    tools = tools_for_arm(arm.extra_tools)
    extras: dict[str, ExtraTool] = {}
    if "traincheck" in arm.extra_tools:  # its frozen reference is checked before any container
        extras["traincheck"] = TraincheckTool.for_task(spec.task, packet, task.hidden_dir(),
                                                       task.reports_root())
    budget = session_budget(study, packet.spec.default_budget)
    cpus, study_gpus = session_resources(study, list(packet.spec.configurations))
    gpus = study_gpus if options.gpus is None else options.gpus
    # Every argument is checked before any folder exists: a session that cannot get its GPUs
    # on this host leaves nothing behind.
    require_gpus(gpus)
    client = images.docker_client()
    # A frozen study that drifted is refused here, before any container; a study never
    # frozen runs, recorded as outside the frozen study.
    # A scratch session is the same session outside the study: its own runs folder, no lock,
    # never counted.
    frozen = None if options.scratch else freeze.lock_for_session(
        study, options.study_path, client)
    image_name = arm.image if cli is None else images.cli_image_name(arm.image, cli.cli)
    image_id = images.image_id(client, image_name)
    counted = frozen is not None and options.model is None and gpus == study_gpus
    if counted and options.launch is None:
        assert frozen is not None
        log(f"this is session {spec.session_id} of the frozen study {study.name}, revision "
            f"{frozen.lock.revision}: its outcome is final (--scratch runs it outside the "
            "study, for trying things)")
    runs_root = scratch_root(study) if options.scratch else study.runs_root()

    attempt_dir, attempt = new_attempt_dir(runs_root / spec.session_id)
    record = SessionRecord(
        schema_version=SESSION_SCHEMA_VERSION, study=study.name,
        session_id=spec.session_id, attempt=attempt, task=spec.task,
        pair=spec.pair, arm=spec.arm, seed=spec.seed, model=agent_settings.model,
        in_frozen_study=counted,
        study_revision=frozen.lock.revision if frozen else None,
        lock_sha256=frozen.sha256 if frozen else None, launch=options.launch,
        packet_dir=str(packet.root),
        hidden_dir=str(task.hidden_dir()), image=images.image_tag(image_name), image_id=image_id,
        harness_pid=os.getpid(), host=host_id(), started_at=utc_timestamp(),
    )
    write_record(attempt_dir, record)
    log(f"session {spec.session_id} attempt {attempt}: {attempt_dir}"
        + ("" if record.in_frozen_study else " (outside the frozen study)"))
    transcript = TranscriptWriter(AttemptPaths(root=attempt_dir).transcript, events.validate)
    if progress is not None:
        transcript.watch(progress.observe)
    try:
        with signals_as_interrupt():
            _run_attempt(Attempt(study=study, options=options, record=record, dir=attempt_dir,
                                 packet=packet, agent=agent_settings, provider=provider,
                                 tools=tools, extras=extras, budget=budget, cpus=cpus,
                                 gpus=gpus, cli=cli, extra_tools=list(arm.extra_tools)),
                         client, transcript, log, progress)
    except (KeyboardInterrupt, Interrupted) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        raise Interrupted(signum, f"session recorded as interrupted in {attempt_dir}") from None
    finally:
        transcript.close()
        write_manifest(attempt_dir)
    if options.grade and record.diff is not None:
        from harness.oracle.grade import grade_attempt

        if frozen is not None:  # the hidden checks must still be the frozen ones
            freeze.check(frozen, study, options.study_path, client)
        if progress is not None:
            progress.waiting("grading in a fresh grader container")
        grade_attempt(attempt_dir, client=client, log=log)
    return attempt_dir


def scratch_root(study: Study) -> Path:
    """Where ``--scratch`` sessions of a study go: beside the studies' runs, never in them."""
    return study.runs_root().parent / "scratch" / study.name


@dataclass(frozen=True)
class Attempt:
    """One attempt of one session as decided before its container starts."""

    study: Study
    options: SessionOptions
    record: SessionRecord  # mutable: the attempt fills it in as it goes
    dir: Path
    packet: TaskPacket
    agent: AgentSettings
    provider: Provider | None  # the loop's; None for a CLI agent
    tools: list[ToolSpec]
    extras: dict[str, ExtraTool]
    budget: Budget
    cpus: float
    gpus: int
    cli: CliSetup | None = None  # a coding-agent CLI instead of the loop
    extra_tools: tuple[str, ...] | list[str] = ()


def _prompt_of(attempt: Attempt) -> tuple[str, list[str]]:
    """(what the agent is told, the names of its tools or harness commands)."""
    if attempt.cli is None:
        return (build_system_prompt(attempt.agent.system_prompt, attempt.tools),
                [t.name for t in attempt.tools])
    return (build_cli_prompt(attempt.agent.system_prompt, list(attempt.extra_tools),
                             attempt.packet.task_md),
            [*COMMON_COMMANDS, *attempt.extra_tools])


def _run_attempt(attempt: Attempt, client: docker.DockerClient, transcript: TranscriptWriter,
                 log: Callable[[str], None], progress: SessionProgress | None) -> None:
    study, options, record = attempt.study, attempt.options, attempt.record
    attempt_dir, packet, provider = attempt.dir, attempt.packet, attempt.provider
    tools, extras, budget = attempt.tools, attempt.extras, attempt.budget
    agent_settings, cpus, gpus = attempt.agent, attempt.cpus, attempt.gpus
    baseline = AttemptPaths(root=attempt_dir).baseline
    snapshot_baseline(packet.repo, baseline)
    system_prompt, tool_names = _prompt_of(attempt)
    transcript.append("session_start", {
        "study": study.name, "session": record.session_id, "attempt": record.attempt,
        "task": record.task, "pair": record.pair, "arm": record.arm, "seed": record.seed,
        "model": agent_settings.model_dump(mode="json"), "image": record.image,
        "image_id": record.image_id, "in_frozen_study": record.in_frozen_study,
        "tools": tool_names, "system_prompt": system_prompt,
        "budget": budget.model_dump(mode="json"), "study_revision": record.study_revision,
        "lock_sha256": record.lock_sha256, "cpus": cpus, "gpus": gpus,
        "launch": record.launch.model_dump(mode="json") if record.launch else None,
    })
    ledger = Ledger(budget, gpus=gpus, cpus=cpus,
                    on_change=lambda kind, data: transcript.append(kind, data))
    slots = GpuSlots(study.runs_root().parent / ".gpu-slots")
    sandbox: Sandbox | None = None
    # A CLI agent's provider (a scripted one runs for the session) and gateway: closed on
    # every way out, after the container.
    cli_parts = contextlib.ExitStack()
    gateway: Gateway | None = None
    try:
        def waiting(message: str) -> None:
            log(message)
            if progress is not None:
                progress.waiting(message)

        with slots.acquire(gpus, timeout_s=0 if gpus == 0 else 3600, on_wait=waiting) as lease:
            ledger.add_queue(lease.waited_s)
            if options.queued_at is not None and record.launch is not None:
                # Queue time runs from the matrix's start (or the job's submission) to the
                # container's start; the GPU wait above is part of it, not added twice.
                queued = max(0.0, time.time() - options.queued_at)
                ledger.add_queue(max(0.0, queued - lease.waited_s))
                record.launch.queue_seconds = round(queued, 3)
            record.gpu_ids = lease.gpu_ids
            if attempt.cli is not None:
                upstream = cli_parts.enter_context(provider_for(attempt.cli))
                gateway = Gateway(GatewaySettings(
                    upstream=upstream, retry=agent_settings.retry,
                    default_output_tokens=agent_settings.max_output_tokens,
                    provider_label=attempt.cli.provider_label), ledger, transcript)
                cli_parts.callback(gateway.close)
                gateway.start()
            sandbox = Sandbox(
                client, record.image_id, gpu_ids=lease.gpu_ids, name_hint=record.session_id,
                labels={"org.harness.study": study.name, "org.harness.session": record.session_id,
                        "org.harness.attempt": str(record.attempt),
                        # Which runs folder owns it: two hosts' users (or two test runs) may
                        # run the same study and session at once.
                        RUNS_LABEL: str(study.runs_root()),
                        "org.harness.role": "agent"},
                limits=SandboxLimits(cpus=cpus),
                gateway_dir=((gateway.socket_dir, CONTAINER_SOCKET_DIR)
                             if gateway is not None and gateway.socket_dir else None),
            )
            sandbox.start()
            record.container = sandbox.name
            write_record(attempt_dir, record)
            transcript.append("sandbox_start", {"container": sandbox.name,
                                                "container_id": sandbox.container_id,
                                                "image_id": record.image_id,
                                                "gpu_ids": lease.gpu_ids,
                                                "limits": sandbox.limits.model_dump()})
            sandbox.put_archive(WORKSPACE, workspace_archive(baseline))
            ledger.start()
            runner = ToolRunner(sandbox, packet, ledger, AttemptPaths(root=attempt_dir).artifacts,
                                gpus_available=bool(lease.gpu_ids), extra_tools=extras)
            snapshots = (Snapshots(sandbox, baseline, attempt_dir, transcript, ledger,
                                   max_tree_bytes=MAX_TREE_BYTES, max_diff_bytes=MAX_DIFF_BYTES)
                         if options.snapshots else None)
            outcome: AgentOutcome
            if gateway is None:
                assert provider is not None
                outcome = run_agent(
                    AgentParts(provider, tools, runner, ledger, transcript, snapshots),
                    AgentPrompt(system_prompt=system_prompt, task_md=packet.task_md,
                                max_output_tokens=agent_settings.max_output_tokens,
                                tool_output_chars=agent_settings.tool_output_chars))
            else:
                assert attempt.cli is not None
                gateway.tools = HarnessCommands(
                    runner, transcript, snapshots,
                    tool_output_chars=agent_settings.tool_output_chars,
                    on_budget=lambda exc: gateway.end(exc.outcome, str(exc)))
                outcome = run_cli_agent(CliRun(
                    launch=cli_launch(attempt.cli.cli, attempt.cli.model_name, agent_settings,
                                      ledger.time_left()),
                    prompt=system_prompt, sandbox=sandbox, gateway=gateway, ledger=ledger,
                    transcript=transcript, artifacts=AttemptPaths(root=attempt_dir).artifacts,
                    snapshots=snapshots))
            # First thing: nothing the agent left running may write after its end.
            stopped = _stop_agent(sandbox)
            record.outcome = outcome.outcome
            if outcome.outcome.split(":")[0] in ERROR_OUTCOMES:
                record.error = outcome.error
            transcript.append("agent_end", outcome.model_dump(mode="json"))
            _finalize_diff(sandbox, attempt_dir, record, transcript, stopped=stopped)
            record.status = "finished"
    except (KeyboardInterrupt, Interrupted) as exc:
        record.status, record.outcome = "interrupted", "interrupted"
        record.error = str(exc) if isinstance(exc, Interrupted) else "interrupted by SIGINT"
        transcript.append("session_interrupted", {"reason": record.error})
        _finalize_diff(sandbox, attempt_dir, record, transcript, best_effort=True)
        raise
    except Exception as exc:
        record.status, record.outcome = "finished", "harness_error"
        record.error = f"{type(exc).__name__}: {exc}"
        transcript.append("error", {"error": record.error,
                                    "traceback": traceback.format_exc(limit=20)})
        _finalize_diff(sandbox, attempt_dir, record, transcript, best_effort=True)
        raise
    finally:
        if sandbox is not None:
            # The record is written whatever happens here: a container that will not go is
            # said in the transcript and left to `harness cleanup` (its owner is then dead).
            try:
                sandbox.close()
                transcript.append("sandbox_removed", {"container": sandbox.name})
            except Exception as exc:
                transcript.append("error", {"error": f"removing {sandbox.name}: "
                                            f"{type(exc).__name__}: {exc}", "phase": "sandbox"})
                log(f"warning: container {sandbox.name} was not removed ({exc}); run "
                    "`harness cleanup` once this session has ended")
        cli_parts.close()
        record.usage = ledger.snapshot()
        record.ended_at = utc_timestamp()
        transcript.append("session_end", {"status": record.status, "outcome": record.outcome,
                                          "usage": record.usage.model_dump(mode="json"),
                                          "diff": record.diff.model_dump() if record.diff
                                          else None})
        record.transcript = TranscriptHead(events=transcript.next_seq, head=transcript.last_hash)
        write_record(attempt_dir, record)
        log(f"session {record.session_id}: {record.status}, outcome {record.outcome}")


def _stop_agent(sandbox: Sandbox) -> StopReport | SandboxLost:
    """Freeze then kill every process in the container but PID 1; or why it could not be."""
    try:
        return sandbox.stop_processes()
    except SandboxLost as exc:
        return exc


def _finalize_diff(
    sandbox: Sandbox | None,
    attempt_dir: Path,
    record: SessionRecord,
    transcript: TranscriptWriter,
    *,
    stopped: StopReport | SandboxLost | None = None,
    best_effort: bool = False,
) -> None:
    """Stop the agent's processes (unless ``stopped`` says it was done), copy the final tree
    out, diff it against the host's pristine baseline, keep both."""
    if sandbox is None or sandbox.container is None or record.diff is not None:
        return
    try:
        if stopped is None:
            stopped = _stop_agent(sandbox)
        if isinstance(stopped, SandboxLost):
            # The workspace is a tmpfs volume: it went with the container, there is no tree.
            if record.outcome not in ("interrupted", "harness_error"):
                record.outcome = "sandbox_lost"
            record.error = stopped.line()
            transcript.append("copy_out_skipped", {
                "error": stopped.line(), "reason": "the container stopped; its RAM-backed "
                "/workspace went with it, so there is no final tree"})
            return
        record.processes_stopped = stopped
        transcript.append("processes_stopped", stopped.model_dump(mode="json"))
        paths = AttemptPaths(root=attempt_dir)
        report = extract_tree(sandbox.get_archive(WORKSPACE), paths.final,
                              max_bytes=MAX_TREE_BYTES)
        patch, result = compute_diff(paths.baseline, paths.final, max_diff_bytes=MAX_DIFF_BYTES)
        check_applies(paths.baseline, patch)
        paths.diff.write_bytes(patch)
        record.diff = DiffSummary(
            sha256=file_sha256(paths.diff), bytes=len(patch),
            files_changed=result.files_changed,
        )
        transcript.append("diff", {"extract": report.model_dump(mode="json"),
                                   **result.model_dump(mode="json"),
                                   "final_tree_sha256": tree_sha256(paths.final),
                                   "sha256": record.diff.sha256})
    except HarnessError as exc:  # DiffTooLarge and UnsafeArchive included
        record.error = exc.line()
        transcript.append("error", {"phase": "diff", "error": exc.line()})
        if record.outcome in (None, "submitted", "agent_stopped"):
            record.outcome = "diff_failed"
    except Exception as exc:
        transcript.append("error", {"phase": "diff", "error": f"{type(exc).__name__}: {exc}"})
        if not best_effort:
            raise


def harness_alive(record: SessionRecord) -> bool:
    return process_alive(record.harness_pid, record.host)


def mark_interrupted(
    runs_root: Path,
    *,
    study_root: Path | None = None,
    alive: Callable[[SessionRecord], bool] = harness_alive,
) -> list[Path]:
    """Sessions whose harness died without ending them (e.g. SIGKILL): mark them interrupted.

    ``study_root``: only that study's sessions. ``alive``: whether a session still runs (by
    default its harness process on this host; a Slurm-launched one asks Slurm for its job).
    The transcript gets a ``session_interrupted`` event that continues its hash chain; a
    partial last line (killed mid-write) is preserved as a blob by the transcript writer.
    """
    marked = []
    found = (study_records(study_root) if study_root is not None
             else all_records(runs_root))
    for attempt_dir, record in found:
        if record.status != "running":
            continue
        if alive(record):
            continue
        with TranscriptWriter(AttemptPaths(root=attempt_dir).transcript,
                              events.validate) as transcript:
            transcript.append("session_interrupted", {
                "reason": f"harness process {record.harness_pid} is gone"
                          + (f" (Slurm job {record.launch.job_id} ended)"
                             if record.launch and record.launch.job_id else "")
                          + "; the session never ended",
            })
            record.transcript = TranscriptHead(events=transcript.next_seq,
                                               head=transcript.last_hash)
        record.status, record.outcome = "interrupted", "interrupted"
        record.ended_at = utc_timestamp()
        record.error = "the harness process died before the session ended"
        write_record(attempt_dir, record)
        write_manifest(attempt_dir)
        marked.append(attempt_dir)
    return marked
