"""The packets' teardown loop: many two-rank runs under load, counting aborts at exit.

A two-rank gloo run of a packet could abort after writing every output ("terminate called
without an active exception", SIGABRT): a gloo worker thread that drops a collective's tensor
while Python shuts down must take the GIL, and CPython ends it with pthread_exit. The
packets' teardown ends the group's threads before the interpreter shuts down; this loop shows
it holds. In the control image, from a task's repo (the hidden reference applied, or the
baseline), it runs N two-rank runs (gloo-ddp-2 and gloo-fsdp-2 in turn, with checkpoints and
export) P at a time beside H busy loops, and counts per run: the exit code, an abort, and the
gloo threads still alive when the interpreter starts shutting down (the abort's precondition,
from a thread census at exit; see teardown/sitecustomize.py). A positive control first runs a
program that exits while gloo holds its tensors, to show the detector sees this abort.

    .venv/bin/python scripts/qualify/teardown_loop.py --task moe-router --runs 200 \
        --report reports/teardown/moe-router.md

``--repo-root`` points at another checkout (``git worktree add /tmp/old <commit>``) to measure
the code before a change with the same loop.

``--public-path`` runs the packet tests' own two-rank command instead (gloo-ddp-2, 20 fp64
steps, output read through pipes as the test reads it), in the grader image as the candidate
uid, one run at a time (the host's other work is the load), and records where every process
of a run that has not ended after ``--stall-s`` waits (teardown/public_path_loop.py).

``--grader-path`` runs what a grade runs: the grader's own code grades the reference (or the
baseline) with the hidden checks left out, so the public test command runs exactly as in a
grade, in a grader container with the grader's settings plus CAP_SYS_PTRACE for the judge; a
two-rank launcher alive after ``--stall-s`` gets its process tree, thread states and
``py-spy dump --native`` stacks recorded (teardown/grader_path_loop.py). ``--containers``
such loops run side by side, as gradings do on a busy host. ``--py-spy`` names the py-spy
binary (from the ``py-spy`` wheel: ``pip download --no-deps py-spy``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

import docker
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.infra.images.specs import image_tag  # noqa: E402
from harness.infra.sandbox import Sandbox, SandboxLimits  # noqa: E402
from harness.infra.workspace import apply_patch, snapshot_baseline, workspace_archive  # noqa: E402
from harness.records.packets import load_packet  # noqa: E402

CANDIDATE_USER = "2000:2000"  # the grader image's candidate uid (images/grader/Dockerfile)
HELPERS = Path(__file__).resolve().parent / "teardown"
PUBLIC_LINE = re.compile(r"^run (\d+) rc=(-?\d+) wall=([\d.]+) stalled=([01])$")
GRADER_LINE = re.compile(r"^run (\d+) outcome=(\S+) wall=([\d.]+) stalled=([01]) rerun=([01])$")
LINE = re.compile(r"^run (\d+) (\S+) rc=(-?\d+) abort=([01]) gloo_threads_at_exit=(\d+)$")


class _Indexed(Protocol):
    index: int


R = TypeVar("R", bound=_Indexed)


class LoopRun(BaseModel):
    index: int
    config: str
    exit_code: int
    aborted: bool
    gloo_threads_at_exit: int


class LoopResult(BaseModel):
    runs: list[LoopRun]
    failure_tails: list[str]
    wall_s: float

    def count(self, predicate: str) -> int:
        return sum(1 for r in self.runs if getattr(r, predicate))


def parse_runs(text: str, pattern: re.Pattern[str],
               build: Callable[[re.Match[str]], R]) -> tuple[list[R], list[str]]:
    """A loop's runs (one line each, ``pattern``) and the indented lines that follow a failed
    or stalled run, each named by its run."""
    runs: list[R] = []
    tails: list[str] = []
    for line in text.splitlines():
        if m := pattern.match(line.strip()):
            runs.append(build(m))
        elif line.startswith("    ") and runs:
            tails.append(f"run {runs[-1].index}: {line.strip()}")
    return runs, tails


def parse_loop_output(text: str) -> tuple[list[LoopRun], list[str]]:
    """Runs and the indented tails of failed runs from run_loop.sh's output."""
    return parse_runs(text, LINE, lambda m: LoopRun(
        index=int(m[1]), config=m[2], exit_code=int(m[3]), aborted=m[4] == "1",
        gloo_threads_at_exit=int(m[5])))


