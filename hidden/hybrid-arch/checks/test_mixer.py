# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""Hidden checks of the mixer feature itself, in one process (no training runs).

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

The mixer's design is the candidate's choice (a recurrence or a causal convolution), so the
references here do not re-implement one particular mixer. They are independent of it:
- causality: a brute-force re-computation of every position from its own prefix (the
  definition of a causal model: logits at t depend on tokens 0..t only);
- mixing: a metamorphic perturbation (change one earlier token in an all-mixer model);
- incremental decoding: the full forward (differential, chunked vs whole);
- export: TASK.md's operator allow-list, copied into these checks.

These run in the judge's pytest, which never imports candidate code: the candidate's model is
built and run by ``probes/hybrid_probe.py`` in a sealed candidate process (``grading.probe``),
which returns raw observations (logits, gradients, key lists, the exceptions raised, exported
programs saved into a job folder); the token inputs, every comparison and every tolerance are
here. A candidate whose code raises fails the check; one whose probe process crashes or hangs
makes the contract crash/hang.
"""

from __future__ import annotations

import json
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import graph_exec
import judge_replay
import pytest
import source_facts
import torch
from conftest import launch_train
from oracle_lib import (
    ALLOWED_EXPORT_OPS,
    CUDA_CONFIGURATIONS,
    PROBE,
    SCALED_STD,
    check_key_schema,
    cli_exit_code,
    exported_graph,
    gpus,
    kept_environment,
    tokens,
    tree_max_diff,
    workdir,
)
from run_export import check_run_export

from grading import probe, sealed
from grading.compare import as_float, as_tensor, bitwise_equal, max_abs_diff, within, worst
from grading.observation import CANDIDATE_REPORT, JUDGE, OUTSIDE, observed_in

VOCAB, SEQ = 64, 32

# Measured (QUALIFICATION.md, reference AMAM): cached vs full <= 2.9e-6 (fp32), <= 4.9e-15
# (fp64) on O(1) logits; the packet declares 1e-4 and 1e-10.
DECODE_TOL = {torch.float32: 1e-4, torch.float64: 1e-10}
# Recomputing a position from its prefix runs other matmul shapes: fp64 reassociation only
# (~1e-15); a position that sees a later token moves by O(0.1-1).
PREFIX_TOL_FP64 = 1e-10
# The packet's export-vs-eager tolerance (measured 0 for the reference, the exported side run
# by the judge from the saved archive).
EXPORT_TOL = 1e-5
# train.py --export's weights vs its final_state.pt (both fp32 copies of the final model: 0).
EXPORT_WEIGHTS_TOL = 1e-6
# A mixer that carries information across positions moves later logits by O(0.1-1) when an
# earlier token changes (measured for the reference: see record); a per-token MLP by exactly 0.
MIXING_MIN_EFFECT = 1e-3


@observed_in(OUTSIDE, CANDIDATE_REPORT,
             reports="layer counts, what bad patterns raised, the state dicts' keys and values, "
                     "and the cache's layout, all observed in the probe's process",
             corroborated_by="train.py, the entry point that parses the same strings, exits "
                             "non-zero on the bad patterns and its --layer-pattern MAAM run "
                             "ends with the weights of that stack (keys the judge reads)")
def test_layer_pattern_parsing(record_property: Any) -> None:
    """ModelArgs.layer_pattern: None and "A"*n are today's model bit for bit, "M" layers are
    mixer blocks with attention keys gone, bad patterns raise ValueError. Seen from outside too:
    train.py refuses the bad patterns (exit status) and a good one trains its stack (the final
    weights' keys)."""
    record_property("oracle", "reference")
    record_property("configurations", "cpu-1")
    record_property("tolerance", "0 (bitwise) for None vs 'AAAA'; exact key sets")
    record_property("why", "TASK.md: None means all A, the all-A model has exactly today's "
                    "parameters, keys and initial values; key schema from the baseline")
    good, bad, schema = ("AMAM", "MMMM", "MAAM", "AAAA"), ("AMA", "AMAMA", "AXAM", "amam",
                                                          "A M ", ""), ("AMAM", "MMMM", "MAAM")
    _patterns_from_outside(record_property)
    seen = probe.call(PROBE, "pattern_parsing", good=list(good), short="MA", bad=list(bad),
                      all_a="AAAA", schema=list(schema), seed=0)
    for pattern in good:
        assert seen["n_layers"][pattern] == 4, (pattern, seen["n_layers"][pattern])
    assert seen["short_n_layers"] == 2, seen["short_n_layers"]
    default = seen["default_pattern"]
    assert default["is_none"] or default["str"] == "AAAA", default["repr"]
    for pattern in bad:
        raised = seen["bad"][pattern]
        assert raised is not None, f"layer_pattern={pattern!r} was accepted"
        assert "builtins.ValueError" in raised, f"layer_pattern={pattern!r} raised {raised[0]}"

    # None and "AAAA": the same model, bit for bit (keys, order, initial values).
    none_sd, all_a_sd = seen["none_state"], seen["all_a_state"]
    assert list(none_sd) == list(all_a_sd)
    for key in none_sd:
        assert bitwise_equal(none_sd[key], all_a_sd[key]), key
    assert check_key_schema(none_sd, "AAAA") == []

    # The pattern decides each block: keys follow the schema, mixer layers are not attention.
    for pattern in schema:
        got = seen["schema"][pattern]
        problems = check_key_schema(got["keys"], pattern)
        assert problems == [], (pattern, problems)
        assert got["cache_len"] == 4
        for kind, is_kv, name in zip(pattern, got["cache_is_kv"], got["cache_types"],
                                     strict=True):
            if kind == "A":
                assert is_kv, name
    record_property("patterns_checked", "AMAM,MMMM,MAAM,AAAA")


# Patterns no ModelArgs may take, whatever the layer count (train.py sets n_layers from the
# pattern's length when --n-layers is not given, so length errors are test_cli's).
CLI_BAD_PATTERNS = ("AXAM", "amam", "A M ")
CLI_GOOD_PATTERN = "MAAM"


def _patterns_from_outside(record_property: Any) -> None:
    """The judge's observation, made before any report of the probe's is read: train.py exits
    non-zero on patterns that are not A/M strings, and a one-step --layer-pattern MAAM run ends
    with that stack's weights (their keys, read from its sealed final_state.pt)."""
    for pattern in CLI_BAD_PATTERNS:
        code = cli_exit_code(["--layer-pattern", pattern], f"pattern-{pattern.strip()}")
        record_property(f"cli_exit_code_{pattern!r}", code)
        assert code != 0, f"train.py --layer-pattern {pattern!r} was accepted"
    run = launch_train("pattern-maam", Path(tempfile.mkdtemp(prefix="pattern-maam-")),
                       ["--config", "cpu-1", "--layer-pattern", CLI_GOOD_PATTERN, "--steps", "1"],
                       nproc=1)
    run.require(record_property)
    final = run.final().get("model")
    assert isinstance(final, dict), "final_state.pt holds no model state dict"
    problems = check_key_schema(final, CLI_GOOD_PATTERN)
    assert problems == [], (f"train.py --layer-pattern {CLI_GOOD_PATTERN} ended with weights "
                            f"of another stack: {problems}")


@observed_in(JUDGE, CANDIDATE_REPORT,
             reports="the full forward's logits and each prefix's, both computed in the probe's "
                     "process",
             corroborated_by="the judge's own test on the candidate's seeded AMAM program (the "
                             "graph its training replay runs), with weights and tokens it "
                             "draws: no logit moves when later tokens change (for MMMM with "
                             "the attention blocks made the identity)")
@pytest.mark.parametrize("pattern", ["MMMM", "AMAM"])
def test_mixer_is_causal(pattern: str, programs: Any, record_property: Any) -> None:
    """Every position's logits equal a brute-force recomputation from that position's prefix
    alone (fp64, 1e-10), for all-mixer and hybrid stacks (by their keys no mixer layer is an
    attention block); and, on the judge's side, the candidate's AMAM program's logits up to
    each cut do not move when the tokens after it change (fp64, 1e-10)."""
    record_property("oracle", "reference")
    record_property("configurations", "cpu-1")
    record_property("tolerance", PREFIX_TOL_FP64)
    record_property("why", "causal means logits at t depend on tokens 0..t only; recomputing "
                    "from the prefix differs by fp64 reassociation (~1e-15, like the measured "
                    "cached-decoding 4.9e-15); a peek at t+1 moves logits by O(0.1)")
    # The judge's observation first, so a report of the candidate's cannot hide its outcome.
    _judge_causality(programs.get(JUDGE_PROGRAM), JUDGE_STACK, record_property,
                     mixers_only=pattern == "MMMM")
    x = tokens(batch=3, seqlen=32)
    seen = probe.call(PROBE, "prefix_logits", pattern=pattern, dtype="float64", std=SCALED_STD,
                      seed=0, tokens=x)
    _require_stack(seen.get("keys"), pattern)
    full = _logits(seen["full"], (x.shape[0], x.shape[1], VOCAB))
    prefixes = seen["prefix"]
    assert isinstance(prefixes, list) and len(prefixes) == x.shape[1]
    diffs = [max_abs_diff(prefix, full[:, t]) for t, prefix in enumerate(prefixes)]
    err, where = worst(diffs), _worst_index(diffs)
    record_property("max_abs_prefix_vs_full", err)
    record_property("worst_position", where)
    record_property("logit_scale", float(full.abs().max()))
    assert as_float(full.abs().max()) > 1.0
    assert within(err, PREFIX_TOL_FP64), (
        f"position {where} differs from its recomputation from the prefix by {err}")


def _judge_causality(program: graph_exec.Program, stack: JudgedStack, record_property: Any,
                     *, mixers_only: bool) -> None:
    """The judge's own causality test on one of the candidate's seeded programs (with
    ``mixers_only``, its attention blocks the identity): no report of a candidate process is
    involved."""
    state = _judge_state(program, stack, mixers_only=mixers_only)
    x = stack.tokens(seed=11)
    full = _run_program(program, state, x)
    assert as_float(full.abs().max()) > 1.0, "logits too small for a meaningful comparison"
    leaks = {}
    for cut in stack.cuts:
        later = x.clone()
        later[:, cut + 1:] = (later[:, cut + 1:] + 29) % stack.vocab
        moved = _run_program(program, state, later)
        leaks[cut] = max_abs_diff(moved[:, :cut + 1], full[:, :cut + 1])
        record_property(f"judge_program_leak_up_to_{cut}", leaks[cut])
        # The change is seen after the cut: the comparison is not between two idle outputs.
        assert as_float(max_abs_diff(moved[:, cut + 1:], full[:, cut + 1:])) > MIXING_MIN_EFFECT
    bad = {cut: leak for cut, leak in leaks.items() if not within(leak, PREFIX_TOL_FP64)}
    assert not bad, (f"the {stack.name} program (run by the judge"
                     f"{', attention blocks as the identity' if mixers_only else ''}): "
                     f"logits up to these positions move when later tokens change: {bad}")


@observed_in(JUDGE, CANDIDATE_REPORT,
             reports="logits of two inputs and the mixer parameters' gradients, computed in the "
                     "probe's process",
             corroborated_by="the judge runs the candidate's seeded AMAM program (the graph its "
                             "training replay runs) with the attention blocks made the identity "
                             "and weights it draws: a changed token moves later logits; and "
                             "takes the pristine LM loss's gradients through it itself")
def test_mixer_mixes_positions_and_trains(programs: Any, record_property: Any) -> None:
    """An all-mixer model carries an earlier token to later positions (not a per-token MLP), and
    every mixer-layer parameter gets a non-zero gradient (by their keys no mixer layer of either
    model is an attention block). The judge sees both on the candidate's AMAM program too."""
    record_property("oracle", "metamorphic")
    record_property("configurations", "cpu-1")
    record_property("tolerance", f"effect > {MIXING_MIN_EFFECT}; grad norm > 0")
    record_property("why", "changing token s in a model with no attention changes logits at "
                    "positions > s by O(0.1-1) when the mixer mixes and by exactly 0 when it "
                    "does not (per-token MLP); 1e-3 separates the two by orders")
    # The judge's observation first, so a report of the candidate's cannot hide its outcome.
    _judge_mixes_and_trains(programs.get(JUDGE_PROGRAM), record_property)
    x = tokens(batch=2, seqlen=32)
    s = 10
    y = x.clone()
    y[:, s] = (y[:, s] + 17) % 64
    seen = probe.call(PROBE, "perturbed_logits", pattern="MM", dtype="float64", std=SCALED_STD,
                      seed=0, x=x, y=y)
    _require_stack(seen.get("keys"), "MM")
    a = _logits(seen["x"], (x.shape[0], x.shape[1], VOCAB))
    b = _logits(seen["y"], (y.shape[0], y.shape[1], VOCAB))
    before = max_abs_diff(a[:, :s], b[:, :s])
    after = max_abs_diff(a[:, s + 1:], b[:, s + 1:])
    next_pos = max_abs_diff(a[:, s + 1], b[:, s + 1])
    record_property("effect_before_s", before)
    record_property("effect_after_s", after)
    record_property("effect_at_s_plus_1", next_pos)
    # (Causality is its own contract, test_mixer_is_causal; here only the mixing is judged.)
    assert as_float(after) > MIXING_MIN_EFFECT, (
        f"later positions changed by only {after}: no mixing")

    # Trainable: every parameter of a mixer layer gets a gradient from the LM loss.
    batch = tokens(batch=4, seqlen=32, seed=5)
    grads = probe.call(PROBE, "lm_gradients", pattern="AMAM", std=SCALED_STD, seed=0,
                       batch=batch)
    _require_stack(grads.get("keys"), "AMAM")
    mixer_params = [n for n in grads["requires_grad"] if n.startswith(("layers.1.", "layers.3."))]
    assert mixer_params, "mixer layers have no parameters"
    dead = [n for n in mixer_params
            if grads["requires_grad"][n] is not True or not _live(grads["grad"].get(n))]
    record_property("mixer_params", len(mixer_params))
    assert not dead, f"mixer parameters without a gradient: {dead}"


def _judge_mixing(program: graph_exec.Program, stack: JudgedStack, record_property: Any) -> None:
    """With the program's attention blocks the identity (the judge's weights), changing token
    s moves the logits after s: its mixer blocks carry tokens forward."""
    state = _judge_state(program, stack, mixers_only=True)
    x = stack.tokens(seed=12)
    s = 10
    y = x.clone()
    y[:, s] = (y[:, s] + 17) % stack.vocab
    a, b = _run_program(program, state, x), _run_program(program, state, y)
    after = max_abs_diff(a[:, s + 1:], b[:, s + 1:])
    record_property("judge_program_effect_after_s", after)
    assert as_float(after) > MIXING_MIN_EFFECT, (
        f"the {stack.name} program with identity attention blocks (run by the judge): later "
        f"positions changed by only {after}: its mixer blocks do not mix positions")


def _judge_mixes_and_trains(program: graph_exec.Program, record_property: Any) -> None:
    """The judge's side of the check, on the candidate's seeded AMAM program: with its attention
    blocks the identity, changing token s moves the logits after s; and the pristine LM loss on
    a training batch gives every mixer-layer parameter of the program a non-zero gradient
    (autograd in the judge's process, on the program's own initial weights)."""
    _judge_mixing(program, JUDGE_STACK, record_property)
    mixers = [k for k in program.parameter_keys if k.startswith(JUDGE_STACK.mixer_prefixes)]
    assert mixers, f"the {JUDGE_PROGRAM} program takes no parameter of its mixer layers"
    init = graph_exec.archive_state(program)
    params = {k: init[k].detach().clone().requires_grad_(k in mixers)
              for k in program.state_keys}
    trainer = judge_replay.pristine("trainer")
    with judge_replay.one_thread(), kept_environment():
        model = judge_replay._Model(program, params, judge_replay.GLOBAL_BATCH)
        trainer.lm_loss(model, judge_replay.global_batch(0)).backward()
    dead = [k for k in mixers if not _live(params[k].grad)]
    record_property("judge_program_mixer_params", len(mixers))
    assert not dead, (f"the {JUDGE_PROGRAM} program (the judge's autograd): mixer parameters "
                      f"without a gradient: {dead}")


@observed_in(CANDIDATE_REPORT,
             reports="the chunked decoding's and the full forward's logits, both computed in the "
                     "probe's process",
             uncorroborated="decoding with a cache is a path of the candidate's module that no "
                            "exported program holds")
def test_cached_decoding_matches_full_forward(record_property: Any) -> None:
    """Chunked decoding with init_cache (chunks 1, 2, 3, 5, 32 and an irregular schedule) equals
    the full forward for hybrid patterns (by their keys no mixer layer is an attention block):
    1e-4 in fp32, 1e-10 in fp64. Chunks of every length below the mixer's default kernel (4)
    follow one another, so a state update that is right only for one-token or kernel-sized
    chunks is read back."""
    record_property("oracle", "differential")
    record_property("configurations", "cpu-1")
    record_property("tolerance", "fp32 1e-4, fp64 1e-10 (max abs logit difference)")
    record_property("why", "measured for the reference <= 2.9e-6 (fp32) and <= 4.9e-15 (fp64) "
                    "on O(1) logits; a stale or missing cache is off by O(0.1)")
    x = tokens()
    dtypes = {"float32": torch.float32, "float64": torch.float64}
    seen = probe.call(PROBE, "cached_decoding", patterns=["AMAM", "MMMM", "MAAM"],
                      dtypes=list(dtypes), std=SCALED_STD, seed=0, tokens=x,
                      chunks=[1, 2, 3, 5, 32], schedule=[7, 1, 2, 13, 9])
    errors: dict[str, float] = {}
    for pattern in ("AMAM", "MMMM", "MAAM"):
        _require_stack(seen["keys"].get(pattern), pattern)
        for dtype_name, dtype in dtypes.items():
            tol = DECODE_TOL[dtype]
            results = dict(seen[f"{pattern}-{dtype_name}"])
            full = _logits(results.pop("full"), (x.shape[0], x.shape[1], VOCAB))
            assert as_float(full.abs().max()) > 1.0, "logits too small for a meaningful comparison"
            assert sorted(results) == sorted(["chunk1", "chunk2", "chunk3", "chunk5",
                                              "chunk32", "irregular"]), sorted(results)
            for name, got in results.items():
                diff = max_abs_diff(got, full)
                label = f"{pattern}-{str(dtype).removeprefix('torch.')}-{name}"
                errors[label] = diff
                assert within(diff, tol), f"{label}: cached vs full differ by {diff} (tol {tol})"
    for label, diff in errors.items():
        record_property(f"max_abs_{label}", diff)


@observed_in(JUDGE, OUTSIDE, CANDIDATE_REPORT,
             reports='the operators the candidate lists and its eager logits',
             corroborated_by="the judge walks and runs the saved programs itself (operators, "
                             "logits), and the CLI export's program against the judge's AMM "
                             "program")
def test_export_allowlisted_ops(cli_run: Any, programs: Any, record_property: Any) -> None:
    """torch.export of hybrid models succeeds, uses only TASK.md's allow-listed operators,
    matches eager within 1e-5 (the exported program run by the judge from the saved archive),
    and train.py --export writes a program whose keys follow the schema, whose weights are the
    run's final weights and which computes what the AMM model does with them (1e-5, both
    programs run by the judge)."""
    record_property("oracle", "reference")
    record_property("configurations", "cpu-1")
    record_property("tolerance", f"ops subset of the allow-list; exported vs eager {EXPORT_TOL}")
    record_property("why", "allow-list from TASK.md; export runs the same ATen kernels (measured "
                    "0 difference for the reference), 1e-5 allows an equivalent lowering")
    # The probe exports in the candidate's process and saves each program into a job folder
    # made here; after the call (no candidate process left) the folder is sealed and the judge
    # walks the saved graph itself (exported_graph: the archive's JSON, no unpickling) and runs
    # it (graph_exec: the judge's tensors, torch's own operators). The candidate's own
    # exported_ops list and its eager logits are the candidate process's observations; the
    # exported side of "exported vs eager" is the judge's run of the saved program.
    job = sealed.job_dir("export-programs")
    x = tokens(batch=1)
    seen = probe.call(PROBE, "export_programs", patterns=["AMAM", "MMMM"], dtype="float32",
                      std=SCALED_STD, seed=0, tokens=x, out_dir=str(job))
    sealed.seal(job)
    for pattern in ("AMAM", "MMMM"):
        got = seen[pattern]
        ops = set(got["ops"])
        extra = sorted(ops - ALLOWED_EXPORT_OPS)
        record_property(f"ops_{pattern}", ",".join(sorted(ops)))
        assert not extra, f"{pattern}: operators outside the allow-list: {extra}"
        # Our own walk of the graph, in case exported_ops was changed to hide something.
        own, program_keys = exported_graph(job / f"program-{pattern}.pt2")
        assert own <= ALLOWED_EXPORT_OPS, sorted(own - ALLOWED_EXPORT_OPS)
        program = graph_exec.load(job / f"program-{pattern}.pt2", ALLOWED_EXPORT_OPS)
        judged = _run_program(program, graph_exec.archive_state(program), x)
        assert as_float(judged.abs().max()) > 1.0, "logits too small for a meaningful comparison"
        vs_eager = max_abs_diff(got["eager"], judged)
        vs_exported = max_abs_diff(got["exported"], judged)
        record_property(f"export_vs_eager_{pattern}", vs_eager)
        record_property(f"export_judge_vs_candidate_run_{pattern}", vs_exported)
        assert within(vs_eager, EXPORT_TOL), f"{pattern}: exported vs eager differ by {vs_eager}"
        assert within(vs_exported, EXPORT_TOL), (
            f"{pattern}: the saved program computes other logits than the candidate reports "
            f"({vs_exported})")
        assert program_keys == set(got["model_keys"])
        problems = check_key_schema(program_keys, pattern, stack_only=True)
        assert problems == [], f"the exported {pattern} program is not that stack: {problems}"

    # The CLI path: train.py --layer-pattern AMM --export PATH; the program is run here
    # against the judge's AMM program (exported for a batch of 16) with its own weights.
    cli_run.require(record_property)
    check_run_export(cli_run, "AMM", programs, record_property, label="cli_export",
                     weights_tol=EXPORT_WEIGHTS_TOL, logits_tol=EXPORT_TOL)


def _require_stack(keys: Any, pattern: str) -> None:
    """The model a probe built is ``pattern``'s stack by its state-dict keys (no mixer layer is
    an attention block). Without this a pattern accepted but ignored would be judged as the
    all-attention model, which is causal, mixes positions, decodes from its cache and trains."""
    assert isinstance(keys, list), f"the probe returned no key list for {pattern}"
    problems = check_key_schema(keys, pattern, stack_only=True)
    assert problems == [], f"the {pattern} model is not a {pattern} stack: {problems}"


def _run_program(program: graph_exec.Program, state: dict[str, torch.Tensor],
                 x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), judge_replay.one_thread(), kept_environment():
        return program(state, x)


# The judge's own observations of the mixer run on the candidate's seeded AMAM program: the
# graph the judge's training replay runs (conftest's REPLAY_MODELS). The distributed checks
# hold the runs' final weights and optimizer state, read by the judge, to that replay
# (test_distributed._anchor), so a program that is not the model train.py trains fails there.
# Weights are the judge's draws at SCALED_STD (the probes' scale: at the 0.02 init every effect
# is tiny), tokens the judge's; graph_exec runs the graph.
JUDGE_PROGRAM = "AMAM-float64"
JUDGE_STATE_SEED = 20261206
# An attention block is the identity with these zero (x + wo(..) and h + w2(..)): the baseline's
# key schema, which check_key_schema holds every pattern's attention blocks to.
IDENTITY_KEYS = ("attention.wo.weight", "feed_forward.w2.weight")


@dataclass(frozen=True)
class JudgedStack:
    """A seeded program the judge runs itself, and what its tests need to know of it."""

    name: str
    pattern: str
    vocab: int
    seq: int
    # Cuts of the causality test: the tokens after each are changed.
    cuts: tuple[int, ...]

    @property
    def attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i, kind in enumerate(self.pattern) if kind == "A")

    @property
    def mixer_prefixes(self) -> tuple[str, ...]:
        return tuple(f"layers.{i}." for i, kind in enumerate(self.pattern) if kind == "M")

    def tokens(self, seed: int) -> torch.Tensor:
        """The judge's token batch for this stack (its vocabulary and sequence length)."""
        return torch.randint(0, self.vocab, (judge_replay.GLOBAL_BATCH, self.seq),
                             generator=torch.Generator().manual_seed(seed))


