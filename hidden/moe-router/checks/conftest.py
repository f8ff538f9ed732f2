# HARNESS-CANARY-8a0e5fe7-3b11-4c19-b138-53348751b84e
"""Shared runs for the moe-router hidden checks.

Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

These run in the judge's pytest, which never imports candidate code (GRADING_WORKDIR is the
candidate tree, GRADING_BASELINE the pristine baseline; neither is on the judge's path). Every
training run here is the candidate's own ``train.py`` (or the baseline's), run as the candidate
uid: ``cpu-1`` as one process through ``grading.run.run_command``, the 2-rank configurations
through ``grading.launch.launch`` (static loopback rendezvous, one log per rank; a crash or a
hang names the rank). A run writes only into its own job folder (``grading.sealed.job_dir``,
its ``--out``); its logs stay in the judge's runs folder; the folder is sealed
(``grading.sealed.seal``) before anything in it is read, and the run's expected outputs are
checked after the seal. The expensive runs are session-scoped fixtures, each launched at most
once and shared by the checks that read it; a run that did not finish cleanly makes every check
that needs it fail with the launcher's verdict and the culprit's log tail, never pass. The
2-rank balance probe (``probes/probe_balance.py``) runs the same way, with its inputs in a
tensor file; its expected values stay here (``probe_balance_spec.py``).

Every job folder is closed to the candidate once its job ends (``grading.sealed.end_job``): a
later run that must read an earlier one's output (the resumed launch's checkpoint, the export
that ``load_export`` reloads) is handed a copy in a job folder of its own (``sealed.give``),
never the earlier run's path.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import moe_reference as R
import probe_balance_spec as P
import pytest
import torch
from oracle_util import schema_params

from grading import probe, sealed
from grading.compare import as_float
from grading.launch import launch
from grading.run import run_command

MOE_FLAGS = ["--moe-experts", "4", "--moe-top-k", "2", "--moe-capacity-factor", "1.25",
             "--moe-aux-weight", "0.01"]
# Wall limits per run: qualification measured every 200-step run under 41 s on 2 shared cores;
# the runs here are shorter. A hung collective is cut by the launcher, not by the PG timeout.
SHORT_RUN_TIMEOUT_S = 120.0
QUALITY_RUN_TIMEOUT_S = 180.0  # packet.yaml candidate_timeout_s
LOG_TAIL_CHARS = 2500


def workdir() -> Path:
    return Path(os.environ["GRADING_WORKDIR"])


def baseline_dir() -> Path | None:
    value = os.environ.get("GRADING_BASELINE")
    return Path(value) if value else None


def run_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(root)
    env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def _tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return text if len(text) <= LOG_TAIL_CHARS else "[...]\n" + text[-LOG_TAIL_CHARS:]


@dataclass
class Run:
    """One training run (or probe) and how it ended."""

    name: str
    config: str
    out: Path
    outcome: str  # "ok", "crash" or "hang"
    detail: str
    duration_s: float
    culprit_logs: list[Path] = field(default_factory=list)

    def require(self) -> Run:
        """Fail the calling check (with the culprit's log) unless the run finished cleanly."""
        if self.outcome != "ok":
            # The grader reads this junit property: a check whose run crashed or hung is a
            # crash/hang contract (rank named in the message), never a plain fail.
            if _CURRENT_TEST:
                _CURRENT_TEST[-1].user_properties.append(
                    ("grading_outcome", "hang" if self.outcome == "hang" else "crash"))
            logs = "\n".join(f"--- {p.name} ---\n{_tail(p)}" for p in self.culprit_logs)
            pytest.fail(f"run {self.name} ({self.config}) ended as {self.outcome}: "
                        f"{self.detail}\n{logs}", pytrace=False)
        return self

    def final_state(self) -> dict[str, Any]:
        self.require()
        return torch.load(self.out / "final_state.pt", map_location="cpu", weights_only=True)

    def metrics(self) -> list[dict[str, Any]]:
        self.require()
        text = (self.out / "metrics.jsonl").read_text()
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def summary(self) -> dict[str, Any]:
        self.require()
        return json.loads((self.out / "summary.json").read_text())

    def reported_heldout(self) -> float:
        """What the run's summary.json says its held-out loss is (NaN when it says nothing
        usable): evidence only, the judge measures the weights itself."""
        try:
            summary = self.summary()
        except (OSError, ValueError):
            return float("nan")
        return as_float(summary.get("heldout_loss")) if isinstance(summary, dict) \
            else float("nan")

    def weights(self, cfg: R.Cfg) -> tuple[dict[str, torch.Tensor] | None, str]:
        """The run's final model weights keyed by the export schema, as plain fp64 tensors:
        ``final_state.pt``'s model when its keys are the schema's, else the run's export (a
        model that names its modules otherwise still exports the schema); None and why when
        neither holds them."""
        state = self.final_state()
        params, why = schema_params(state.get("model") if isinstance(state, dict) else None, cfg)
        if params is not None:
            return params, "final_state.pt"
        export = self.out / "model.pt"
        if export.is_file():
            blob = torch.load(export, map_location="cpu", weights_only=True)
            sd = blob.get("state_dict") if isinstance(blob, dict) else None
            params, why_export = schema_params(sd, cfg)
            if params is not None:
                return params, "the export (final_state.pt: " + why + ")"
            why += f"; export: {why_export}"
        return None, why

    def evidence(self) -> str:
        return f"{self.name}: {self.config}, {self.outcome}, {self.duration_s:.1f} s"


def run_script(name: str, config: str, argv: list[str], out: Path, logs: Path, *, root: Path,
               nproc: int, timeout_s: float,
               expected: Callable[[int], list[Path]] | None = None) -> Run:
    """``argv`` as one process (cpu-1) or as ``nproc`` ranks under the grading launcher, as the
    candidate uid; ``out`` (a job folder) is sealed before its expected outputs are looked at.
    The rank logs go to ``logs/NAME.logs/``."""
    log_dir = logs / f"{name}.logs"
    env = run_env(root)
    if nproc == 1:
        log = log_dir / "rank0.log"
        res = run_command(argv, cwd=root, env=env, timeout_s=timeout_s, log_path=log)
        sealed.seal(out)
        missing = [p for p in (expected(0) if expected else []) if not p.is_file()]
        if res.timed_out:
            outcome, detail = "hang", f"still running at the wall limit of {timeout_s:g} s"
        elif res.exit_code != 0:
            how = f"signal {res.signal}" if res.signal else f"exit code {res.exit_code}"
            outcome, detail = "crash", f"the process failed ({how})"
        elif missing:
            outcome, detail = "crash", f"exited 0 but left no {missing[0]}"
        else:
            outcome, detail = "ok", "finished"
        return Run(name, config, out, outcome, detail, res.duration_s,
                   [] if outcome == "ok" else [log])
    res2 = launch(argv, nproc=nproc, cwd=root, env=env, timeout_s=timeout_s, log_dir=log_dir,
                  expected_outputs=expected)
    sealed.seal(out)
    outcome, detail = res2.outcome, res2.detail
    culprits = [Path(res2.ranks[r].log) for r in res2.culprit_ranks]
    if outcome == "ok" and expected is not None:
        # The seal removed links and special files: what the ranks left must still be there.
        for rank in range(nproc):
            missing = [p for p in expected(rank) if not p.is_file()]
            if missing:
                outcome, detail = "crash", (f"rank(s) [{rank}] exited 0 but left no output "
                                            f"({missing[0]})")
                culprits = [Path(res2.ranks[rank].log)]
                break
    if outcome != "ok" and not culprits:
        culprits = [Path(r.log) for r in res2.ranks]
    return Run(name, config, out, outcome, detail, res2.duration_s, culprits)


def train(name: str, config: str, args: list[str], logs: Path, *, root: Path | None = None,
          out: Path | None = None, timeout_s: float = SHORT_RUN_TIMEOUT_S) -> Run:
    """The candidate's (or the baseline's) train.py under ``config``, ``--out`` a job folder
    (``out``, else a new one)."""
    root = root or workdir()
    out = out or sealed.job_dir(name)
    argv = [sys.executable, "train.py", "--config", config, *args, "--out", str(out)]
    nproc = 1 if config == "cpu-1" else 2
    return run_script(name, config, argv, out, logs, root=root, nproc=nproc,
                      timeout_s=timeout_s,
                      expected=lambda rank: [out / "final_state.pt"] if rank == 0 else [])


# ---------------------------------------------------------------------------------------------
# The shared runs (each launched once per pytest session, on first use)

EQ_STEPS = 30  # DDP vs one process and FSDP vs DDP: fp64, 30 steps of the fixed settings
RESUME_STEPS, RESUME_AT = 20, 10
STARVE_STEPS = 4
STARVE_FLAGS = ["--moe-experts", "16", "--moe-top-k", "1", "--moe-capacity-factor", "16",
                "--moe-aux-weight", "0", "--ffn-hidden", "32", "--global-batch", "2",
                "--dtype", "fp64", "--seed", "0"]
STARVE_CFG = R.Cfg(experts=16, top_k=1, capacity_factor=16.0, aux_weight=0.0, ffn_hidden=32)
# The objective replay: TASK.md's default MoE settings with a large aux weight, so the balance
# term moves the update far beyond the replay's tolerance (measured in test_moe_training.py).
OBJECTIVE_STEPS = 3
OBJECTIVE_AUX_WEIGHT = 1.0
OBJECTIVE_FLAGS = ["--moe-experts", "4", "--moe-top-k", "2", "--moe-capacity-factor", "1.25",
                   "--moe-aux-weight", str(OBJECTIVE_AUX_WEIGHT), "--global-batch", "16",
                   "--dtype", "fp64", "--seed", "0"]
OBJECTIVE_CFG = R.Cfg(experts=4, top_k=2, capacity_factor=1.25, aux_weight=OBJECTIVE_AUX_WEIGHT)
OBJECTIVE_CONFIGS = ("cpu-1", "gloo-ddp-2", "gloo-fsdp-2")
# The same with dropout: the judge then replays each rank's masks (oracle_util's
# replay_training_with_dropout), so a random number drawn in training shows.
OBJECTIVE_DROPOUT = 0.1
# The same replay with every MoE option away from TASK.md's default at once (3 experts, top-1,
# capacity factor 0.5 so that about half the assignments are dropped, aux weight 0.1): a trainer
# or layer that takes another path, or draws another random number, only when an option is set
# leaves the judge's replay there while it matches it at the defaults.
OPTIONS_FLAGS = ["--moe-experts", "3", "--moe-top-k", "1", "--moe-capacity-factor", "0.5",
                 "--moe-aux-weight", "0.1", "--global-batch", "16", "--dtype", "fp64",
                 "--seed", "0"]
OPTIONS_CFG = R.Cfg(experts=3, top_k=1, capacity_factor=0.5, aux_weight=0.1)


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The judge's folder for run logs (the runs' outputs go to job folders)."""
    return tmp_path_factory.mktemp("runs")


def _eq_args(steps: int = EQ_STEPS) -> list[str]:
    return ["--steps", str(steps), "--seed", "0", "--global-batch", "16", "--dtype", "fp64",
            *MOE_FLAGS]


def _with_export(name: str, config: str, args: list[str], logs: Path, **kw: Any) -> Run:
    """A run that also exports its final model (``OUT/model.pt``, in its own job folder)."""
    out = sealed.job_dir(name)
    return train(name, config, [*args, "--export", str(out / "model.pt")], logs, out=out, **kw)


@pytest.fixture(scope="session")
def cpu1_fp64(runs_dir: Path) -> Run:
    return _with_export("cpu1-fp64", "cpu-1", _eq_args(), runs_dir)


@pytest.fixture(scope="session")
def ddp_fp64(runs_dir: Path) -> Run:
    return _with_export("ddp-fp64", "gloo-ddp-2", _eq_args(), runs_dir)


@pytest.fixture(scope="session")
def fsdp_fp64(runs_dir: Path) -> Run:
    return _with_export("fsdp-fp64", "gloo-fsdp-2", _eq_args(), runs_dir)


def _resume_args(steps: int, out: Path) -> list[str]:
    # Dropout makes the per-rank RNG streams matter: a rank resumed with the wrong generator
    # draws different masks and the run diverges.
    return ["--steps", str(steps), "--seed", "0", "--global-batch", "16", "--dtype", "fp32",
            "--dropout", "0.1", *MOE_FLAGS, "--ckpt", str(out / "ckpt"),
            "--save-every", str(RESUME_AT), "--export", str(out / "model.pt")]


@dataclass
class ResumeRuns:
    full: Run  # the uninterrupted launch, RESUME_STEPS steps
    first: Run | None  # a launch that stops at RESUME_AT and writes the checkpoint
    resumed: Run | None  # a fresh launch resumed from a copy of that checkpoint


@pytest.fixture(scope="session")
def resume_runs(runs_dir: Path) -> ResumeRuns:
    """The uninterrupted run, and a run resumed from a checkpoint that a *separate* launch
    (the same command with ``--steps RESUME_AT``) wrote: that launch never computed the steps
    after RESUME_AT, so the resumed launch cannot end right by copying anything it was handed.
    With the default warmup of 10 steps (= RESUME_AT) the schedule of steps 0..RESUME_AT does not
    depend on the total, so that checkpoint is the uninterrupted run's own at RESUME_AT."""
    full_out = sealed.job_dir("ddp-full")
    full = train("ddp-full", "gloo-ddp-2", _resume_args(RESUME_STEPS, full_out), runs_dir,
                 out=full_out)
    if full.outcome != "ok":
        return ResumeRuns(full, None, None)
    first_out = sealed.job_dir("ddp-first")
    first = train("ddp-first", "gloo-ddp-2", _resume_args(RESUME_AT, first_out), runs_dir,
                  out=first_out)
    ckpt = first_out / "ckpt" / f"step_{RESUME_AT}"
    if first.outcome != "ok" or not ckpt.is_dir():
        return ResumeRuns(full, first, None)
    # The first launch's folder is closed now: the resumed launch gets a copy of the checkpoint
    # in a job folder of its own, and nothing else of that launch.
    given = sealed.give(ckpt, "ddp-resume-ckpt")
    resumed_out = sealed.job_dir("ddp-resumed")
    resumed = train("ddp-resumed", "gloo-ddp-2",
                    [*_resume_args(RESUME_STEPS, resumed_out), "--resume", str(given)],
                    runs_dir, out=resumed_out)
    return ResumeRuns(full, first, resumed)