def train_args(task_root: Path, variant: str) -> list[str]:
    """Short runs through every exit path a graded run takes: checkpoints, export, outputs."""
    spec = load_packet(task_root).spec
    diag = spec.diagnostics
    if diag is None:
        raise SystemExit(f"{task_root.name}: packet.yaml declares no diagnostics block")
    feature = list(diag.feature_args) if variant == "reference" else []
    return ["--steps", "4", *diag.args, *feature, "--save-every", "2",
            "--ckpt", "{work}/ckpt", "--export", "{work}/model.pt"]


def build_tree(repo_root: Path, task: str, variant: str, dest: Path) -> Path:
    """The task's repo (with the reference applied) plus the loop's helpers in .teardown/."""
    baseline = dest / "baseline"
    snapshot_baseline(repo_root / "task_packets" / task / "repo", baseline)
    tree = baseline
    if variant == "reference":
        patch = (repo_root / "hidden" / task / "reference" / "solution.patch").read_bytes()
        tree = dest / "reference"
        apply_patch(baseline, patch, tree)
    shutil.copytree(HELPERS, tree / ".teardown")
    return tree


def run_loop(client: docker.DockerClient, image: str, tree: Path, *, runs: int, parallel: int,
             hogs: int, args: list[str], program: str | None = None, labels: dict[str, str],
             artifact: Path | None = None) -> LoopResult:
    """Run run_loop.sh in a fresh control container holding ``tree`` at /workspace."""
    env = {"PROGRAM": program} if program else {}
    # Each two-rank launch holds ~30 threads per rank; hogs and parallel launches add up.
    limits = SandboxLimits(pids=4096, memory_bytes=12 * 1024**3)
    started = time.monotonic()
    with Sandbox(client, image, labels=labels, name_hint="teardown-loop", limits=limits) as box:
        box.put_archive("/workspace", workspace_archive(tree))
        result = box.exec(["bash", ".teardown/run_loop.sh", str(runs), str(parallel), str(hogs),
                           *args],
                          timeout_s=max(600, runs * 120), env=env, artifact=artifact)
    text = artifact.read_text(errors="replace") if artifact else result.output
    found, tails = parse_loop_output(text)
    if result.exit_code != 0 or len(found) != runs:
        raise SystemExit(f"the loop did not finish: exit {result.exit_code}, {len(found)} of "
                         f"{runs} runs reported\n{result.output[-3000:]}")
    return LoopResult(runs=found, failure_tails=tails, wall_s=time.monotonic() - started)


def summary_rows(name: str, result: LoopResult) -> list[str]:
    n = len(result.runs)
    with_threads = sum(1 for r in result.runs if r.gloo_threads_at_exit > 0)
    failed = sum(1 for r in result.runs if r.exit_code != 0)
    return [f"| {name} | {n} | {failed} | {result.count('aborted')} | {with_threads} | "
            f"{result.wall_s / 60:.1f} min |"]


class PublicRun(BaseModel):
    index: int
    exit_code: int
    wall_s: float
    stalled: bool


def public_path_loop(client: docker.DockerClient, tree: Path, *, runs: int, stall_s: float,
                     labels: dict[str, str], artifact: Path) -> tuple[list[PublicRun], list[str]]:
    """public_path_loop.py in a grader container, run as the candidate uid."""
    from harness.oracle.grade import grader_sandbox  # the grader's own container settings

    args = ["train.py", "--config", "gloo-ddp-2", "--steps", "20", "--dtype", "fp64",
            "--out", "{run}/out"]
    with grader_sandbox(client, image_tag("grader"), labels=labels,
                        name_hint="public-path-loop") as box:
        box.put_archive("/workspace", workspace_archive(tree))
        result = box.exec(["python", ".teardown/public_path_loop.py", str(runs), str(stall_s),
                           "--", *args], timeout_s=runs * (stall_s + 60), artifact=artifact,
                          user=CANDIDATE_USER)
    found, evidence = parse_runs(artifact.read_text(errors="replace"), PUBLIC_LINE,
                                 lambda m: PublicRun(index=int(m[1]), exit_code=int(m[2]),
                                                     wall_s=float(m[3]), stalled=m[4] == "1"))
    if result.exit_code != 0 or len(found) != runs:
        raise SystemExit(f"the loop did not finish: exit {result.exit_code}, {len(found)} of "
                         f"{runs} runs reported\n{result.output[-3000:]}")
    return found, evidence


