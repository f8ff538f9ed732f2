"""The study lock: every input a study's results rest on, digested once, checked before use.

``harness freeze --study S`` writes ``runs/<study>/locks/rev-N.json``: SHA-256 digests of the
study file, the model settings (and scripted agents' files), budgets and caps, seeds, the
full assignment with its launch order, each task packet tree, each hidden tree (checks,
faults, probes, reference, and the whole tree the grader checks), the frozen TrainCheck
reference and its applicability policy, the calibration report the diagnostic gate read, the
grading and diagnostics code, the ID of all four images and the inputs they were built from,
and the tool definitions and system prompt of each arm. It also records which rule of the
diagnostic gate each task passed under.

Every study command then recomputes the digests and refuses on the first item that drifted;
``harness freeze --verify`` lists them all. Freezing a changed study writes the next revision
beside the old one; sessions record the digest of the lock they ran under, so a revision's
runs are never mixed with another's.

The gate (the research plan's first milestone: the diagnostic can see the contracts): a task
is a treatment-vs-control comparison only if its committed calibration shows TrainCheck
detecting at least one oracle-confirmed fault beyond its healthy control runs, against the
same frozen reference the treatment arm uses; otherwise the study must mark it
``comparison: coverage-audit``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors
import yaml
from pydantic import BaseModel, ValidationError

from grading.hashing import file_sha256, grader_source_sha256, tree_sha256
from harness.agent.cli_agents.prompt import build_cli_prompt, command_lines
from harness.agent.loop import build_system_prompt
from harness.agent.toolsets import tools_for_arm
from harness.errors import HarnessError
from harness.infra import images
from harness.paths import CACHE_DIR, REPO_ROOT
from harness.records.attempt import read_record
from harness.records.budget import Budget
from harness.records.clock import utc_timestamp
from harness.records.packets import load_packet
from harness.records.study import (
    ArmName,
    Comparison,
    Study,
    StudyCaps,
    TaskRef,
    _resolve,
    launch_order,
    load_study,
    session_budget,
    session_resources,
)
from harness.records.transcript import canonical_json

LOCKS_DIR = "locks"
ABSENT = "absent"
# Folders that are caches, not inputs (tree_sha256 skips them inside a tree too).
_NOT_INPUTS = {"__pycache__", ".pytest_cache", ".git"}


class LockItem(BaseModel):
    name: str  # what drifted, as every refusal names it
    sha256: str  # or "absent"
    source: str  # where it is read from


class LockedSession(BaseModel):
    """One session of the frozen assignment, in launch order."""

    order: int
    session_id: str
    task: str
    pair: int
    arm: ArmName
    seed: int
    model: str  # resolved for this session (scripted placeholders filled in)
    cpus: float
    gpus: int
    budget: Budget
    comparison: Comparison


class GateDecision(BaseModel):
    """Which rule of the diagnostic gate let this task into the study."""

    task: str
    rule: Literal["detection-demonstrated", "coverage-audit"]
    detail: str
    detected: list[str]  # oracle-confirmed faults TrainCheck detected (with configurations)
    confirmed_faults: int
    calibration_sha256: str


class StudyLock(BaseModel):
    schema_version: Literal[1] = 1
    study: str
    revision: int
    frozen_at: str
    study_file: str
    items: list[LockItem]
    gate: list[GateDecision]
    caps: StudyCaps
    max_attempts: int
    sessions: list[LockedSession]

    def content(self) -> dict[str, Any]:
        """What makes two freezes the same study revision."""
        return self.model_dump(mode="json", exclude={"revision", "frozen_at"})

    def session(self, session_id: str) -> LockedSession:
        for session in self.sessions:
            if session.session_id == session_id:
                return session
        raise HarnessError(f"study {self.study} (revision {self.revision}) has no session "
                           f"{session_id!r}", "see `harness matrix plan`")


class Drift(BaseModel):
    name: str
    source: str
    locked: str
    now: str

    def line(self, revision: int) -> str:
        what = ("appeared" if self.locked == ABSENT else
                "is gone" if self.now == ABSENT else "changed")
        return f"{self.name} ({self.source}) {what} since revision {revision} was frozen"


class Frozen(BaseModel):
    """A lock as found on disk: its path and the digest sessions record."""

    path: Path
    sha256: str
    lock: StudyLock


# --- digests ---------------------------------------------------------------------------------


def _json_sha256(value: Any) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _file(path: Path) -> str:
    return file_sha256(path) if path.is_file() else ABSENT


def _tree(path: Path) -> str:
    return tree_sha256(path) if path.is_dir() else ABSENT


def study_file_sha256(path: Path) -> str:
    """The study file's digest: its bytes; for a file with a price table, its content without
    the table (prices are read by reports only, never by a session, so a new price list is not
    a new study, and a file without one keeps the digest it always had)."""
    if not path.is_file():
        return ABSENT
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict) and "prices" in data:
        rest = {key: value for key, value in data.items() if key != "prices"}
        return hashlib.sha256(json.dumps(rest, sort_keys=True, default=str).encode()).hexdigest()
    return file_sha256(path)


def scripted_file(model: str) -> Path | None:
    return _resolve(Path(model.removeprefix("scripted:"))) if model.startswith("scripted:") \
        else None


def locked_sessions(study: Study) -> list[LockedSession]:
    """The assignment in launch order, each with its resolved model, resources and budget."""
    packets = {task.id: load_packet(task.packet_dir()) for task in study.tasks}
    comparison = {task.id: task.comparison for task in study.tasks}
    sessions = []
    for order, spec in enumerate(launch_order(study), 1):
        packet = packets[spec.task]
        cpus, gpus = session_resources(study, list(packet.spec.configurations))
        sessions.append(LockedSession(
            order=order, session_id=spec.session_id, task=spec.task, pair=spec.pair,
            arm=spec.arm, seed=spec.seed, model=study.agent_for(spec).model, cpus=cpus,
            gpus=gpus, budget=session_budget(study, packet.spec.default_budget),
            comparison=comparison[spec.task]))
    return sessions


def study_images(study: Study) -> dict[str, images.ImageSpec]:
    """The images a study's results rest on: the four every study uses, and a CLI agent's
    two (its layer over each arm's image) when the study runs one."""
    names = dict(images.IMAGE_SPECS)
    if study.agent.kind != "loop":
        for arm in ("control", "treatment"):
            name = images.cli_image_name(arm, study.agent.kind)
            names[name] = images.ALL_IMAGE_SPECS[name]
    return names


def _image_inputs(client: docker.DockerClient,
                  specs: dict[str, images.ImageSpec]) -> list[tuple[str, str, str]]:
    """(name, image ID, the inputs hash the checkout gives now) of each image, or absent.

    The hash is ``images.inputs_hash`` of the Dockerfile folder, pins, wheels and parent as
    they are now, which equals the image's build label while the image is current.
    """
    found = []
    ids = {"rootfs": ""}
    try:
        ids["rootfs"] = str(client.images.get(images.ROOTFS_TAG).id)
    except docker.errors.ImageNotFound:
        pass
    for name, spec in specs.items():
        try:
            image = client.images.get(spec.tag)
        except docker.errors.ImageNotFound:
            found.append((name, ABSENT, ABSENT))
            ids[name] = ""
            continue
        ids[name] = str(image.id)
        torch = image.labels.get("org.harness.torch", images.DEFAULT_TORCH_SPEC)
        wheels = images.find_wheels(CACHE_DIR / "wheelhouse",
                                    images.image_pins(spec, torch))
        parent = ids[spec.parent or "rootfs"]
        found.append((name, ids[name], images.inputs_hash(spec, parent, wheels, torch)))
    return found


def lock_items(study: Study, study_path: Path, sessions: list[LockedSession],
               client: docker.DockerClient | None) -> list[LockItem]:
    """The digests of everything the study's results rest on, as they are now.

    Ordered from the most specific to the most general, so that the first drifted item a
    refusal names is the one that says what changed (a hidden check before the hidden tree).
    Without an engine (``client`` None) the images' items are left out: only the engine can
    say what an image is.
    """
    items: list[LockItem] = []

    def add(name: str, sha256: str, source: str) -> None:
        items.append(LockItem(name=name, sha256=sha256, source=source))

    add("study file", study_file_sha256(study_path), _shown(study_path))
    add("model settings", _json_sha256(study.agent.model_dump(mode="json")), "agent:")
    for model in sorted({s.model for s in sessions}):
        script = scripted_file(model)
        if script is not None:
            add(f"agent script {script.name}", _file(script), _shown(script))
    add("budgets and caps", _json_sha256({
        "sessions": {s.session_id: [s.budget.model_dump(mode="json"), s.cpus, s.gpus]
                     for s in sessions},
        "caps": study.caps.model_dump(mode="json"),
        "matrix": study.matrix.model_dump(mode="json")}), "budget:, caps:, matrix:, resources:")
    add("seeds", _json_sha256({"study": study.seed,
                               "sessions": {s.session_id: s.seed for s in sessions}}), "seed:")
    add("assignment", _json_sha256([s.model_dump(mode="json", include={
        "order", "session_id", "task", "pair", "arm", "seed", "comparison"})
        for s in sessions]), "tasks:, pairs_per_task:, seed:")
    for task in study.tasks:
        add(f"packet {task.id}", _tree(task.packet_dir()), _shown(task.packet_dir()))
        hidden = task.hidden_dir()
        if hidden.is_dir():
            for sub in sorted(p for p in hidden.iterdir()
                              if p.is_dir() and p.name not in _NOT_INPUTS):
                add(f"hidden {task.id} {sub.name}", tree_sha256(sub), _shown(sub))
        add(f"hidden {task.id}", _tree(hidden), _shown(hidden))
        reference = task.traincheck_dir() / "reference"
        add(f"traincheck policy {task.id}", _file(reference / "policy.json"),
            _shown(reference / "policy.json"))
        add(f"traincheck reference {task.id}", _tree(reference), _shown(reference))
        calibration = task.traincheck_dir() / "calibration.json"
        add(f"calibration {task.id}", _file(calibration), _shown(calibration))
    add("grading code", grader_source_sha256(), "grading/*.py")
    add("diagnostics code", _tree(REPO_ROOT / "diagnostics"), "diagnostics/")
    specs = study_images(study)
    for name, image_id, inputs in _image_inputs(client, specs) if client is not None else []:
        add(f"image {name}", image_id, specs[name].tag)
        add(f"image {name} inputs", inputs,
            f"images/{specs[name].dockerfile_dir}/, its pins, wheels and parent")
    for arm_name, arm in study.arms.items():
        tools = tools_for_arm(arm.extra_tools)
        if study.agent.kind == "loop":
            add(f"arm {arm_name} tools and prompt", _json_sha256({
                "image": arm.image, "tools": [t.api_dict() for t in tools],
                "system_prompt": build_system_prompt(study.agent.system_prompt, tools)}),
                "harness/agent/ (tools, system prompt)")
        else:
            # A CLI's own tools come with its pinned binary (in the image's digest); what the
            # harness adds is its commands and the prompt, whose task part is the packet's.
            add(f"arm {arm_name} commands and prompt", _json_sha256({
                "image": images.cli_image_name(arm.image, study.agent.kind),
                "commands": command_lines(arm.extra_tools),
                "prompt": build_cli_prompt(study.agent.system_prompt, arm.extra_tools, "")}),
                "harness/agent/cli_agents/ (commands, prompt)")
    return items


# --- the diagnostic gate ---------------------------------------------------------------------


def _calibration_evidence(task: TaskRef) -> tuple[list[str], int, str | None]:
    """(confirmed faults TrainCheck detected, confirmed faults, why there is no evidence)."""
    from harness.traincheck.calibrate import CalibrationReport

    path = task.traincheck_dir() / "calibration.json"
    if not path.is_file():
        return [], 0, f"has no calibration report at {_shown(path)}"
    try:
        report = CalibrationReport.model_validate_json(path.read_text())
    except ValidationError:
        return [], 0, f"has an unreadable calibration report at {_shown(path)}"
    manifest = task.traincheck_dir() / "reference" / "manifest.json"
    if _file(manifest) != report.reference_manifest_sha256:
        return [], 0, (f"was calibrated against another frozen reference than "
                       f"{_shown(manifest.parent)} (the calibration is stale)")
    # Re-derived from the rows, not taken from the summary: confirmed by the oracle (gold
    # validation) and detected beyond the control set and the matching healthy runs.
    confirmed: set[str] = set()
    detected: dict[str, list[str]] = {}
    for cal in report.configs.values():
        for row in cal.rows:
            if row.kind == "fault" and row.oracle is not None and row.oracle.confirmed:
                confirmed.add(row.variant)
                if row.verdict == "detected":
                    detected.setdefault(row.variant, []).append(cal.config)
    names = [f"{variant.removeprefix('fault:')} ({', '.join(configs)})"
             for variant, configs in sorted(detected.items())]
    return names, len(confirmed), None


def diagnostic_gate(task: TaskRef) -> GateDecision:
    """The rule this task enters the study under; a HarnessError when it may not."""
    detected, confirmed, problem = _calibration_evidence(task)
    calibration = task.traincheck_dir() / "calibration.json"
    evidence = problem or (f"TrainCheck detected {len(detected)} of {confirmed} "
                           "oracle-confirmed faults beyond its healthy control"
                           + (f": {'; '.join(detected)}" if detected else ""))
    if task.comparison == "coverage-audit":
        return GateDecision(
            task=task.id, rule="coverage-audit", detected=detected, confirmed_faults=confirmed,
            calibration_sha256=_file(calibration),
            detail=f"marked coverage-audit: its sessions run and are reported, labelled as "
                   f"not evidence of benefit (calibration: {evidence})")
    fix = (f"run `harness calibrate --task {task.id}`, or mark the task "
           "`comparison: coverage-audit` in the study")
    if problem is not None:
        raise HarnessError(f"diagnostic gate: task {task.id} {problem}", fix)
    if not detected:
        raise HarnessError(
            f"diagnostic gate: task {task.id} cannot be a treatment-vs-control comparison: "
            f"TrainCheck detected none of its {confirmed} oracle-confirmed faults beyond its "
            f"healthy control ({_shown(calibration)})",
            "mark the task `comparison: coverage-audit` in the study (its sessions then run "
            "as a coverage audit, not evidence of benefit)")
    return GateDecision(task=task.id, rule="detection-demonstrated", detail=evidence,
                        detected=detected, confirmed_faults=confirmed,
                        calibration_sha256=_file(calibration))


# --- freeze, find, verify --------------------------------------------------------------------


def locks_dir(study: Study) -> Path:
    return study.runs_root() / LOCKS_DIR


def _revision(path: Path) -> int:
    try:
        return int(path.stem.removeprefix("rev-"))
    except ValueError:
        return 0


def read_lock(path: Path) -> Frozen:
    try:
        lock = StudyLock.model_validate_json(path.read_text())
    except (OSError, ValidationError) as exc:
        raise HarnessError(f"study lock {path} is unreadable ({type(exc).__name__})",
                           "restore it from a copy; a lock is never edited by hand") from exc
    return Frozen(path=path, sha256=file_sha256(path), lock=lock)


def latest_lock(study: Study) -> Frozen | None:
    found = sorted(locks_dir(study).glob("rev-*.json"), key=_revision)
    return read_lock(found[-1]) if found else None


def find_lock(study_root: Path, sha256: str) -> Frozen | None:
    for path in sorted((study_root / LOCKS_DIR).glob("rev-*.json"), key=_revision):
        if file_sha256(path) == sha256:
            return read_lock(path)
    return None


def _check_preconditions(study: Study, items: list[LockItem],
                         client: docker.DockerClient) -> None:
    """What must hold before a study can be frozen, beyond the gate."""
    from harness.agent.traincheck_tool import TraincheckTool

    digests = {item.name: item for item in items}
    for item in items:
        if item.name.startswith("agent script") and item.sha256 == ABSENT:
            raise HarnessError(f"study {study.name}: agent script {item.source} does not exist",
                               "fix agent.model in the study, or add the script")
    for name, spec in study_images(study).items():
        if digests[f"image {name}"].sha256 == ABSENT:
            build = f" --agent {spec.cli}" if spec.cli else ""
            raise HarnessError(f"study {study.name}: image {spec.tag} is missing",
                               f"build it with `harness images build{build}`")
        label = client.images.get(spec.tag).labels.get(images.INPUTS_LABEL)
        if label != digests[f"image {name} inputs"].sha256:
            raise HarnessError(f"image {spec.tag} is out of date with this checkout (its "
                               "inputs changed since it was built)",
                               "run `harness images build`, then freeze again")
    if any("traincheck" in arm.extra_tools for arm in study.arms.values()):
        for task in study.tasks:
            # The checks a treatment session makes at its start: a missing reference, or one
            # built for other packet inputs, is refused now, not in the middle of the matrix.
            TraincheckTool.for_task(task.id, load_packet(task.packet_dir()), task.hidden_dir(),
                                    task.reports_root())


def freeze(study_path: Path, client: docker.DockerClient) -> tuple[Frozen, bool]:
    """Freeze the study: (its lock, True when this wrote a new revision)."""
    study = load_study(study_path)
    path = _study_file(study_path)
    sessions = locked_sessions(study)
    gate = [diagnostic_gate(task) for task in study.tasks]
    items = lock_items(study, path, sessions, client)
    _check_preconditions(study, items, client)
    latest = latest_lock(study)
    lock = StudyLock(study=study.name, revision=(latest.lock.revision + 1 if latest else 1),
                     frozen_at=utc_timestamp(), study_file=str(path), items=items, gate=gate,
                     caps=study.caps, max_attempts=study.matrix.max_attempts,
                     sessions=sessions)
    if latest is not None and latest.lock.content() == lock.content():
        return latest, False
    folder = locks_dir(study)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"rev-{lock.revision}.json"
    # O_EXCL: a concurrent freeze of the same study cannot overwrite this revision.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(lock.model_dump(mode="json"), indent=1) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return read_lock(target), True


def _study_file(study_path: Path) -> Path:
    if not study_path.is_file() and not study_path.is_absolute():
        return (REPO_ROOT / study_path).resolve()
    return study_path.resolve()


def is_image_item(name: str) -> bool:
    return name.startswith("image ")


def drift(frozen: Frozen, study: Study, study_path: Path,
          client: docker.DockerClient | None) -> list[Drift]:
    """Every locked item whose digest differs now, in the lock's order; without an engine
    (``client`` None), every item but the images'."""
    now = {item.name: item for item in lock_items(
        study, _study_file(study_path), locked_sessions(study), client)}
    locked = {item.name: item for item in frozen.lock.items
              if client is not None or not is_image_item(item.name)}
    found = []
    for name in [*locked, *(n for n in now if n not in locked)]:
        was, current = locked.get(name), now.get(name)
        before = was.sha256 if was else ABSENT
        after = current.sha256 if current else ABSENT
        if before != after:
            source = (current or was).source  # type: ignore[union-attr]
            found.append(Drift(name=name, source=source, locked=before, now=after))
    return found


def check(frozen: Frozen, study: Study, study_path: Path, client: docker.DockerClient) -> None:
    """Refuse, naming the first drifted item, unless everything matches the lock."""
    found = drift(frozen, study, study_path, client)
    if found:
        raise HarnessError(
            f"study {study.name} drifted from its lock: {found[0].line(frozen.lock.revision)}",
            f"restore it, or freeze a new revision with `harness freeze --study {study_path}` "
            "(the old lock and its runs are kept); `harness freeze --verify` lists every item")


def require_lock(study: Study, study_path: Path, client: docker.DockerClient) -> Frozen:
    """The study's current lock, checked; a study command that needs one refuses without."""
    frozen = latest_lock(study)
    if frozen is None:
        raise HarnessError(f"study {study.name} is not frozen",
                           f"run `harness freeze --study {study_path}` first")
    check(frozen, study, study_path, client)
    return frozen


def lock_for_session(study: Study, study_path: Path,
                     client: docker.DockerClient) -> Frozen | None:
    """The checked lock a session runs under, or None for a study never frozen (the session
    is then recorded as outside the frozen study)."""
    frozen = latest_lock(study)
    if frozen is not None:
        check(frozen, study, study_path, client)
    return frozen


def check_attempt(attempt_dir: Path, client: docker.DockerClient) -> None:
    """Before grading a study session: its lock must still hold (hidden checks included)."""
    record = read_record(attempt_dir)
    if record.lock_sha256 is None:
        return
    study_root = attempt_dir.parent.parent
    frozen = find_lock(study_root, record.lock_sha256)
    if frozen is None:
        raise HarnessError(f"the lock {record.session_id} ran under ({record.lock_sha256[:16]}) "
                           f"is not in {study_root / LOCKS_DIR}",
                           "restore the study's locks folder; grading needs it")
    study_file = Path(frozen.lock.study_file)
    check(frozen, load_study(study_file), study_file, client)