def _resumed_equivalence_run(name: str, full: Run, runs_dir: Path) -> ResumeRuns:
    """Resume on the configuration of ``full`` (one of the fp64 equivalence runs, EQ_STEPS
    steps, no dropout): a separate launch of the same command with ``--steps RESUME_AT`` writes
    the checkpoint (during the warmup the schedule does not depend on the total, so it is
    ``full``'s own at RESUME_AT), and a fresh launch of ``full``'s command resumes from a copy
    of it. The equivalence run is reused as the uninterrupted run, so resume costs two short
    launches per configuration."""
    if full.outcome != "ok":
        return ResumeRuns(full, None, None)
    first_out = sealed.job_dir(f"{name}-first")
    first = train(f"{name}-first", full.config,
                  [*_eq_args(RESUME_AT), "--ckpt", str(first_out / "ckpt"),
                   "--save-every", str(RESUME_AT)], runs_dir, out=first_out)
    ckpt = first_out / "ckpt" / f"step_{RESUME_AT}"
    if first.outcome != "ok" or not ckpt.is_dir():
        return ResumeRuns(full, first, None)
    given = sealed.give(ckpt, f"{name}-resume-ckpt")
    resumed = train(f"{name}-resumed", full.config, [*_eq_args(), "--resume", str(given)],
                    runs_dir)
    return ResumeRuns(full, first, resumed)