# AMAM: the attention blocks are layers 0 and 2, the mixer blocks 1 and 3.
JUDGE_STACK = JudgedStack(JUDGE_PROGRAM, "AMAM", VOCAB, SEQ, cuts=(0, 7, 15, 30))


def _judge_state(program: graph_exec.Program, stack: JudgedStack, *,
                 mixers_only: bool) -> dict[str, torch.Tensor]:
    """Weights the judge draws for ``program`` (every parameter N(0, SCALED_STD), buffers the
    archive's); with ``mixers_only``, the stack's attention blocks made the identity, so the
    program is its mixer blocks between the embeddings and the output."""
    generator = torch.Generator().manual_seed(JUDGE_STATE_SEED)
    archive = graph_exec.archive_state(program)
    state = {}
    for key in program.state_keys:
        value = archive[key]
        state[key] = (torch.randn(value.shape, generator=generator, dtype=torch.float64)
                      .to(value.dtype) * SCALED_STD if key in program.parameter_keys
                      else value.clone())
    if mixers_only:
        for i in stack.attention_layers:
            for name in IDENTITY_KEYS:
                key = f"layers.{i}.{name}"
                assert key in state, f"the {stack.name} program takes no {key}"
                state[key] = torch.zeros_like(state[key])
    return state


def _logits(value: Any, shape: tuple[int, ...]) -> torch.Tensor:
    """A probe's logits as a plain, finite fp64 tensor of ``shape`` (else the check fails)."""
    logits = as_tensor(value, shape)
    assert logits is not None, f"expected a plain tensor of shape {shape}, got {type(value)}"
    assert bool(torch.isfinite(logits).all()), "the logits are not all finite"
    return logits


