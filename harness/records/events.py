"""Every transcript event kind and the shape of its ``data``: one model per kind.

The session validates each event's data against its model before the transcript writes it
(``validate``), and readers parse events into the same models (``parse``), so the writer and
every reader (audit, replay, reports) agree on one definition. ``docs/records.md`` is
generated from these models (``python -m harness.records.doc``) and CI checks it is current.

Any string longer than the transcript's inline limit is stored as a blob and replaced by a
reference (``TextBlob``); fields that can carry long text are typed ``Text`` so a parsed event
says so instead of failing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import HarnessError
from harness.records.transcript import Event


class TextBlob(BaseModel):
    """A long string stored beside the transcript, under its sha256 (``blobs/<sha256>``)."""

    model_config = ConfigDict(extra="forbid")
    blob: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    text: str  # the encoding the string was stored in


Text = str | TextBlob


class EventData(BaseModel):
    """Common to every kind: unknown fields are an error, never silently kept."""

    model_config = ConfigDict(extra="forbid")


# --- the session's frame ----------------------------------------------------------------------


class SessionStart(EventData):
    """What the session is: study, assignment, model settings, image, tools, budget."""

    study: str
    session: str
    attempt: int
    task: str
    pair: int
    arm: str
    seed: int
    model: dict[str, Any]  # the agent settings (harness.records.study.AgentSettings)
    image: str
    image_id: str
    in_frozen_study: bool
    tools: list[str]
    system_prompt: Text
    budget: dict[str, Any]  # harness.records.budget.Budget
    # Absent from transcripts written before study locks and matrices existed.
    study_revision: int | None = None
    lock_sha256: str | None = None
    cpus: float | None = None
    gpus: int | None = None
    # harness.records.attempt.LaunchInfo when a matrix launched it
    launch: dict[str, Any] | None = None


class SandboxStart(EventData):
    """The agent's container started (its name, id, image, GPUs and limits)."""

    container: str
    container_id: str
    image_id: str
    gpu_ids: list[str]  # as the host names them (CUDA_VISIBLE_DEVICES)
    limits: dict[str, Any]  # harness.infra.sandbox.SandboxLimits


class SandboxRemoved(EventData):
    container: str


class AgentEnd(EventData):
    """The agent loop's result, before the final tree is copied out."""

    outcome: str
    summary: Text
    turns: int
    tool_calls: int
    error: Text


class SessionInterrupted(EventData):
    """SIGINT/SIGTERM, or found dead by ``harness cleanup``."""

    reason: str


class SessionError(EventData):
    """A harness error (with its traceback), or a failure to produce the diff or to remove the
    sandbox at the end (``phase``)."""

    error: Text
    traceback: Text | None = None
    phase: Literal["diff", "sandbox"] | None = None


class SessionEnd(EventData):
    """The last event: status, outcome, final usage, the diff's summary."""

    status: str
    outcome: str | None
    usage: dict[str, Any]  # harness.records.budget.Usage
    diff: dict[str, Any] | None  # harness.records.attempt.DiffSummary


# --- budgets ---------------------------------------------------------------------------------


class BudgetStart(EventData):
    budget: dict[str, Any]
    deadline_s: float
    deadline_kind: str


class BudgetCounts(EventData):
    """The counters that just changed (only those)."""

    tool_calls: int | None = None
    candidate_runs: int | None = None
    tokens_input: int | None = None
    tokens_output: int | None = None
    tokens_total: int | None = None


class Overrun(EventData):
    used: int
    cap: int


class BudgetOverrun(EventData):
    """A provider reported more tokens than the reserved bound allowed."""

    tokens_input: Overrun | None = None
    tokens_output: Overrun | None = None
    tokens_total: Overrun | None = None


class BudgetExhausted(EventData):
    kind: str
    message: str


class WorkspaceFull(EventData):
    bytes_total: int
    bytes_free: int
    inodes_free: int


# --- the model -------------------------------------------------------------------------------