def public_path_main(a: argparse.Namespace) -> None:
    client = docker.from_env()
    labels = {"harness.teardown-loop": "1"}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="public-path-loop-") as tmp:
        tree = build_tree(a.repo_root, a.task, a.variant, Path(tmp))
        found, evidence = public_path_loop(client, tree, runs=a.runs, stall_s=a.stall_s,
                                           labels=labels, artifact=Path(tmp) / "loop.log")
    walls = sorted(r.wall_s for r in found)
    lines = [
        f"# Public-test path loop: {a.task} ({a.variant})", "",
        f"{dt.date.today().isoformat()}, grader image "
        f"`{client.images.get(image_tag('grader')).id[:19]}`, checkout `{a.repo_root}`; one run "
        f"at a time as the candidate uid, the packet test's command read through pipes; a run "
        f"not ended after {a.stall_s:g} s counts as stalled.", "",
        "| runs | exit != 0 | stalled | median wall | slowest | loop wall |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {len(found)} | {sum(1 for r in found if r.exit_code != 0)} | "
        f"{sum(1 for r in found if r.stalled)} | {walls[len(walls) // 2]:.1f} s | "
        f"{walls[-1]:.1f} s | {(time.monotonic() - started) / 60:.1f} min |",
    ]
    if evidence:
        lines += ["", "Stalled or failed runs: processes and stacks:", "", "```",
                  *evidence[:400], "```"]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.report:
        a.report.parent.mkdir(parents=True, exist_ok=True)
        a.report.write_text(text)


class GraderPathRun(BaseModel):
    index: int
    outcome: str
    wall_s: float
    stalled: bool
    rerun: bool


def grader_path_inputs(repo_root: Path, task: str, variant: str, dest: Path,
                       py_spy: Path | None, with_hidden_checks: bool = False) -> Path:
    """The grader's inputs for one loop and the loop's helpers: the hidden checks left out
    (the public tests alone, first in a fresh container), or kept (a whole grade: every hidden
    check, then the public tests in the same container, as in both sightings)."""
    inputs = dest / "inputs"
    snapshot_baseline(repo_root / "task_packets" / task / "repo", inputs / "baseline")
    shutil.copy(repo_root / "task_packets" / task / "packet.yaml", inputs / "packet.yaml")
    hidden = repo_root / "hidden" / task
    patch = (hidden / "reference" / "solution.patch").read_bytes() if variant == "reference" \
        else b""
    (inputs / "diff").write_bytes(patch)
    # Without checks/ the grade runs the public tests only ("no hidden checks yet").
    shutil.copytree(hidden, inputs / "hidden",
                    ignore=None if with_hidden_checks else shutil.ignore_patterns("checks"))
    shutil.copytree(HELPERS, inputs / "teardown")
    if py_spy is not None:
        shutil.copy(py_spy, inputs / "teardown" / "py-spy")
    return inputs


def grader_path_loop(client: docker.DockerClient, inputs: Path, *, runs: int, stall_s: float,
                     labels: dict[str, str], artifact: Path) -> list[GraderPathRun]:
    """grader_path_loop.py in a grader container (the judge's settings, plus CAP_SYS_PTRACE)."""
    from harness.oracle.grade import JUDGE_USER, grader_sandbox

    with grader_sandbox(client, image_tag("grader"), labels=labels,
                        name_hint="grader-path-loop", extra_capabilities=("SYS_PTRACE",)) as box:
        box.put_archive("/workspace", workspace_archive(inputs))
        result = box.exec(["python", "/workspace/teardown/grader_path_loop.py", str(runs),
                           str(stall_s), "/workspace"], timeout_s=runs * 900,
                          artifact=artifact, user=JUDGE_USER)
    found, _ = parse_runs(artifact.read_text(errors="replace"), GRADER_LINE,
                          lambda m: GraderPathRun(index=int(m[1]), outcome=m[2],
                                                  wall_s=float(m[3]), stalled=m[4] == "1",
                                                  rerun=m[5] == "1"))
    if result.exit_code != 0 or len(found) != runs:
        raise SystemExit(f"the loop did not finish: exit {result.exit_code}, {len(found)} of "
                         f"{runs} runs reported\n{result.output[-3000:]}")
    return found