def _worst_index(diffs: list[float]) -> int:
    """For messages: the index of the largest difference (a NaN first)."""
    for i, d in enumerate(diffs):
        if d != d:
            return i
    return max(range(len(diffs)), key=lambda i: diffs[i]) if diffs else -1


def _live(grad: Any) -> bool:
    """A gradient that is a plain, finite tensor with a non-zero entry."""
    g = as_tensor(grad)
    return g is not None and bool(torch.isfinite(g).all()) and float(g.abs().max()) > 0.0


# ---------------------------------------------------------------------------------------------
# Placement, dtypes, block structure, seeding and other model sizes (issue 13: classes of
# mistakes the checks above never reach)

# The same weights and inputs run twice in one process, once with a meta default device:
# identical CPU kernels (measured 0 for the reference); a tensor created without device= is a
# meta tensor there and the forward raises or returns a meta tensor.
PLACEMENT_TOL = 1e-12
# On a GPU (not measured: no GPU on the host these checks were validated on): fp32 with cuDNN's
# default TF32 convolutions (~1e-3 relative) on O(1) logits; bf16 autocast, as the CUDA
# configurations train (chunked vs full decoding measured 2.3e-2 with CPU bf16 autocast). A
# tensor left on the CPU raises; a wrong or stale state is O(0.1-1) off.
CUDA_FP32_TOL, CUDA_BF16_TOL = 2e-2, 0.25
# A decoding state created in another dtype than the model's: fp64 state for an fp32 model holds
# the same fp32 values (measured 0 against the model-dtype state); an fp32 state for an fp64
# model rounds the history to fp32 (measured <= 1.2e-7 on O(1) logits): TASK.md's fp32 decoding
# tolerance.
CACHE_DTYPE_TOL = {"float64": 1e-10, "float32": 1e-4}
# A block whose parameters are all zero against the pristine baseline with a zero attention
# block in its place, fp64 (both are the identity plus reassociation: measured 0).
RESIDUAL_TOL = 1e-10
# The attention block's feed-forward (TASK.md: a mixer block is "followed by the same pre-norm
# feed-forward as the attention block"); its keys and shapes as the baseline has them.
FFN_KEYS = {"ffn_norm.weight": (64,), "feed_forward.w1.weight": (256, 64),
            "feed_forward.w2.weight": (64, 256)}