@pytest.fixture(scope="session")
def fsdp_resume_runs(runs_dir: Path, fsdp_fp64: Run) -> ResumeRuns:
    """gloo-fsdp-2 resumed at RESUME_AT against the fp64 FSDP equivalence run (sharded
    checkpoint: each rank saves and restores its own shards of parameters and Adam state)."""
    return _resumed_equivalence_run("fsdp-resume", fsdp_fp64, runs_dir)


@pytest.fixture(scope="session")
def starve_fsdp(runs_dir: Path) -> Run:
    """The starvation command under gloo-fsdp-2 (FSDP2 reduce-scatters each block's gradients
    as one group: an expert idle on one rank must still contribute its zero gradient)."""
    return train("starve-fsdp", "gloo-fsdp-2", [*STARVE_FLAGS, "--steps", str(STARVE_STEPS)],
                 runs_dir)


def _replay_runs(prefix: str, flags: list[str], runs_dir: Path
                 ) -> tuple[dict[str, Run], Run | None]:
    """OBJECTIVE_STEPS steps of ``flags`` on every CPU configuration, and (when cpu-1 finished)
    the trainer's initial model: the same cpu-1 command with ``--steps 0``."""
    runs = {config: _with_export(f"{prefix}-{config}", config,
                                 [*flags, "--steps", str(OBJECTIVE_STEPS)], runs_dir)
            for config in OBJECTIVE_CONFIGS}
    if runs["cpu-1"].outcome != "ok":
        return runs, None
    return runs, _with_export(f"{prefix}-init", "cpu-1", [*flags, "--steps", "0"], runs_dir)


