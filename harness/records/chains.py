"""``audit/chains.json`` and ``audit/judgements.jsonl``: evidence chains proposed from a
session's transcript, and auditors' judgements of them (``harness audit``)."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

CHAINS_SCHEMA_VERSION = 1
JUDGEMENT_KIND = "judgement"

# The research plan's categories, exactly.
Category = Literal["helped", "no_defect_present", "no_applicable_rule", "tool_not_used",
                   "diagnostic_ignored", "diagnostic_misleading"]
CATEGORIES: tuple[str, ...] = get_args(Category)


class Violation(BaseModel):
    """One violation of the frozen invariants that the diagnostic reported."""

    relation: str
    rule: str
    ranks: list[int] = Field(default_factory=list)
    plain_rule: str = ""
    first_step: int | None = None


class Observation(BaseModel):
    """What the agent was shown: a diagnostic's report, a failed run of its own, or (for a
    treatment session that never called the diagnostic) nothing at all."""

    source: Literal["diagnostic", "own_run", "tool_not_used"]
    label: str  # in words: "2 new violations", "clean: no new violations", "failed (exit 1)"
    seq: int | None = None  # the tool_result event
    call_seq: int | None = None  # the tool_call event
    call_id: str | None = None
    tool: str | None = None
    args: str = ""  # the call's arguments as JSON, cut to ARGS_CHARS
    outcome: str | None = None  # the diagnostic's own outcome (details.outcome)
    cause: str = ""
    violations: list[Violation] = Field(default_factory=list)
    ok: bool | None = None
    exit_code: int | None = None
    timed_out: bool = False
    output_head: str = ""


class Message(BaseModel):
    """A model turn's text (for the scripted agent, the ``text`` its script attached)."""

    seq: int
    text: str  # cut to MESSAGE_CHARS
    chars: int  # the whole text's length


class Edit(BaseModel):
    """A write_file or edit_file call; lines from its arguments (``removed`` is None for a
    write_file, which does not say what it replaced: the snapshots do)."""

    seq: int
    call_id: str
    tool: str
    path: str
    added: int
    removed: int | None
    ok: bool | None  # its result; None when the transcript holds none


class OtherCall(BaseModel):
    """Any other call before the next run (a bash command can edit files too)."""

    seq: int
    tool: str
    args: str


class NextRun(BaseModel):
    """The agent's next run_candidate, run_public_tests, traincheck or submit call: where the
    chain ends and the code after its response was captured."""

    seq: int
    call_id: str
    tool: str
    args: str


class SnapshotState(BaseModel):
    """The code at one snapshot and its blind grade (``graded`` False: not graded yet)."""

    index: int
    trigger: str
    seq: int
    diff: str | None
    files_changed: list[str] = Field(default_factory=list)
    error: str | None = None  # why the snapshot could not be taken
    graded: bool = False
    verdict: str | None = None
    failing: list[str] = Field(default_factory=list)  # fail, crash, hang, diff_rejected
    not_run: list[str] = Field(default_factory=list)
    grade_reason: str | None = None  # a grader_error's reason


class Chain(BaseModel):
    """observation -> the agent's messages and edits -> the grades before and after.
    ``improved``: contracts judged failing (fail, crash, hang, diff_rejected) at ``before``
    and passing at ``after``; ``regressed``: the reverse; not_run is neither. ``id`` is
    ``c<seq>`` (the observation's tool_result event), or ``tool-not-used``."""

    id: str
    observation: Observation
    messages: list[Message] = Field(default_factory=list)
    edits: list[Edit] = Field(default_factory=list)
    other_calls: list[OtherCall] = Field(default_factory=list)
    # None: the session ended with no further run (``after`` is then a budget stop's, if any).
    next_run: NextRun | None = None
    before: SnapshotState | None = None
    after: SnapshotState | None = None
    improved: list[str] = Field(default_factory=list)  # judged failing before, pass after
    regressed: list[str] = Field(default_factory=list)  # pass before, judged failing after


class ChainProposal(BaseModel):
    """``audit/chains.json``: the candidate chains of one attempt, bound to its transcript.

    Holds no time of its own: proposing again from the same transcript and grades writes the
    same bytes, so judgements made against it stay bound to it.
    """

    schema_version: int = CHAINS_SCHEMA_VERSION
    study: str
    session_id: str
    attempt: int
    arm: str
    task: str
    transcript_sha256: str
    transcript_events: int
    # sha256 of the grades/snapshots.json the grades came from; None: not graded.
    snapshot_grades_sha256: str | None
    chains: list[Chain]


# --- judgements ------------------------------------------------------------------------------


class Judgement(BaseModel):
    """One line of ``audit/judgements.jsonl`` (the ``data`` of a ``judgement`` event)."""

    model_config = ConfigDict(extra="forbid")
    chain: str
    category: Category
    auditor: str = Field(min_length=1)
    note: str = ""
    transcript_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    chains_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    at: str
