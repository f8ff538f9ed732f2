"""``report.json``: every number the study report's two pages show, one model per section.

Nothing here is typed in: each field is computed from the records (``harness/report/``'s
section modules) and both pages are rendered from this model alone, so the JSON is the
report's evidence. It holds no time of its own: the same records give the same bytes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

REPORT_SCHEMA_VERSION = 1
# Said wherever pairs are compared: the pilot's n cannot support more.
EARLY_EVIDENCE = "early descriptive evidence, not a powered estimate"
NOT_AUDITED = "not audited"
NO_PRICE = "no price"


class LockCitation(BaseModel):
    """The lock the report rests on and how it was checked."""

    path: str
    sha256: str
    revision: int
    frozen_at: str
    items_checked: int
    # Items the report cannot check (the images': only the engine can say what an image is).
    items_not_checked: list[str] = Field(default_factory=list)


class LeftOut(BaseModel):
    """An attempt the report does not use, and why."""

    session_id: str
    attempt: int
    folder: str  # relative to the study's runs folder
    why: str


class SessionSummary(BaseModel):
    """One session of the frozen study: its state, and for a used one what it rests on."""

    order: int
    session_id: str
    task: str
    pair: int
    arm: str
    comparison: str
    state: str  # the matrix's state (finished, pending, damaged, ...)
    used: bool  # its attempt's numbers are in the report
    why_not_used: str | None = None
    attempt: int | None = None
    folder: str | None = None
    transcript_events: int | None = None
    transcript_head: str | None = None  # the chain's last hash, as session.json records it
    outcome: str | None = None
    verdict: str | None = None
    verdict_shown: str | None = None


# --- 1. primary outcome ------------------------------------------------------------------------

PrimaryLabel = Literal["feature complete", "feature complete on CPU, not determined for CUDA",
                       "not feature complete", "no diff", "not graded"]


class PrimaryOutcome(BaseModel):
    pair: int
    task: str
    comparison: str
    arm: str
    session_id: str
    label: PrimaryLabel | str
    verdict: str | None = None
    # Declared configurations the grader could not run: the outcome is not determined for them.
    not_determined_for: dict[str, str] = Field(default_factory=dict)
    complete: bool | None = None  # every required contract passed on what could run


class ArmCount(BaseModel):
    arm: str
    comparison: str
    sessions: int  # used sessions
    complete: int  # feature complete (every required contract on what could run)
    not_determined_for_cuda: int  # of those, with CUDA configurations not run


class PrimarySection(BaseModel):
    rows: list[PrimaryOutcome]
    by_arm: list[ArmCount]


# --- 2. per-contract outcomes ------------------------------------------------------------------

# flaky: a crash or hang on one run and a pass on its rerun (grading/confirm.py), never a pass.
ContractClass = Literal["pass", "silent_regression", "crash", "hang", "flaky", "not_run",
                        "diff_rejected"]
CONTRACT_CLASSES: tuple[ContractClass, ...] = ("pass", "silent_regression", "crash", "hang",
                                               "flaky", "not_run", "diff_rejected")


class ContractCounts(BaseModel):
    contract: str
    arm: str
    counts: dict[str, int]  # each ContractClass -> sessions


class ContractsSection(BaseModel):
    contracts: list[str]
    # session -> contract -> class (the grid the plot draws)
    grid: dict[str, dict[str, str]]
    by_arm: list[ContractCounts]
    # Per arm: totals over contracts and sessions.
    totals: dict[str, dict[str, int]]


# --- 3. trajectory -----------------------------------------------------------------------------


class SnapshotPoint(BaseModel):
    index: int
    trigger: str
    seconds: float  # from the session's start
    passing: int  # contracts passing in its blind grade
    judged: int  # contracts its grade ran
    verdict: str
    diagnostic: bool  # taken at a diagnostic call


class Regression(BaseModel):
    contract: str
    passed_at: int  # snapshot index
    failed_at: int
    repaired_before_submit: bool


class Trajectory(BaseModel):
    session_id: str
    arm: str
    graded: bool  # its snapshots were graded
    snapshots: list[SnapshotPoint] = Field(default_factory=list)
    first_passing_snapshot: int | None = None  # every contract passing
    seconds_to_first_pass: float | None = None
    tokens_to_first_pass: int | None = None
    candidate_runs_to_first_pass: int | None = None
    cpu_hours_to_first_pass: float | None = None
    regressions: list[Regression] = Field(default_factory=list)
    residual_defects: list[str] = Field(default_factory=list)  # not passing in the final grade


class TrajectorySection(BaseModel):
    sessions: list[Trajectory]


# --- 4. task quality ---------------------------------------------------------------------------


class QualityFigure(BaseModel):
    session_id: str
    arm: str
    contract: str
    figure: str  # the recorded property
    kind: Literal["held-out loss", "memory", "throughput", "time"]
    value: float


class QualitySection(BaseModel):
    # Only submissions that pass their correctness contracts.
    eligible_sessions: list[str]
    figures: list[QualityFigure]


# --- 5. costs ----------------------------------------------------------------------------------


class Money(BaseModel):
    """A money line: an amount, or no price (never zero for a missing price)."""

    amount: float | None = None
    currency: str | None = None
    price_per_million: float | None = None
    price_date: str | None = None
    price_source: str | None = None

    def shown(self) -> str:
        if self.amount is None:
            return NO_PRICE
        return f"{self.amount:.4f} {self.currency}"


class SessionCost(BaseModel):
    session_id: str
    arm: str
    model: str
    tokens_input: int
    tokens_output: int
    tokens_total: int
    money_input: Money
    money_output: Money
    money_total: Money
    wall_seconds: float
    # Seconds by where they went (the ledger's categories), and what the report splits out.
    inference_s: float
    agent_tools_s: float
    candidate_runs_s: float
    diagnostics_tracing_s: float
    diagnostics_checking_s: float
    diagnostics_other_s: float  # upload and the runner's own time
    study_build_inference_s: float  # the frozen reference's build, amortised per session
    failed_runs_s: float  # candidate and public-test runs that failed
    retry_waits_s: float
    queue_s: float
    grading_s: float  # the final grade and the snapshots' grades
    harness_s: float
    cpu_hours: float
    gpu_hours: float
    tool_calls: int
    candidate_runs: int
    budget_wall_seconds: float
    budget_tokens_total: int | None


class ArmCost(BaseModel):
    arm: str
    sessions: int
    tokens_input: int
    tokens_output: int
    tokens_total: int
    money_total: Money
    seconds: dict[str, float]  # the SessionCost seconds fields, summed
    cpu_hours: float
    gpu_hours: float


class CostsSection(BaseModel):
    sessions: list[SessionCost]
    by_arm: list[ArmCost]
    # Every attempt under the lock, failed ones too (what the caps are held against).
    cpu_hours_all_attempts: float
    gpu_hours_all_attempts: float
    cap_cpu_hours: float | None
    cap_gpu_hours: float | None
    prices: list[dict[str, str | float]]  # the table, as the study file states it


# --- 6. diagnostics ----------------------------------------------------------------------------


class DiagnosticSession(BaseModel):
    session_id: str
    task: str
    comparison: str
    tool_offered: bool
    tool_calls: int
    reports_with_violations: int
    violations_reported: int
    judgements: dict[str, int]  # category -> chains judged so (the latest judgement each)
    audited: bool
    audit_label: str  # "audited: ..." or NOT_AUDITED
    false_alarms: int  # reports with violations judged no_defect_present
    unresolved_alarms: int  # the last report still had violations


class DiagnosticsSection(BaseModel):
    sessions: list[DiagnosticSession]
    judgement_totals: dict[str, int]
    not_audited: int


# --- 7. track 1 --------------------------------------------------------------------------------


class CalibrationRowSummary(BaseModel):
    fault: str
    config: str
    oracle: str  # the grader's verdict in gold validation, or "no oracle verdict"
    oracle_confirmed: bool
    traincheck: str  # TrainCheck's verdict


class TaskCalibration(BaseModel):
    task: str
    comparison: str
    gate_rule: str | None
    gate_detail: str | None
    calibration_found: bool
    rows: list[CalibrationRowSummary] = Field(default_factory=list)
    faults_confirmed: int = 0
    faults_detected: int = 0
    false_alarms: int = 0
    controls: int = 0
    capabilities_found: bool = False
    capability: dict[str, dict[str, str]] = Field(default_factory=dict)  # config -> kind -> status
    coverage: dict[str, int] = Field(default_factory=dict)  # status -> contracts
    coverage_denominator: int = 0
    unsupported_contracts: list[str] = Field(default_factory=list)


class CalibrationSection(BaseModel):
    tasks: list[TaskCalibration]


# --- 8. paired differences ---------------------------------------------------------------------


class PairDifference(BaseModel):
    pair: int
    task: str
    comparison: str
    complete: bool  # both arms used
    # treatment minus control; None when either arm is missing
    feature_complete: int | None = None
    contracts_passing: int | None = None
    wall_seconds: float | None = None
    tokens_total: int | None = None
    money: float | None = None  # None also when either arm has no price


class PairedSection(BaseModel):
    label: str
    pairs: list[PairDifference]
    comparable_pairs: int  # complete pairs of treatment-vs-control tasks
    mean_feature_complete: float | None
    mean_contracts_passing: float | None
    mean_wall_seconds: float | None
    mean_tokens_total: float | None


# --- 9. the decision gate ----------------------------------------------------------------------


class GateCondition(BaseModel):
    name: str
    met: bool
    evidence: str


class DecisionSection(BaseModel):
    conditions: list[GateCondition]
    scale_up: bool
    gaps: list[str]  # which of tool coverage, diagnostic quality, agent response failed, why
    paragraph: str


class Report(BaseModel):
    schema_version: int = REPORT_SCHEMA_VERSION
    study: str
    study_file: str
    lock: LockCitation
    sessions_total: int
    sessions_graded: int
    partial: bool
    status_line: str  # "partial: N of M sessions graded" or "complete: ..."
    sessions: list[SessionSummary]
    left_out: list[LeftOut]
    primary: PrimarySection
    contracts: ContractsSection
    trajectory: TrajectorySection
    quality: QualitySection
    costs: CostsSection
    diagnostics: DiagnosticsSection
    calibration: CalibrationSection
    paired: PairedSection
    decision: DecisionSection