@pytest.fixture(scope="session")
def objective_runs(runs_dir: Path) -> tuple[dict[str, Run], Run | None]:
    """The objective replay's runs: TASK.md's default MoE settings, aux weight 1.0."""
    return _replay_runs("objective", OBJECTIVE_FLAGS, runs_dir)


@pytest.fixture(scope="session")
def dropout_runs(runs_dir: Path) -> tuple[dict[str, Run], Run | None]:
    """The objective replay's command with dropout (``OBJECTIVE_DROPOUT``)."""
    return _replay_runs("dropout", [*OBJECTIVE_FLAGS, "--dropout", str(OBJECTIVE_DROPOUT)],
                        runs_dir)


@pytest.fixture(scope="session")
def option_runs(runs_dir: Path) -> tuple[dict[str, Run], Run | None]:
    """The same with every MoE option away from its default (``OPTIONS_FLAGS``)."""
    return _replay_runs("options", OPTIONS_FLAGS, runs_dir)


@pytest.fixture(scope="session")
def starvation_runs(runs_dir: Path) -> tuple[Run, Run, Run | None]:
    """cpu-1 and gloo-ddp-2 for STARVE_STEPS steps, and (when cpu-1 finished) the trainer's
    initial model: the same cpu-1 command with ``--steps 0``."""
    one = _with_export("starve-cpu1", "cpu-1", [*STARVE_FLAGS, "--steps", str(STARVE_STEPS)],
                       runs_dir)
    ddp = train("starve-ddp", "gloo-ddp-2", [*STARVE_FLAGS, "--steps", str(STARVE_STEPS)],
                runs_dir)
    if one.outcome != "ok":
        return one, ddp, None
    init = _with_export("starve-init", "cpu-1", [*STARVE_FLAGS, "--steps", "0"], runs_dir)
    return one, ddp, init