class ModelRequest(EventData):
    """One model call: the messages added since the last request, and the token bound.

    A coding-agent CLI's call, as the gateway received it, also says which ``api`` it spoke
    and at which ``path``; ``frame`` is the request's JSON without its messages (the same
    text every call: one blob), ``messages_from`` where ``messages`` start in the request's
    list (those before are the previous request's), and ``sha256`` is of the exact bytes sent
    to the provider, so the request can be rebuilt and checked."""

    turn: int
    provider: str
    settings: dict[str, Any]
    max_output_tokens: int
    input_tokens_bound: int
    messages: list[dict[str, Any]]
    message_count: int
    api: str | None = None
    path: str | None = None
    frame: Text | None = None
    messages_from: int | None = None
    sha256: str | None = None
    # What the gateway changed before forwarding (e.g. max_tokens capped to the budget).
    changed: dict[str, Any] | None = None


class ModelAttempt(EventData):
    """One HTTP attempt of a model call (several when retried)."""

    attempt: int
    ok: bool
    timeout_s: float
    duration_s: float
    error: Text | None = None
    error_type: str | None = None
    status: int | None = None
    retry_after_s: float | None = None


class ModelRetryWait(EventData):
    after_attempt: int
    wait_s: float


class ModelResponse(EventData):
    """The model's turn: text, tool calls, usage, and the provider's own content blocks
    (reasoning included, where the provider returned it)."""

    text: Text
    tool_calls: list[dict[str, Any]]
    usage: dict[str, Any]  # harness.agent.providers.base.TokenUsage
    stop_reason: str
    model: str
    provider_content: list[dict[str, Any]] | None
    duration_s: float
    # A CLI's call through the gateway: the API and the provider's body exactly as received
    # (the server-sent events of a streamed answer), which the CLI got unchanged.
    api: str | None = None
    raw: Text | None = None


class ProviderError(EventData):
    kind: str
    status: int | None
    message: Text


# --- tools -----------------------------------------------------------------------------------


class ToolCall(EventData):
    id: str
    name: str
    args: dict[str, Any]


class ToolResult(EventData):
    """What the tool did, and what of it the model was shown."""

    id: str
    name: str
    ok: bool
    output: Text
    exit_code: int | None
    timed_out: bool
    duration_s: float
    output_bytes: int
    output_truncated: bool
    artifact: str | None
    artifact_truncated: bool
    artifact_bytes: int
    kill: str
    ends_session: bool
    details: dict[str, Any]
    shown_to_model: Text
    cut_for_model: bool


class SandboxLost(EventData):
    error: str


class Snapshot(EventData):
    """The agent's code at a candidate run, public-test run, diagnostic call, submit or
    budget stop, as a diff against the baseline (``diff`` names the file; None when it could
    not be taken, and ``error`` says why), taken with the container paused."""

    index: int
    trigger: Literal["run_candidate", "run_public_tests", "traincheck", "submit",
                     "budget_stop"]
    call_id: str | None
    diff: str | None
    sha256: str | None = None
    bytes: int | None = None
    files_changed: list[str] = []
    error: str | None = None
    duration_s: float
    # True: the agent's processes were frozen while it was taken, so its time is the harness's
    # (off the budget's clock); False: the freezer refused, they ran on, and the time counted
    # against the agent. None when it was not taken (the session's snapshot allowance was
    # spent), and in transcripts written before this was recorded.
    paused: bool | None = None


# --- coding-agent CLIs ------------------------------------------------------------------------


class CliStart(EventData):
    """A coding-agent CLI started in the sandbox: which, how, with what prompt and settings
    (environment and configuration files hold no secret: the provider's key stays on the
    host, in the gateway)."""

    cli: str
    version: str
    argv: list[str]
    prompt: Text
    environment: dict[str, str]
    config_files: dict[str, Text]
    gateway: dict[str, Any]


class CliEnd(EventData):
    """How the CLI's process ended, and what its event stream held (the whole stream is the
    artifact ``stream``; lines that were not JSON or were over the size cap are counted)."""

    exit_code: int | None
    timed_out: bool
    stopped_by_harness: str | None
    events: int
    unparsed_lines: int
    oversize_lines: int
    result: dict[str, Any] | None
    stderr_tail: Text
    stream: str | None
    stderr: str | None


class GatewayRefused(EventData):
    """A request the gateway did not forward: unparseable, not a model or harness route,
    too large, or over a budget. ``body`` is its first bytes, as text."""

    method: str
    path: str
    status: int
    reason: Text
    body: Text | None
    body_bytes: int


