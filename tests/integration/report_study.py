"""A small study run for real for `harness report`: every state the report must show.

The tiny fixture task, with its packet copied so that it also declares ``cuda-ddp-2`` (which a
CPU grader cannot run, so each grade says what it could not determine), two pairs:

- pair 2 treatment, run before the freeze: a session outside the frozen study; after the
  freeze nothing runs it again, so it is also a session not yet run;
- pair 1 control: its first attempt loses its sandbox (the container is killed under it), an
  infrastructure failure; the second attempt solves the task and submits;
- pair 1 treatment: solves, introduces a regression (the warmup ramp off by one step), runs
  its candidate (which exits 0: a silent regression), repairs it and submits;
- pair 2 control: solves and submits; its diff is altered after its grade, so it no longer
  verifies.

Pair 1's treatment has its snapshots graded, and its chain that says its diagnostic tool
was not used is judged by an auditor. Every model turn of the scripts reports
token usage, so token counts and money are not zero.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import docker
import yaml

from harness.paths import REPO_ROOT
from harness.records.attempt import study_records
from tests.conftest import write_study
from tests.helpers import harness

TINY = "tiny-regression"
SOLVE = REPO_ROOT / "tests/fixtures/agents/tiny-regression-solve.yaml"
USAGE = {"input_tokens": 1500, "output_tokens": 250}
# The regression pair 1's treatment introduces and repairs (hidden/tiny-regression's
# off-by-one-ramp fault, written here from the task statement, not copied from hidden/).
RAMP = "return min(1.0, (step + 1) / warmup_steps)"
RAMP_OFF_BY_ONE = "return min(1.0, step / warmup_steps)"
SLEEP = "sleep 25"
PRICES = [
    {"model": "scripted:{arm}", "category": "input", "per_million_tokens": 3.0,
     "currency": "USD", "date": "2026-12-01", "source": "test price list A"},
    {"model": "scripted:{arm}", "category": "output", "per_million_tokens": 15.0,
     "currency": "USD", "date": "2026-12-01", "source": "test price list A"},
]


@dataclass
class ReportStudy:
    tmp: Path
    study: Path
    name: str
    runs: Path

    def attempt(self, session: str, number: int) -> Path:
        return self.runs / session / f"attempt-{number}"


def _solve_steps() -> list[dict[str, object]]:
    """The packet's scripted solve without its exploration, its plain bash run and its
    candidate run: the edits, the public tests, submit."""
    steps = yaml.safe_load(SOLVE.read_text())["steps"]
    kept = [s for s in steps if s["tool"] in ("write_file", "edit_file")]
    submit = next(s for s in steps if s["tool"] == "submit")
    return [*kept, {"tool": "run_public_tests", "args": {}}, submit]


def _with_usage(steps: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{**step, "usage": dict(USAGE)} for step in steps]


def control_script() -> list[dict[str, object]]:
    # The sleep gives the test a container to kill for the infrastructure failure.
    return _with_usage([{"tool": "bash", "args": {"command": SLEEP, "timeout_s": 60}},
                        *_solve_steps()])


def treatment_script() -> list[dict[str, object]]:
    *edits, public, submit = _solve_steps()
    return _with_usage([
        *edits, public,
        {"tool": "edit_file", "args": {"path": "tinytrain/trainer.py", "old": RAMP,
                                       "new": RAMP_OFF_BY_ONE},
         "text": "Trying a ramp that starts from step 0."},
        {"tool": "run_candidate", "args": {"configuration": "cpu-1"}},
        {"tool": "edit_file", "args": {"path": "tinytrain/trainer.py", "old": RAMP_OFF_BY_ONE,
                                       "new": RAMP},
         "text": "Back to the ramp the task states."},
        submit])


def outside_script() -> list[dict[str, object]]:
    return _with_usage([{"tool": "bash", "args": {"command": "true"}},
                        {"tool": "submit", "args": {"summary": "nothing"}}])


def _packet_with_cuda(tmp: Path) -> Path:
    packet = tmp / "packet"
    shutil.copytree(REPO_ROOT / "tests/fixtures/task_packets" / TINY, packet)
    spec = yaml.safe_load((packet / "packet.yaml").read_text())
    spec["configurations"] = [*spec["configurations"], "cuda-ddp-2"]
    (packet / "packet.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return packet


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    result = harness(*args, timeout=1500)
    assert result.returncode == 0, (args, result.stdout[-3000:], result.stderr[-3000:])
    return result


def _kill_when_sleeping(client: docker.DockerClient, name: str, session: str,
                        stop: threading.Event) -> None:
    """Kill the session's container once the agent's sleep runs in it: its sandbox is lost
    under the session, which is not the agent's doing."""
    labels = [f"org.harness.study={name}", f"org.harness.session={session}"]
    while not stop.wait(0.3):
        for box in client.containers.list(filters={"label": labels}):
            try:
                if any(SLEEP in row[-1] for row in box.top().get("Processes") or []):
                    box.kill()
                    return
            except docker.errors.APIError:
                continue