@pytest.fixture(scope="session")
def quality_run(runs_dir: Path) -> Run:
    return _with_export("quality-cpu1", "cpu-1",
                        ["--steps", "200", "--seed", "0", "--global-batch", "16", *MOE_FLAGS],
                        runs_dir, timeout_s=QUALITY_RUN_TIMEOUT_S)


@pytest.fixture(scope="session")
def balance_probe(runs_dir: Path) -> Run:
    out = sealed.job_dir("balance-probe")
    inputs = P.write_inputs(out / "inputs.pt")
    argv = [sys.executable, str(probe.probes_dir() / "probe_balance.py"), str(out), str(inputs)]
    return run_script("balance-probe", "gloo-ddp-2", argv, out, runs_dir, root=workdir(),
                      nproc=2, timeout_s=SHORT_RUN_TIMEOUT_S,
                      expected=lambda rank: [out / f"rank{rank}.json"])


# ---------------------------------------------------------------------------------------------
# The dense path (E = 0) against the pristine baseline, as the candidate uid in job folders.
# TASK.md: with E = 0 the model, its state dict, its export, its losses and its parameters after
# training are bit for bit what the current code produces, whatever the other options; "without
# breaking anything that works today" also covers the defaults (train.py's flags and the config
# dataclasses), the printed summary, and the guards that refuse invalid settings and a
# checkpoint of another run.