# Other ModelArgs sizes than the defaults: nothing divides evenly (dim 45 = 3 heads of 15, odd
# so that no half of it is whole, an odd vocabulary, a sequence length that is prime and no
# multiple of any decoding chunk), and a five-layer pattern. The feature's own sizes must
# follow ModelArgs, not the defaults.
ODD_SIZES = {"vocab_size": 37, "dim": 45, "n_heads": 3, "ffn_hidden": 90, "max_seq_len": 23}
ODD_PATTERN = "MAMMA"
# The candidate's seeded MAMMA model at ODD_SIZES, exported for the judge (fp64).
ODD_STACK = JudgedStack(f"{ODD_PATTERN}-odd-float64", ODD_PATTERN, ODD_SIZES["vocab_size"],
                        ODD_SIZES["max_seq_len"], cuts=(0, 6, 13, 21))


def _observed(run: dict[str, Any], what: str) -> dict[str, Any]:
    got = run.get(what)
    assert isinstance(got, dict), f"{what}: the probe observed {got!r}"
    return got


def _placed_as(obs: dict[str, Any], label: str, dtype: str = "float64") -> None:
    assert obs.get("type") == "Tensor", f"{label} is a {obs.get('type')}, not a tensor"
    assert obs.get("device") == "cpu", f"{label} is on {obs.get('device')}, not on the inputs' cpu"
    assert obs.get("dtype") == dtype, f"{label} is {obs.get('dtype')}, not the model's {dtype}"


