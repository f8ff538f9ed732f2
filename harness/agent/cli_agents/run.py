"""One coding-agent CLI run in the session's container, under the session's budgets.

The CLI runs as one exec (``harness-cli-run``: the gateway forwarder, then the CLI with its
prompt on stdin) whose stdout, its event stream, is read as it comes. The harness watches
three things while it runs: the gateway (a spent token or tool-call budget, a candidate run
past its cap, a provider failure), the session's clock, and the workspace's room; any of them
stops the CLI and everything it started (its exec's marked processes; whatever escaped is
frozen and killed by the session before the copy-out). How the run ended is the agent's
outcome: its own finish is ``submitted``, a crash or an exit without a result is
``agent_exited``, never a harness error.
"""

from __future__ import annotations

import base64
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from harness.agent.cli_agents.launch import CLI_DIR, PROMPT_FILE, STDERR_FILE, CliLaunch
from harness.agent.cli_agents.stream import EventStream
from harness.agent.gateway.server import CONTAINER_SOCKET_DIR, SOCKET_NAME, Gateway
from harness.agent.loop import AgentOutcome
from harness.agent.snapshots import Snapshots
from harness.errors import HarnessError
from harness.infra.sandbox import ExecResult, Sandbox, SandboxLost
from harness.records.budget import Ledger
from harness.records.transcript import TranscriptWriter

# Linux caps one argv element at 128 KiB; one chunk of base64 text stays well below.
CHUNK_CHARS = 96 * 1024
STDERR_KEPT_BYTES = 1024**2
STDERR_TAIL_CHARS = 4000
POLL_S = 0.5
# After the harness stops the CLI: how long its exec may take to end.
STOP_WAIT_S = 30.0

_WRITE = 'mkdir -p "$(dirname "$1")" && printf %s "$2" | base64 -d > "$1"'
_APPEND = 'printf %s "$2" | base64 -d >> "$1"'


@dataclass(frozen=True)
class CliRun:
    """What one CLI run works with."""

    launch: CliLaunch
    prompt: str
    sandbox: Sandbox
    gateway: Gateway
    ledger: Ledger
    transcript: TranscriptWriter
    artifacts: Path
    snapshots: Snapshots | None = None


def write_file(sandbox: Sandbox, path: str, content: str, timeout_s: float = 60) -> None:
    """Write a file under /tmp in the container (``put_archive`` cannot write a tmpfs), as
    the agent user, in base64 chunks through exec."""
    text = base64.b64encode(content.encode()).decode()
    for start in range(0, max(len(text), 1), CHUNK_CHARS):
        result = sandbox.exec(["bash", "-c", _WRITE if start == 0 else _APPEND, "write",
                               path, text[start:start + CHUNK_CHARS]], timeout_s=timeout_s,
                              workdir="/tmp")
        if result.timed_out or result.exit_code != 0:
            sandbox.check_alive()
            raise HarnessError(f"could not write {path} in the container: "
                               f"{result.output.strip()[-300:]}",
                               "check the CLI image (`harness images build --agent ...`)")