# --- the final tree --------------------------------------------------------------------------


class ProcessesStopped(EventData):
    """The agent's processes, frozen then killed before the copy-out."""

    frozen: bool
    processes: list[dict[str, Any]]
    method: str
    survivors: list[dict[str, Any]]


class CopyOutSkipped(EventData):
    error: str
    reason: str


class Diff(EventData):
    """The final diff against the baseline (``final.diff``) and what the copy-out saw."""

    extract: dict[str, Any]  # harness.infra.workspace.ExtractReport
    patch_path: str | None
    bytes: int
    files_changed: list[str]
    added: list[str]
    deleted: list[str]
    modified: list[str]
    skipped: list[str]
    sha256: str
    # The final tree's digest (grading.hashing.tree_sha256); None in transcripts written
    # before it was recorded.
    final_tree_sha256: str | None = None


# The one registry: kind -> model. Order is the order of docs/records.md.
EVENT_DATA: dict[str, type[EventData]] = {
    "session_start": SessionStart,
    "budget_start": BudgetStart,
    "sandbox_start": SandboxStart,
    "model_request": ModelRequest,
    "model_attempt": ModelAttempt,
    "model_retry_wait": ModelRetryWait,
    "model_response": ModelResponse,
    "provider_error": ProviderError,
    "tool_call": ToolCall,
    "tool_result": ToolResult,
    "snapshot": Snapshot,
    "budget": BudgetCounts,
    "budget_overrun": BudgetOverrun,
    "budget_exhausted": BudgetExhausted,
    "workspace_full": WorkspaceFull,
    "cli_start": CliStart,
    "cli_end": CliEnd,
    "gateway_refused": GatewayRefused,
    "sandbox_lost": SandboxLost,
    "agent_end": AgentEnd,
    "processes_stopped": ProcessesStopped,
    "copy_out_skipped": CopyOutSkipped,
    "diff": Diff,
    "error": SessionError,
    "session_interrupted": SessionInterrupted,
    "sandbox_removed": SandboxRemoved,
    "session_end": SessionEnd,
}


class TypedEvent(BaseModel):
    """An event with its data parsed into the model of its kind."""

    model_config = ConfigDict(frozen=True)
    seq: int
    ts: str
    kind: str  # a key of EVENT_DATA (parse refuses any other)
    data: Annotated[EventData, Field(description="the model EVENT_DATA[kind]")]
    hash: str


def validate(kind: str, data: dict[str, Any]) -> None:
    """Refuse, before it is written, an event whose kind or data the readers would not know."""
    model = EVENT_DATA.get(kind)
    if model is None:
        raise ValueError(f"unknown transcript event kind {kind!r}: "
                         "add it to harness/records/events.py")
    model.model_validate(data)


def parse(event: Event) -> TypedEvent:
    """The typed view of one verified event; a HarnessError names what does not fit."""
    model = EVENT_DATA.get(event.kind)
    if model is None:
        raise HarnessError(f"event {event.seq} has an unknown kind {event.kind!r}",
                           "a newer harness wrote it; read it with that version")
    try:
        data = model.model_validate(event.data)
    except ValueError as exc:
        raise HarnessError(f"event {event.seq} ({event.kind}) does not match its record "
                           f"format: {str(exc).splitlines()[0]}",
                           "see docs/records.md for the format of each event") from None
    return TypedEvent(seq=event.seq, ts=event.ts, kind=event.kind,
                      data=data, hash=event.hash)


Seq = TypeVar("Seq")


def call_result_pairs(stream: Iterable[tuple[Seq, str, Any]]) -> dict[Seq, Seq]:
    """Each tool_call's seq -> the seq of its tool_result, from ``(seq, kind, call id)`` in
    transcript order: the first result after the call with its id. By position, not by id
    alone, since a provider may reuse a call id within a session (``call_0`` every turn)."""
    pairs: dict[Seq, Seq] = {}
    pending: dict[Any, Seq] = {}
    for seq, kind, call_id in stream:
        if kind == "tool_call":
            pending[call_id] = seq
        elif kind == "tool_result" and call_id in pending:
            pairs[pending.pop(call_id)] = seq
    return pairs