# Every existing option away from its default at once, dropout included: a path the feature
# changed that runs only at another value shows, and with dropout the per-rank RNG streams are
# in play, so a random draw added to training (or a rank's stream seeded otherwise) moves the
# masks and the run leaves the baseline's.
DENSE_OPTIONS = ["--seed", "3", "--global-batch", "8", "--lr", "1e-3", "--weight-decay", "0.05",
                 "--warmup-steps", "2", "--dtype", "fp64", "--n-layers", "3", "--d-model", "32",
                 "--ffn-hidden", "48", "--dropout", "0.1"]
DENSE_OPTIONS_STEPS, DENSE_OPTIONS_RESUME_AT = 6, 3
DENSE_OPTIONS_CONFIGS = ("cpu-1", "gloo-ddp-2", "gloo-fsdp-2")
# The Python API at its defaults: TrainConfig() and ModelConfig() but for the output folder.
API_DEFAULTS_SCRIPT = ("import sys\nfrom pathlib import Path\n"
                       "from tinylm.config import TrainConfig\nfrom tinylm.trainer import train\n"
                       "train(TrainConfig(out=Path(sys.argv[1])))\n")
# Settings the baseline refuses (each alone, so that every condition of a guard is exercised).
REFUSED_FLAGS = {
    "--steps -1": ["--steps", "-1"],
    "--global-batch 0": ["--global-batch", "0"],
    "--save-every -1 (with --ckpt)": ["--save-every", "-1", "--ckpt", "{out}/ckpt"],
    "--save-every 2 without --ckpt": ["--save-every", "2"],
    "--dropout 1.0": ["--dropout", "1.0"],
}


@dataclass
class DensePair:
    """The same command on the pristine baseline and on the graded tree."""

    baseline: Run | None  # None: GRADING_BASELINE is not set
    candidate: Run


@dataclass
class DenseOptionRuns:
    full: DensePair  # DENSE_OPTIONS_STEPS steps, a checkpoint at DENSE_OPTIONS_RESUME_AT
    resumed: DensePair | None  # each tree resumed from a copy of its own checkpoint
    checkpoints: dict[str, Path]  # "baseline"/"candidate": the checkpoint each run wrote


def _dense_pair(name: str, run: Callable[[str, Path | None], Run]) -> DensePair:
    base = baseline_dir()
    return DensePair(run(f"baseline-{name}", base) if base is not None else None,
                     run(f"candidate-{name}", None))