@observed_in(CANDIDATE_REPORT,
             reports="devices and dtypes of outputs, gradients and states, and the meta run's "
                     "values, all observed in the probe's process",
             uncorroborated="where a tensor is created is visible only inside the process that "
                            "creates it")
def test_mixer_placement_follows_inputs(record_property: Any) -> None:
    """Hybrid and all-mixer fp64 models with CPU parameters and inputs compute the same full
    forward, chunked decoding and LM-loss gradients when every tensor factory called without
    ``device=`` builds on the ``meta`` device (every tensor the model creates must take its
    device from its inputs or parameters), and keep float64 end to end: logits, every gradient
    and the default decoding state are fp64 CPU tensors. Moved as a whole to another device
    (``.to("meta")``, meta inputs), the same models run the forward, decoding and backward
    there, every output, gradient and state tensor on that device (nothing the forward uses is
    left behind outside the parameters and buffers). On a host with two GPUs (the CUDA
    configurations), the same models on cuda:0 keep every output, gradient and state tensor on
    the GPU, compute the CPU logits (2e-2), decode as the full forward does (fp32 2e-2, bf16
    autocast 0.25) and keep the state in the model's dtype under autocast."""
    record_property("oracle", "metamorphic")
    record_property("configurations", ",".join(["cpu-1", *CUDA_CONFIGURATIONS]))
    record_property("tolerance", f"{PLACEMENT_TOL} (meta factories vs as is); dtypes exact; "
                    f"CUDA fp32 {CUDA_FP32_TOL}, bf16 autocast {CUDA_BF16_TOL}")
    record_property("why", "a tensor created without device= (a mask, a zero state, a kernel) "
                    "is a CPU tensor beside CUDA ones on a GPU host; building it on the meta "
                    "device shows that on a CPU host. A hard-coded or dropped dtype= / .float() "
                    "shows as a non-fp64 tensor of an fp64 model. CUDA tolerances are not "
                    "measured (no GPU here): TF32 convolutions ~1e-3 relative, bf16 autocast "
                    "decoding vs full measured 2.3e-2 with CPU bf16 autocast")
    x = tokens(batch=3, seqlen=32)
    batch = tokens(batch=4, seqlen=32, seed=5)
    patterns = ("AMAM", "MMMM")
    seen = probe.call(PROBE, "placement_runs", patterns=list(patterns), std=SCALED_STD, seed=0,
                      tokens=x, batch=batch, chunk=5)
    diffs: dict[str, float] = {}
    for pattern in patterns:
        _require_stack(seen["keys"].get(pattern), pattern)
        runs = {mode: seen.get(f"{pattern}-{mode}") for mode in ("plain", "meta")}
        for mode, run in runs.items():
            assert isinstance(run, dict), f"{pattern} {mode}: no observations"
            assert "error" not in run, (
                f"{pattern}: the fp64 CPU model raised with "
                f"{'device-less factories building on meta' if mode == 'meta' else 'as is'}: "
                f"{run['error']}")
        for mode, run in runs.items():
            where = f"{pattern} ({'device-less factories on meta' if mode == 'meta' else 'as is'})"
            for what in ("full", "decoded", "logits"):
                _placed_as(_observed(run, what), f"{where}: {what}")
            cache = run.get("cache")
            assert isinstance(cache, list) and cache, f"{where}: init_cache holds no tensors"
            for i, entry in enumerate(cache):
                assert entry.get("device") == "cpu", (
                    f"{where}: init_cache tensor {i} is on {entry.get('device')}")
                if entry.get("dtype") not in ("int64", "int32", "bool"):
                    assert entry.get("dtype") == "float64", (
                        f"{where}: init_cache tensor {i} is {entry.get('dtype')} in an fp64 model")
            grads = run.get("grads")
            assert isinstance(grads, dict) and set(grads) == set(runs["plain"]["grads"])
            for name, obs in grads.items():
                if obs.get("type") == "NoneType" and runs["plain"]["grads"][name]["type"] == (
                        "NoneType"):
                    continue
                _placed_as(obs, f"{where}: the gradient of {name}")
        plain, meta = runs["plain"], runs["meta"]
        for what in ("full", "decoded", "logits"):
            diffs[f"{pattern}-{what}"] = max_abs_diff(meta[what]["value"], plain[what]["value"])
        diffs[f"{pattern}-grads"] = worst(
            max_abs_diff(meta["grads"][n]["value"], g["value"])
            for n, g in plain["grads"].items() if g.get("value") is not None)
        assert as_float(as_tensor(plain["full"]["value"]).abs().max()) > 1.0
    for label, diff in diffs.items():
        record_property(f"meta_vs_plain_max_abs_{label}", diff)
    bad = {label: diff for label, diff in diffs.items() if not within(diff, PLACEMENT_TOL)}
    assert not bad, f"with device-less factories on meta the model computes other values: {bad}"
    for pattern in patterns:
        _moved_as_a_whole(seen.get(f"{pattern}-moved"), pattern)

    available = gpus()
    record_property("gpus", available)
    if available >= 2:
        _check_on_cuda(patterns, x, batch, record_property)


