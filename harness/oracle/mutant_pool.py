"""Grader containers for mutation analysis: the reference's grade, then a pool of workers.

``harness oracle-strength`` grades the unmutated reference once (``python -m grading.mutants``
without mutants), its hidden checks shared among ``workers`` grader containers side by side
(``--reference-part k/n``: every n-th check, the public tests in the last part; the parts'
headers merged here), then hands its header (``reference.json``: verdict, timings, coverage,
the judge's collection) to ``workers`` grader containers. Each takes the next mutant as soon
as it is free (one ``grading.mutants --only ID`` per mutant), so a survivor's full grade on
one worker does not hold up the kills queued behind it. Most of a grade waits on process
start-up and single-threaded training, so two workers on two cores grade more mutants per
minute than one (``docs/oracle-strength.md``).

Every container is a plain grader container (no network, the judge as root, the candidate uid
for candidate code); each result comes back through the same bounded, canary-checked reader
as a session's grade, one folder per mutant, and must name the grading code and hidden tree
the run sent.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from grading.errors import GraderError
from grading.mutant_report import (
    REFERENCE_NAME,
    RESULTS_NAME,
    MutantResult,
    MutantsReport,
    merge_reference_parts,
)
from grading.packet import load_packet_spec
from harness.infra import images
from harness.infra.sandbox import Sandbox
from harness.oracle.grade import (
    INPUT_DIR,
    JUDGE_USER,
    OUTPUT_DIR,
    WORK_DIR,
    GraderFailed,
    canaries,
    grader_sandbox,
    read_grader_output,
    send_inputs,
)


@dataclass(frozen=True)
class MutantInputs:
    """What every grader container of one run receives, and what its results must name."""

    baseline: Path
    packet_yaml: Path
    hidden: Path
    reference_diff: Path
    # index.json (MutantSpec entries) and <id>.diff
    mutants: Path
    grader_sha256: str
    hidden_sha256: str
    # Mutants' candidate processes forked from a warm interpreter (grading.warm_start).
    warm_start: bool = True

    def entries(self, reference: Path | None = None) -> dict[str, Path]:
        sent = {"baseline": self.baseline, "packet.yaml": self.packet_yaml,
                "hidden": self.hidden, "reference.diff": self.reference_diff,
                "mutants": self.mutants}
        return sent | ({REFERENCE_NAME: reference} if reference is not None else {})

    def command(self, out: str, *extra: str) -> list[str]:
        return ["python", "-m", "grading.mutants", "--baseline", f"{INPUT_DIR}/baseline",
                "--packet", f"{INPUT_DIR}/packet.yaml", "--hidden", f"{INPUT_DIR}/hidden",
                "--reference-diff", f"{INPUT_DIR}/reference.diff", "--out", out,
                "--work", f"{WORK_DIR}/mutants", "--expect-hidden-sha256", self.hidden_sha256,
                # Outside --work (removed after each run): kept for the worker's next mutant.
                *(["--warm-daemon-dir", f"{WORK_DIR}/warm-start"] if self.warm_start
                  else ["--cold-start"]), *extra]

    def bound(self, raw: bytes, what: str) -> MutantsReport:
        """``raw`` parsed, and refused unless it names this run's grading code and hidden
        tree (the checkout may change while a run goes; the run is bound to what it sent)."""
        try:
            graded = MutantsReport.model_validate_json(raw)
        except ValidationError as exc:
            raise GraderFailed(f"{what} is not valid ({exc.errors()[0]['msg']})",
                               "rebuild the grader image: harness images build grader") from None
        if graded.grader_source_sha256 != self.grader_sha256:
            raise GraderFailed("the grader image is not this checkout's grading code",
                               "rebuild the images: harness images build grader")
        if graded.hidden_tree_sha256 != self.hidden_sha256:
            raise GraderFailed(f"{what} was graded against another hidden tree",
                               "re-run; the hidden tree must not change during the run")
        return graded


def _sandbox(name_hint: str, run_id: str) -> Sandbox:
    # A client per container: the pool's threads never share one HTTP session.
    client = images.docker_client()
    return grader_sandbox(client, images.image_id(client, "grader"), name_hint=name_hint,
                          labels={"org.harness.role": "grader",
                                  "org.harness.submission": run_id})


def grade_reference(inputs: MutantInputs, out_dir: Path, *, timeout_s: float, parts: int,
                    log: Callable[[str], None]) -> MutantsReport:
    """The reference graded in full: in ``parts`` fresh grader containers side by side, each
    grading its share of the hidden checks (``--reference-part``), the parts' headers merged
    (``merge_reference_parts``); one container grades it all when ``parts`` is 1. Each
    header also stays in ``out_dir/reference[-part-K]``."""
    run_id = uuid.uuid4().hex
    if parts <= 1:
        log(f"grading the reference, one process per hidden check (follow "
            f"{out_dir / 'reference.log'})")
        with _sandbox(f"mutants-{run_id[:12]}-ref", run_id) as sandbox:
            return _grade_reference_part(inputs, sandbox, out_dir, None, timeout_s)
    log(f"grading the reference in {parts} parts side by side, one process per hidden check "
        f"(follow {out_dir / 'reference-part-*.log'})")
    headers: dict[int, MutantsReport] = {}

    def work(sandbox: Sandbox, k: int, stop: threading.Event) -> None:
        headers[k] = _grade_reference_part(inputs, sandbox, out_dir, (k, parts), timeout_s)

    _side_by_side(parts, f"mutants-{run_id[:12]}-ref", run_id, work)
    try:
        merged = merge_reference_parts([headers[k] for k in range(parts)],
                                       load_packet_spec(inputs.packet_yaml))
    except GraderError as exc:
        raise GraderFailed(f"the reference's {parts} parts cannot be merged: {exc}",
                           "grade it again: harness oracle-strength --fresh-reference") from None
    return inputs.bound(merged.model_dump_json().encode(), f"merged {REFERENCE_NAME}")


def _grade_reference_part(inputs: MutantInputs, sandbox: Sandbox, out_dir: Path,
                          part: tuple[int, int] | None, timeout_s: float) -> MutantsReport:
    """The reference (or its ``part`` (k, n)) graded in ``sandbox``; its header read back."""
    name = "reference" if part is None else f"reference-part-{part[0]}"
    extra = [] if part is None else ["--reference-part", f"{part[0]}/{part[1]}"]
    send_inputs(sandbox, inputs.entries())
    result = sandbox.exec(inputs.command(OUTPUT_DIR, *extra), timeout_s=timeout_s,
                          artifact=out_dir / f"{name}.log", user=JUDGE_USER)
    if result.timed_out or result.exit_code != 0:
        why = "timed out" if result.timed_out else f"exited with code {result.exit_code}"
        raise GraderFailed(f"the reference's grade {why}", f"see {out_dir / f'{name}.log'}")
    raw = read_grader_output(sandbox.get_archive(OUTPUT_DIR), out_dir / name,
                             canaries=canaries(inputs.hidden), main_file=REFERENCE_NAME)
    return inputs.bound(raw, REFERENCE_NAME)


def grade_in_pool(inputs: MutantInputs, reference: Path, mutant_ids: list[str], out_dir: Path,
                  *, workers: int, per_mutant_s: float,
                  on_result: Callable[[MutantResult], None],
                  log: Callable[[str], None]) -> None:
    """Grade ``mutant_ids`` on ``workers`` grader containers, each taking the next mutant when
    it is free; ``on_result`` gets each result as it comes (from the calling thread's view:
    one at a time). The first failure of any worker stops the pool and is raised."""
    pending: queue.Queue[tuple[int, str]] = queue.Queue()
    for n, mutant_id in enumerate(mutant_ids):
        pending.put((n, mutant_id))
    lock = threading.Lock()
    run_id = uuid.uuid4().hex
    count = min(max(1, workers), len(mutant_ids))

    def work(sandbox: Sandbox, worker: int, stop: threading.Event) -> None:
        send_inputs(sandbox, inputs.entries(reference))
        while not stop.is_set():
            try:
                n, mutant_id = pending.get_nowait()
            except queue.Empty:
                return
            result = _grade_one(inputs, sandbox, n, mutant_id, out_dir, per_mutant_s)
            with lock:
                if not stop.is_set():
                    on_result(result)

    _side_by_side(count, f"mutants-{run_id[:12]}-w", run_id, work, started=lambda: log(
        f"grading {len(mutant_ids)} mutants on {count} grader container(s) "
        f"(one log per mutant in {out_dir / 'logs'})"))


def _side_by_side(count: int, name_prefix: str, run_id: str,
                  work: Callable[[Sandbox, int, threading.Event], None],
                  started: Callable[[], None] = lambda: None) -> None:
    """``work(sandbox, k, stop)`` for k < ``count``, each on its own grader container and
    thread (``started`` is called once the containers are up). The first failure of any, or
    an interruption of the calling thread, sets ``stop`` (a worker must then take no new work
    and report nothing more), ends them all and is raised."""
    stop = threading.Event()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(sandbox: Sandbox, k: int) -> None:
        try:
            work(sandbox, k, stop)
        except BaseException as exc:  # handed to the calling thread, raised there
            with lock:
                errors.append(exc)
            stop.set()

    with contextlib.ExitStack() as stack:
        # The containers belong to this thread: on Ctrl-C or a worker's failure, leaving the
        # stack removes them all, which also ends any grade still running in them.
        sandboxes = [stack.enter_context(_sandbox(f"{name_prefix}{k}", run_id))
                     for k in range(count)]
        started()
        threads = [threading.Thread(target=run, args=(box, k), name=f"{name_prefix}{k}",
                                    daemon=True) for k, box in enumerate(sandboxes)]
        for thread in threads:
            thread.start()
        try:
            # A worker's failure ends them all at once: leaving the stack removes the
            # containers, and with them the grades the others are still waiting on.
            while not errors and any(thread.is_alive() for thread in threads):
                stop.wait(0.5)  # set by a failing worker: no need to wait the half second
        finally:
            # Before the containers go (Ctrl-C included): no worker reports or starts more.
            stop.set()
    if errors:
        raise errors[0]


def _grade_one(inputs: MutantInputs, sandbox: Sandbox, n: int, mutant_id: str, out_dir: Path,
               timeout_s: float) -> MutantResult:
    """One mutant graded by one ``grading.mutants`` process; its result read back."""
    # Under the 0700 output folder, so nothing of it is readable by the candidate uid.
    out = f"{OUTPUT_DIR}/{n}/out"
    log_path = out_dir / "logs" / f"{mutant_id}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result = sandbox.exec(
        inputs.command(out, "--reference", f"{INPUT_DIR}/{REFERENCE_NAME}",
                       "--mutants", f"{INPUT_DIR}/mutants", "--only", mutant_id),
        timeout_s=timeout_s, artifact=log_path, user=JUDGE_USER)
    if result.timed_out or result.exit_code != 0:
        why = "timed out" if result.timed_out else f"exited with code {result.exit_code}"
        raise GraderFailed(f"the grader of mutant {mutant_id} {why}", f"see {log_path}")
    (out_dir / "graded").mkdir(exist_ok=True)
    raw = read_grader_output(sandbox.get_archive(out), out_dir / "graded" / mutant_id,
                             canaries=canaries(inputs.hidden), main_file=RESULTS_NAME)
    graded = inputs.bound(raw, f"mutant {mutant_id}'s {RESULTS_NAME}")
    if [m.id for m in graded.mutants] != [mutant_id]:
        raise GraderFailed(f"the grader of mutant {mutant_id} reported "
                           f"{[m.id for m in graded.mutants][:3]} instead",
                           f"see {log_path}")
    return graded.mutants[0]