def dense_option_args(out: Path, steps: int = DENSE_OPTIONS_STEPS) -> list[str]:
    return ["--steps", str(steps), *DENSE_OPTIONS, "--ckpt", str(out / "ckpt"),
            "--save-every", str(DENSE_OPTIONS_RESUME_AT), "--export", str(out / "model.pt")]


def _dense_options(config: str, runs_dir: Path) -> DenseOptionRuns:
    outs: dict[str, Path] = {}

    def full(name: str, root: Path | None) -> Run:
        out = outs[name] = sealed.job_dir(name)
        return train(name, config, dense_option_args(out), runs_dir, root=root, out=out)

    pair = _dense_pair(f"dense-options-{config}", full)
    ckpts = {side: out / "ckpt" / f"step_{DENSE_OPTIONS_RESUME_AT}"
             for side, out in (("baseline", outs.get(f"baseline-dense-options-{config}")),
                               ("candidate", outs[f"candidate-dense-options-{config}"]))
             if out is not None}
    runs = [r for r in (pair.baseline, pair.candidate) if r is not None]
    if any(r.outcome != "ok" for r in runs) or not all(p.is_dir() for p in ckpts.values()):
        return DenseOptionRuns(pair, None, ckpts)

    def resumed(name: str, root: Path | None) -> Run:
        # Each tree resumes from a copy of its own checkpoint, in a fresh launch.
        given = sealed.give(ckpts["baseline" if root is not None else "candidate"],
                            f"{name}-ckpt")
        out = sealed.job_dir(name)
        return train(name, config, [*dense_option_args(out), "--resume", str(given)], runs_dir,
                     root=root, out=out)

    return DenseOptionRuns(pair, _dense_pair(f"dense-resumed-{config}", resumed), ckpts)


@pytest.fixture(scope="session")
def dense_option_runs(runs_dir: Path) -> dict[str, DenseOptionRuns]:
    return {config: _dense_options(config, runs_dir) for config in DENSE_OPTIONS_CONFIGS}


@pytest.fixture(scope="session")
def dense_default_runs(runs_dir: Path) -> dict[str, DensePair]:
    """train.py with no flag but ``--export`` (no --config, no --out: rank 0 writes no run
    folder then), and the API's ``train(TrainConfig(out=...))``; each on both trees."""

    def cli(name: str, root: Path | None) -> Run:
        out = sealed.job_dir(name)
        argv = [sys.executable, "train.py", "--export", str(out / "model.pt")]
        return run_script(name, "cpu-1", argv, out, runs_dir, root=root or workdir(), nproc=1,
                          timeout_s=SHORT_RUN_TIMEOUT_S, expected=lambda _r: [out / "model.pt"])

    def api(name: str, root: Path | None) -> Run:
        out = sealed.job_dir(name)
        argv = [sys.executable, "-c", API_DEFAULTS_SCRIPT, str(out)]
        return run_script(name, "cpu-1", argv, out, runs_dir, root=root or workdir(), nproc=1,
                          timeout_s=SHORT_RUN_TIMEOUT_S,
                          expected=lambda _r: [out / "final_state.pt"])

    return {"cli": _dense_pair("dense-defaults-cli", cli),
            "api": _dense_pair("dense-defaults-api", api)}


def run_log(run: Run, runs_dir: Path) -> str:
    """A one-process run's own log (stdout and stderr), as the judge kept it."""
    try:
        return (runs_dir / f"{run.name}.logs" / "rank0.log").read_text(errors="replace")
    except OSError:
        return ""


# The test being run, so Run.require can tag it (record_property is per-test, runs are shared).
_CURRENT_TEST: list[pytest.Item] = []


@pytest.fixture(autouse=True)
def _remember_current_test(request: pytest.FixtureRequest) -> Iterator[None]:
    _CURRENT_TEST.append(request.node)
    yield
    _CURRENT_TEST.pop()