def build(tmp: Path, client: docker.DockerClient) -> ReportStudy:
    """Run the study described in the module doc for real; its records under ``tmp/runs``."""
    name = f"r-{uuid.uuid4().hex[:8]}"
    for arm, steps in (("control", control_script()), ("treatment", treatment_script())):
        (tmp / f"{arm}.yaml").write_text(yaml.safe_dump({"steps": steps}))
    (tmp / "outside.yaml").write_text(yaml.safe_dump({"steps": outside_script()}))
    prices = [{**p, "model": f"scripted:{tmp}/{{arm}}.yaml"} for p in PRICES]
    study = write_study(
        tmp, name=name, pairs_per_task=2,
        tasks=[{"id": TINY, "packet": str(_packet_with_cuda(tmp)),
                "hidden": str(REPO_ROOT / "hidden" / TINY), "comparison": "coverage-audit"}],
        agent={"model": f"scripted:{tmp}/{{arm}}.yaml"}, prices=prices,
        budget={"wall_seconds": 900, "tool_calls": 40, "candidate_runs": 3,
                "tokens_total": 100_000},
        caps={"cpu_hours": 4})
    runs = tmp / "runs" / name
    found = ReportStudy(tmp=tmp, study=study, name=name, runs=runs)

    # Before the freeze: outside the frozen study (and never run inside it).
    _run("session", "--study", str(study), "--pair", "2", "--arm", "treatment", "--no-grade",
         "--model", f"scripted:{tmp}/outside.yaml")
    _run("freeze", "--study", str(study))

    control = f"{TINY}-pair1-control"
    stop = threading.Event()
    killer = threading.Thread(target=_kill_when_sleeping, args=(client, name, control, stop))
    killer.start()
    try:
        lost = harness("session", "--study", str(study), "--pair", "1", "--arm", "control",
                       timeout=1500)
    finally:
        stop.set()
        killer.join()
    assert lost.returncode != 0 or "sandbox_lost" in lost.stdout, lost.stdout
    records = {(r.session_id, r.attempt): r for _p, r in study_records(runs)}
    assert records[(control, 1)].outcome == "sandbox_lost", records[(control, 1)]
    _run("session", "--study", str(study), "--pair", "1", "--arm", "control")
    _run("session", "--study", str(study), "--pair", "1", "--arm", "treatment")
    _run("session", "--study", str(study), "--pair", "2", "--arm", "control")

    # The treatment's snapshots only: its regression and repair are the trajectory to see
    # (each snapshot is one more grader container).
    treatment = f"{TINY}-pair1-treatment"
    _run("grade", str(runs / treatment / "attempt-1"), "--snapshots")
    _run("audit", "propose", str(runs / treatment / "attempt-1"))
    _run("audit", "judge", str(runs / treatment / "attempt-1"), "--chain", "tool-not-used",
         "--category", "tool_not_used", "--auditor", "test",
         "--note", "the fixture's treatment arm offers no diagnostic")

    # After its grade: pair 2's control diff is not the one that was graded any more.
    altered = runs / f"{TINY}-pair2-control" / "attempt-1" / "submission.diff"
    altered.write_bytes(altered.read_bytes() + b"\n# edited after grading\n")
    return found