def _moved_as_a_whole(run: Any, pattern: str) -> None:
    """The ``moved`` run of ``placement_runs``: the model moved with ``.to("meta")`` computed on
    meta inputs, and everything it produced is a float64 meta tensor."""
    where = f"{pattern} moved with .to('meta')"
    assert isinstance(run, dict), f"{where}: no observations"
    assert "error" not in run, (
        f"{where} raised on meta inputs (as .to('cuda') would on a GPU): {run['error']}")
    observed = [(what, run.get(what)) for what in ("full", "decoded", "logits")]
    observed += [(f"init_cache tensor {i}", e) for i, e in enumerate(run.get("cache") or [])]
    observed += [(f"the gradient of {n}", g) for n, g in (run.get("grads") or {}).items()
                 if isinstance(g, dict) and g.get("type") != "NoneType"]
    for what, obs in observed:
        assert isinstance(obs, dict) and obs.get("device") == "meta", (
            f"{where}: {what} is on {obs.get('device') if isinstance(obs, dict) else obs}")
        if obs.get("dtype") not in ("int64", "int32", "bool"):
            assert obs.get("dtype") == "float64", f"{where}: {what} is {obs.get('dtype')}"


def _check_on_cuda(patterns: tuple[str, ...], x: torch.Tensor, batch: torch.Tensor,
                   record_property: Any) -> None:
    """The CUDA part of the placement contract (only on a host with two GPUs)."""
    seen = probe.call(PROBE, "cuda_runs", patterns=list(patterns), std=SCALED_STD, seed=0,
                      tokens=x, batch=batch, chunk=5)
    for pattern in patterns:
        _require_stack(seen["keys"].get(pattern), pattern)
        got = seen[pattern]
        for what in ("full", "decoded", "amp_full", "amp_decoded"):
            assert got[what].get("device") == "cuda", f"{pattern} {what}: {got[what]}"
        for i, entry in enumerate(got["cache"]):
            assert entry.get("device") == "cuda", f"{pattern}: state tensor {i}: {entry}"
        for name, g in got["grads"].items():
            assert g.get("device") == "cuda", f"{pattern}: the gradient of {name}: {g}"
        floating = {d for d in got["amp_state_dtypes"] if d not in ("int64", "int32", "bool")}
        assert floating == {"float32"}, f"{pattern}: under autocast the state became {floating}"
        errors = {
            "cuda_vs_cpu": max_abs_diff(got["full"]["value"], got["cpu_full"]),
            "cuda_decoded_vs_full": max_abs_diff(got["decoded"]["value"], got["full"]["value"]),
            "cuda_amp_decoded_vs_amp_full": max_abs_diff(got["amp_decoded"]["value"],
                                                         got["amp_full"]["value"]),
        }
        for label, err in errors.items():
            record_property(f"{pattern}_{label}", err)
        for label in ("cuda_vs_cpu", "cuda_decoded_vs_full"):
            assert within(errors[label], CUDA_FP32_TOL), f"{pattern} {label}: {errors[label]}"
        assert within(errors["cuda_amp_decoded_vs_amp_full"], CUDA_BF16_TOL), (
            f"{pattern}: under bf16 autocast chunked decoding differs from the full forward by "
            f"{errors['cuda_amp_decoded_vs_amp_full']}")


@observed_in(CANDIDATE_REPORT,
             reports="the decoding state's dtypes and the logits through it, observed in the "
                     "probe's process",
             uncorroborated="the decoding state lives only in the candidate's process")
def test_decoding_state_keeps_its_dtype(record_property: Any) -> None:
    """``init_cache(batch, dtype=D)`` holds every layer's decoding state in D before and after
    chunked decoding (as the baseline's KV cache does), for an fp32 model with an fp64 state and
    an fp64 model with an fp32 state, and decoding through it gives the logits of decoding
    through the model-dtype state (fp64 state 1e-10, fp32 state 1e-4)."""
    record_property("oracle", "differential")
    record_property("configurations", "cpu-1")
    record_property("tolerance", json.dumps(CACHE_DTYPE_TOL))
    record_property("why", "the baseline's init_cache(batch, dtype, device) makes a state of that "
                    "dtype and its KV cache converts on write and on read; a mixer state that "
                    "drops the dtype, or rebinds it to the activations' dtype, changes memory and "
                    "precision of every later chunk")
    x = tokens()
    pairs = [["float32", "float64"], ["float64", "float32"]]
    patterns = ("AMAM", "MMMM")
    seen = probe.call(PROBE, "cache_dtype_decoding", patterns=list(patterns), pairs=pairs,
                      std=SCALED_STD, seed=0, tokens=x, chunk=3)
    for pattern in patterns:
        _require_stack(seen["keys"].get(pattern), pattern)
        for model_dtype, cache_dtype in pairs:
            label = f"{pattern}-{model_dtype}-{cache_dtype}"
            got = seen.get(label)
            assert isinstance(got, dict), f"{label}: no observations"
            assert "error" not in got, (
                f"{label}: decoding a {model_dtype} model through init_cache(dtype="
                f"{cache_dtype}) raised {got['error']}")
            for when in ("before", "after"):
                dtypes = got[when]
                assert isinstance(dtypes, list) and dtypes, f"{label}: the state holds no tensors"
                floating = [d for d in dtypes if d not in ("int64", "int32", "bool")]
                record_property(f"{label}_state_dtypes_{when}", ",".join(sorted(set(dtypes))))
                assert floating and set(floating) == {cache_dtype}, (
                    f"{label}: {when} decoding the state holds {sorted(set(floating))}, not "
                    f"init_cache's {cache_dtype}")
            full = _logits(got["default"], (x.shape[0], x.shape[1], VOCAB))
            diff = max_abs_diff(got["explicit"], full)
            record_property(f"{label}_vs_model_dtype_state_max_abs", diff)
            tol = CACHE_DTYPE_TOL[cache_dtype]
            assert within(diff, tol), (
                f"{label}: decoding through the {cache_dtype} state differs by {diff} (tol {tol})")


@observed_in(JUDGE, CANDIDATE_REPORT,
             reports='the state-dict keys of the built model',
             corroborated_by="the logits with zeroed blocks equal the judge's pristine-baseline "
                             "computation on the candidate's own weights, and the block's output "
                             "the baseline's feed-forward on its input (1e-10)")