def run_cli_agent(run: CliRun) -> AgentOutcome:
    sandbox, gateway, ledger, transcript = run.sandbox, run.gateway, run.ledger, run.transcript
    launch = run.launch
    for path, content in launch.config_files.items():
        write_file(sandbox, path, content)
    write_file(sandbox, PROMPT_FILE, run.prompt)
    argv = ["harness-cli-run", STDERR_FILE, *launch.argv]
    environment = {**launch.environment, "HARNESS_PROMPT_FILE": PROMPT_FILE}
    transcript.append("cli_start", {
        "cli": launch.cli, "version": launch.version, "argv": argv, "prompt": run.prompt,
        "environment": environment, "config_files": launch.config_files,
        "gateway": {"socket": f"{CONTAINER_SOCKET_DIR}/{SOCKET_NAME}",
                    "upstream": gateway.settings.provider_label,
                    "forwarder": launch.environment.get("ANTHROPIC_BASE_URL")
                    or "http://127.0.0.1:8765/v1"},
    })
    tool_results = threading.Event()
    stream = EventStream(launch.cli, transcript, on_tool_result=tool_results.set)
    call_id = uuid.uuid4().hex[:16]
    stream_artifact = run.artifacts / "cli-stream.jsonl"
    stream_artifact.parent.mkdir(parents=True, exist_ok=True)
    outcome_box: dict[str, ExecResult | BaseException] = {}

    def exec_cli() -> None:
        try:
            # The deadline is the harness's own (below); this one only bounds a harness bug.
            outcome_box["result"] = sandbox.exec(
                argv, timeout_s=ledger.time_left() + 3600, env=environment,
                artifact=stream_artifact, on_output=stream.feed, call_id=call_id)
        except BaseException as exc:  # handed to the session's thread
            outcome_box["error"] = exc

    worker = threading.Thread(target=exec_cli, name="cli-agent", daemon=True)
    worker.start()
    stopped: str | None = None
    error = ""
    while worker.is_alive():
        if gateway.end_event.wait(POLL_S):
            assert gateway.ended is not None
            stopped, error = gateway.ended.outcome, gateway.ended.error
            break
        if ledger.time_left() <= 0:
            kind = ledger.deadline_kind
            stopped, error = f"budget_exhausted:{kind}", f"budget exhausted: {kind}"
            transcript.append("budget_exhausted", {"kind": kind, "message": error})
            break
        if tool_results.is_set():
            tool_results.clear()
            usage = sandbox.workspace_usage()
            if usage is not None and usage.full:
                transcript.append("workspace_full", usage.model_dump(mode="json"))
                stopped = "workspace_full"
                error = (f"/workspace is full ({usage.bytes_free} of {usage.bytes_total} bytes "
                         f"free, {usage.inodes_free} inodes free)")
                break
    if stopped is not None:
        if stopped.startswith("budget_exhausted") and run.snapshots is not None:
            run.snapshots.capture("budget_stop")
        sandbox.kill_call(call_id)
        worker.join(STOP_WAIT_S)
    worker.join()
    gateway.close_commands()
    stream.close()
    if "error" in outcome_box:
        exc = outcome_box["error"]
        assert isinstance(exc, BaseException)
        if isinstance(exc, SandboxLost):
            transcript.append("sandbox_lost", {"error": exc.line()})
            return AgentOutcome(outcome="sandbox_lost", turns=gateway.calls,
                                tool_calls=ledger.usage.tool_calls, error=exc.line())
        raise exc
    result = outcome_box["result"]
    assert isinstance(result, ExecResult)
    stderr_tail, stderr_artifact = _stderr(sandbox, run.artifacts)
    transcript.append("cli_end", {
        "exit_code": result.exit_code, "timed_out": result.timed_out,
        "stopped_by_harness": stopped, "events": stream.events,
        "unparsed_lines": stream.unparsed, "oversize_lines": stream.oversize,
        "result": stream.result, "stderr_tail": stderr_tail,
        "stream": str(stream_artifact), "stderr": stderr_artifact,
    })
    turns, calls = gateway.calls, ledger.usage.tool_calls
    if stopped is not None:
        return AgentOutcome(outcome=stopped, turns=turns, tool_calls=calls, error=error)
    finished, summary, why = _finished(launch.cli, stream, result)
    if finished:
        if run.snapshots is not None:
            run.snapshots.capture("submit")
        return AgentOutcome(outcome="submitted", turns=turns, tool_calls=calls,
                            summary=summary[:2000])
    return AgentOutcome(outcome="agent_exited", turns=turns, tool_calls=calls,
                        summary=summary[:2000], error=why[:2000])


def _finished(cli: str, stream: EventStream, result: ExecResult) -> tuple[bool, str, str]:
    """(whether the CLI finished its run, its final message, why not)."""
    if cli == "claude-code":
        res = stream.result or {}
        summary = str(res.get("result") or stream.last_message)
        if res.get("subtype") == "success" and not res.get("is_error") and \
                result.exit_code == 0:
            return True, summary, ""
        if not res:
            return False, summary, f"the CLI exited with code {result.exit_code} before its " \
                                   "result event"
        return False, summary, (f"the CLI ended with {res.get('subtype')} (error: "
                                f"{res.get('is_error')}, exit code {result.exit_code})")
    if result.exit_code == 0 and stream.turns_completed and stream.turn_failed is None:
        return True, stream.last_message, ""
    return False, stream.last_message, (stream.turn_failed or
                                        f"the CLI exited with code {result.exit_code}")


def _stderr(sandbox: Sandbox, artifacts: Path) -> tuple[str, str | None]:
    """The CLI's stderr: its tail for the record, its first MiB as an artifact."""
    path = artifacts / "cli-stderr.log"
    try:
        result = sandbox.exec(["head", "-c", str(STDERR_KEPT_BYTES), STDERR_FILE],
                              timeout_s=30, artifact=path, workdir=CLI_DIR)
    except (HarnessError, OSError):
        return "(the container is gone: no stderr)", None
    if result.exit_code != 0:
        return "", None
    text = path.read_text(errors="replace")
    return text[-STDERR_TAIL_CHARS:], str(path)