def grader_path_main(a: argparse.Namespace) -> None:
    import concurrent.futures

    client = docker.from_env()
    labels = {"harness.teardown-loop": "1"}
    started = time.monotonic()
    image_id = client.images.get(image_tag("grader")).id  # the image the loops run on
    a.log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="grader-path-loop-") as tmp:
        inputs = grader_path_inputs(a.repo_root, a.task, a.variant, Path(tmp), a.py_spy,
                                    a.with_hidden_checks)
        with concurrent.futures.ThreadPoolExecutor(a.containers) as pool:
            loops = [pool.submit(grader_path_loop, client, inputs, runs=a.runs,
                                 stall_s=a.stall_s, labels=labels,
                                 artifact=a.log_dir / f"loop-{n}.log")
                     for n in range(a.containers)]
            found = [run for loop in loops for run in loop.result()]
    walls = sorted(r.wall_s for r in found)
    outcomes: dict[str, int] = {}
    for r in found:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    lines = [
        f"# Grader-path loop: {a.task} ({a.variant})", "",
        f"{dt.date.today().isoformat()}, grader image `{image_id[:19]}`, checkout "
        f"`{a.repo_root}`; {a.containers} grader container(s) side by side, each grading {a.runs} times "
        + ("whole (every hidden check, then the public tests in the same container)"
           if a.with_hidden_checks else "with the hidden checks left out")
        + f"; a launcher alive after {a.stall_s:g} s counts as stalled "
        f"(logs: `{a.log_dir}`).", "",
        "| grades | public-tests outcomes | stalled launchers | reruns | median wall | slowest "
        "| loop wall |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {len(found)} | {', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))} | "
        f"{sum(r.stalled for r in found)} | {sum(r.rerun for r in found)} | "
        f"{walls[len(walls) // 2]:.1f} s | {walls[-1]:.1f} s | "
        f"{(time.monotonic() - started) / 60:.1f} min |",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.report:
        a.report.parent.mkdir(parents=True, exist_ok=True)
        a.report.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--variant", choices=["reference", "baseline"], default="reference")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--parallel", type=int, default=2, help="two-rank runs at a time")
    parser.add_argument("--hogs", type=int, default=2, help="busy loops beside them")
    parser.add_argument("--control-runs", type=int, default=10)
    parser.add_argument("--repo-root", type=Path, default=ROOT,
                        help="checkout whose packets and hidden reference are run")
    parser.add_argument("--report", type=Path)
    parser.add_argument("--public-path", action="store_true",
                        help="the packet tests' two-rank command, through pipes, in the grader")
    parser.add_argument("--stall-s", type=float, default=90.0,
                        help="--public-path: a run not ended by then is stalled")
    parser.add_argument("--grader-path", action="store_true",
                        help="the public tests through the grader's own code, in grader containers")
    parser.add_argument("--containers", type=int, default=1,
                        help="--grader-path: loops side by side")
    parser.add_argument("--with-hidden-checks", action="store_true",
                        help="--grader-path: grade whole (the hidden checks first, then the "
                             "public tests in the same container, as a session's grade does)")
    parser.add_argument("--py-spy", type=Path, help="--grader-path: the py-spy binary")
    parser.add_argument("--log-dir", type=Path, default=Path("runs/teardown/grader-path"),
                        help="--grader-path: each container's whole output")
    a = parser.parse_args()
    if a.grader_path:
        grader_path_main(a)
        return
    if a.public_path:
        public_path_main(a)
        return

    client = docker.from_env()
    image = image_tag("control")
    labels = {"harness.teardown-loop": "1"}
    args = train_args(a.repo_root / "task_packets" / a.task, a.variant)
    with tempfile.TemporaryDirectory(prefix="teardown-loop-") as tmp:
        tree = build_tree(a.repo_root, a.task, a.variant, Path(tmp))
        control = run_loop(client, image, tree, runs=a.control_runs, parallel=1, hogs=0,
                           args=[], program="outlive_group.py", labels=labels)
        print(f"positive control: {control.count('aborted')} of {a.control_runs} aborted")
        loop = run_loop(client, image, tree, runs=a.runs, parallel=a.parallel, hogs=a.hogs,
                        args=args, labels=labels, artifact=Path(tmp) / "loop.log")
    lines = [
        f"# Teardown loop: {a.task} ({a.variant})", "",
        f"{dt.date.today().isoformat()}, control image `{client.images.get(image).id[:19]}`, "
        f"checkout `{a.repo_root}`; {a.parallel} two-rank runs at a time beside {a.hogs} busy "
        f"loops on this host's cores; each run: `train.py {' '.join(args)}`.", "",
        "| loop | runs | exit != 0 | aborts | runs with gloo threads alive at exit | wall |",
        "| --- | --- | --- | --- | --- | --- |",
        *summary_rows("positive control (exits while gloo holds tensors)", control),
        *summary_rows("packet runs", loop),
    ]
    if loop.failure_tails:
        lines += ["", "Failed runs' last lines:", "", "```", *loop.failure_tails[:200], "```"]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.report:
        a.report.parent.mkdir(parents=True, exist_ok=True)
        a.report.write_text(text)


if __name__ == "__main__":
    main()