def test_mixer_block_is_a_residual_block(record_property: Any) -> None:
    """A mixer block is a pre-norm residual block: with all its parameters zero it is the
    identity (the model equals the pristine baseline with an all-zero attention block there),
    and with only its feed-forward kept (when it has the attention block's feed-forward keys)
    it adds that feed-forward exactly as the baseline's block does (fp64, 1e-10). With every
    parameter non-zero, the feed-forward reads the mixer's residual stream: the block's output
    is h + feed_forward(ffn_norm(h)), h being its output with the feed-forward's w2 zeroed
    (the baseline's RMSNorm and feed-forward on the block's weights, fp64, 1e-10)."""
    record_property("oracle", "reference")
    record_property("configurations", "cpu-1")
    record_property("tolerance", RESIDUAL_TOL)
    record_property("why", "TASK.md: the mixer replaces attention and is followed by the same "
                    "pre-norm feed-forward; x + f(norm(x)) with f's weights zero is x whatever f "
                    "is, and the baseline's zero attention block is also x. A dropped residual "
                    "(h = f(x)) or a subtracted feed-forward moves logits by O(1)")
    x = tokens(batch=2, seqlen=32, seed=7)
    cases = [("AMAM", [1, 3], []), ("MMMM", [0, 1, 2, 3], []),
             ("AMAM", [1, 3], sorted(FFN_KEYS))]
    seen = probe.call(PROBE, "zeroed_layers_cases",
                      cases=[{"pattern": p, "zero_layers": z, "keep": k} for p, z, k in cases],
                      std=SCALED_STD, seed=0, tokens=x)
    assert isinstance(seen, list) and len(seen) == len(cases)
    pristine = judge_replay.PristineModel()
    checked = 0
    for (pattern, zeroed, keep), got in zip(cases, seen, strict=True):
        label = f"{pattern}-zero{''.join(map(str, zeroed))}" + ("-keep-ffn" if keep else "")
        _require_stack(got.get("keys"), pattern)
        state = got["state"]
        assert isinstance(state, dict)
        if keep and not all(_has_shape(state.get(f"layers.{i}.{k}"), shape)
                            for i in zeroed for k, shape in FFN_KEYS.items()):
            # The candidate's mixer block names its feed-forward otherwise: only the zero-block
            # identity above judges it.
            record_property(f"{label}", "not applicable: no baseline feed-forward keys")
            continue
        reference = _zero_block_reference(pristine, state, pattern, zeroed, keep, x)
        diff = max_abs_diff(got["logits"], reference)
        record_property(f"{label}_vs_pristine_max_abs", diff)
        assert as_float(reference.abs().max()) > 1.0
        assert within(diff, RESIDUAL_TOL), (
            f"{label}: the model with zeroed mixer blocks differs from the baseline with identity "
            f"blocks there by {diff}: the mixer block is not x + mixer(norm(x)) followed by "
            f"h + feed_forward(ffn_norm(h))")
        checked += 1
    assert checked >= 2
    _feed_forward_reads_the_mixer_output(x, record_property)


def _feed_forward_reads_the_mixer_output(x: torch.Tensor, record_property: Any) -> None:
    """Layer 1 of AMAM (a mixer block), every parameter non-zero: output = h + FFN(norm(h))."""
    got = probe.call(PROBE, "block_io", pattern="AMAM", layer=1, std=SCALED_STD, seed=0,
                     tokens=x)
    _require_stack(got.get("keys"), "AMAM")
    state = got.get("state") or {}
    if got.get("no_ffn") or not all(_has_shape(state.get(f"layers.1.{k}"), shape)
                                    for k, shape in FFN_KEYS.items()):
        record_property("AMAM-layer1-ffn-after-mixer", "not applicable: no baseline feed-forward "
                        "keys")
        return
    block_in, h, out = (as_tensor(got.get(k)) for k in ("input", "output_without_ffn", "output"))
    assert block_in is not None and h is not None and out is not None, "the probe saw no block"
    mixed = max_abs_diff(h, block_in)
    record_property("AMAM-layer1-mixer-branch-max_abs", mixed)
    assert as_float(mixed) > MIXING_MIN_EFFECT, "fixture problem: the mixer branch is zero"
    model = judge_replay.pristine("model")
    args = model.ModelArgs()
    norm, ffn = model.RMSNorm(args.dim, args.norm_eps).double(), model.FeedForward(args).double()
    with torch.no_grad(), judge_replay.one_thread(), kept_environment():
        norm.weight.copy_(as_tensor(state["layers.1.ffn_norm.weight"]))
        ffn.w1.weight.copy_(as_tensor(state["layers.1.feed_forward.w1.weight"]))
        ffn.w2.weight.copy_(as_tensor(state["layers.1.feed_forward.w2.weight"]))
        want = h.double() + ffn(norm(h.double()))
    diff = max_abs_diff(out, want)
    record_property("AMAM-layer1-ffn-after-mixer_max_abs", diff)
    assert within(diff, RESIDUAL_TOL), (
        f"AMAM layer 1: the block's output differs from h + feed_forward(ffn_norm(h)) (h: the "
        f"block with its feed-forward zeroed) by {diff}: the feed-forward does not read the "
        f"mixer's output")


def _has_shape(value: Any, shape: tuple[int, ...]) -> bool:
    return type(value) is torch.Tensor and tuple(value.shape) == shape


def _zero_block_reference(pristine: Any, state: dict[str, Any], pattern: str, zeroed: list[int],
                          keep: list[str], x: torch.Tensor) -> torch.Tensor:
    """The pristine baseline's logits (fp64) with the candidate's global and attention-layer
    weights and, at each zeroed layer, an attention block of zeros (the identity) plus the
    candidate's kept feed-forward weights."""
    weights: dict[str, torch.Tensor] = {}
    for key in pristine.state_keys:
        if not key.startswith("layers."):
            weights[key] = as_tensor(state.get(key))
            continue
        i, rest = int(key.split(".")[1]), key.split(".", 2)[2]
        if i in zeroed and rest not in keep:
            weights[key] = torch.zeros_like(pristine.module.state_dict()[key], dtype=torch.float64)
        else:
            weights[key] = as_tensor(state.get(key))
        assert weights[key] is not None, f"the candidate's state has no usable {key}"
    assert len(pattern) == pristine.module.args.n_layers
    with torch.no_grad(), judge_replay.one_thread(), kept_environment():
        return pristine(weights, x).double()


@observed_in(OUTSIDE, CANDIDATE_REPORT,
             reports="the initial weights of four builds in the probe's process",
             corroborated_by="the seeded program's archive, saved by another process and read by "
                             "the judge, holds the same weights")
def test_seeded_init_is_deterministic(programs: Any, record_property: Any) -> None:
    """``Transformer`` built after ``manual_seed(0)`` has the same, finite initial weights every
    time: in a fresh process, after freed memory was filled with NaN or other values, and in the
    process that exported the seeded programs (bitwise)."""
    record_property("oracle", "metamorphic")
    record_property("configurations", "cpu-1")
    record_property("tolerance", 0.0)
    record_property("why", "TASK.md: seeded and deterministic; a parameter the constructor "
                    "leaves as torch.empty holds whatever memory the allocator hands back, so "
                    "runs, ranks and resumes start from different (or non-finite) weights")
    patterns = ("AMAM", "MMMM")
    seen = probe.call(PROBE, "seeded_init_repeats", patterns=list(patterns), seed=0,
                      poison=[float("nan"), 7.0, -1e30])
    for pattern in patterns:
        states = seen.get(pattern)
        assert isinstance(states, list) and len(states) == 4
        first = states[0]
        _require_stack(list(first), pattern)
        for key, value in first.items():
            t = as_tensor(value)
            assert t is not None and bool(torch.isfinite(t).all()), (
                f"{pattern}: the seeded initial {key} is not finite")
        diffs = [tree_max_diff(s, first) for s in states[1:]]
        if pattern == "AMAM":
            # The seeded program's archive: the same construction in another process.
            archived = programs.init("AMAM-float32")
            diffs.append(tree_max_diff({k: archived.get(k) for k in first}, first))
        record_property(f"{pattern}_max_abs_diff_between_builds", worst(diffs))
        assert within(worst(diffs), 0.0), (
            f"{pattern}: building the seeded model again gives other initial weights "
            f"({diffs}): a parameter is left uninitialised or drawn outside the seeded RNG")


@observed_in(JUDGE, CANDIDATE_REPORT,
             reports="the prefix and decoding logits at odd sizes, computed in the probe's "
                     "process",
             corroborated_by="the judge runs the candidate's seeded MAMMA program at these "
                             "sizes itself, with weights and tokens it draws: no logit moves "
                             "when later tokens change, and with the attention blocks made the "
                             "identity a changed token moves later logits (the decoding half "
                             "stays the probe's word, as in "
                             "test_cached_decoding_matches_full_forward)")
def test_mixer_at_other_model_sizes(programs: Any, record_property: Any) -> None:
    """With other ModelArgs sizes (vocab 37, an odd dim 45 in 3 heads, ffn 90, max_seq_len 23)
    and the five-layer pattern MAMMA, the model is still causal (prefix recomputation, fp64
    1e-10) and chunked decoding (chunks 1, 2, 4, 6, 23 and an irregular schedule, none dividing
    23) still equals the full forward (fp32 1e-4, fp64 1e-10). On the judge's side, the
    candidate's seeded MAMMA program at these sizes is causal and mixes positions."""
    record_property("oracle", "differential")
    record_property("configurations", "cpu-1")
    record_property("tolerance", f"prefix {PREFIX_TOL_FP64}; decoding fp32 1e-4, fp64 1e-10")
    record_property("why", "the default sizes are all powers of two: a mixer size computed from "
                    "the defaults or with floor/ceil where it is not whole (dim // 2 of an odd "
                    "dim), or a chunk boundary assumed to divide the sequence, only shows at "
                    "sizes that do not divide")
    # The judge's observation first, so a report of the candidate's cannot hide its outcome.
    program = programs.sized(ODD_STACK.name, ODD_PATTERN, "float64", judge_replay.GLOBAL_BATCH,
                             ODD_SIZES)
    _judge_causality(program, ODD_STACK, record_property, mixers_only=False)
    _judge_mixing(program, ODD_STACK, record_property)
    seq, vocab = ODD_SIZES["max_seq_len"], ODD_SIZES["vocab_size"]
    x = torch.randint(0, vocab, (2, seq), generator=torch.Generator().manual_seed(11))
    chunks, schedule = [1, 2, 4, 6, 23], [6, 1, 2, 9, 5]
    dtypes = {"float32": torch.float32, "float64": torch.float64}
    both = probe.call(PROBE, "other_sizes", pattern=ODD_PATTERN, sizes=ODD_SIZES, std=SCALED_STD,
                      seed=0, tokens=x, dtypes=list(dtypes), chunks=chunks, schedule=schedule)
    seen = both["prefix"]
    _require_sized_stack(seen.get("keys"))
    full = _logits(seen["full"], (x.shape[0], seq, vocab))
    prefixes = seen["prefix"]
    assert isinstance(prefixes, list) and len(prefixes) == seq
    diffs = [max_abs_diff(prefix, full[:, t]) for t, prefix in enumerate(prefixes)]
    record_property("max_abs_prefix_vs_full", worst(diffs))
    assert as_float(full.abs().max()) > 1.0
    assert within(worst(diffs), PREFIX_TOL_FP64), (
        f"position {_worst_index(diffs)} differs from its recomputation from the prefix by "
        f"{worst(diffs)}")

    seen = both["decoding"]
    _require_sized_stack(seen["keys"].get(ODD_PATTERN))
    for dtype_name, dtype in dtypes.items():
        results = dict(seen[f"{ODD_PATTERN}-{dtype_name}"])
        full = _logits(results.pop("full"), (x.shape[0], seq, vocab))
        assert sorted(results) == sorted([f"chunk{c}" for c in chunks] + ["irregular"])
        for name, got in results.items():
            diff = max_abs_diff(got, full)
            record_property(f"max_abs_{dtype_name}-{name}", diff)
            assert within(diff, DECODE_TOL[dtype]), (
                f"{ODD_PATTERN} {dtype_name} {name}: cached vs full differ by {diff}")


def _require_sized_stack(keys: Any) -> None:
    """The ODD_SIZES model is the MAMMA stack (no mixer layer is an attention block)."""
    _require_stack(keys, ODD_PATTERN)


@observed_in(JUDGE, OUTSIDE)
def test_mixer_keys_documented(cli_run: Any, record_property: Any) -> None:
    """The docstring at the top of the graded hybridlm/model.py documents every key of a mixer
    block (TASK.md: "A mixer block's parameters live under `layers.{i}.`; document their keys
    there too"): each key an M layer of the AMM CLI run's final_state.pt holds, after its
    ``layers.{i}.``, appears in it verbatim."""
    record_property("oracle", "specification")
    record_property("configurations", "cpu-1")
    record_property("tolerance", "exact (key names)")
    record_property("why", "TASK.md asks that the mixer's keys be documented where the "
                    "attention block's are, at the top of hybridlm/model.py")
    cli_run.require(record_property)
    final = cli_run.final()
    assert isinstance(final.get("model"), dict), "final_state.pt holds no model state dict"
    # AMM: layers 1 and 2 are mixer blocks (their keys are judged by test_layer_pattern_parsing).
    suffixes = sorted({key.split(".", 2)[2] for key in final["model"]
                       if isinstance(key, str) and key.startswith(("layers.1.", "layers.2."))
                       and key.count(".") >= 2})
    record_property("mixer_keys", str(suffixes))
    assert suffixes, "the AMM run's final_state.pt holds no key under layers.1. or layers.2."
    try:
        doc = source_facts.module_docstring(workdir() / "hybridlm" / "model.py")
    except (OSError, ValueError, SyntaxError, UnicodeDecodeError, tokenize.TokenError) as exc:
        raise AssertionError(f"hybridlm/model.py could not be read for its docstring: "
                             f"{type(exc).__name__}: {str(exc)[:200]}") from None
    missing = [s for s in suffixes if s not in doc]
    record_property("undocumented_mixer_keys", str(missing))
    assert not missing, (
        f"the docstring of hybridlm/model.py does not document the mixer block's keys "
        f"layers.{{i}}.{', layers.{i}.'.join(missing)}")
