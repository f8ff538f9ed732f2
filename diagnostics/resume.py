"""Resume pairing: what a run resumed from a checkpoint must share with the straight run.

TrainCheck 0.2 relates records within one trace only, so a checkpoint that drops part of
the training state (an optimizer's moments, a rank's random generator, the schedule) leaves
nothing it can see: the resumed run is healthy on its own. This module adds the missing
cross-run relation over TrainCheck traces, learned like TrainCheck's own, from healthy runs:

- **probe**: a straight traced run of N steps that writes a checkpoint at step k, then a
  traced run resumed from that checkpoint to N, same arguments otherwise (how a task's
  ``train.py`` saves and resumes is the packet's ``diagnostics.resume``). Both observe
  the training state (``observe.py``) and number their steps alike (the resumed run starts
  at k), so step s means the same optimizer step in both.
- **observations**: every VAR record attribute of both traces, keyed by rank, variable name,
  attribute and step: TrainCheck's own parameter dumps (``model.*``) and the state digests
  (``state.*``), at the steps both runs dumped (k to N-1).
- **relation** ``ResumePreservation``: one rule per (variable, attribute): "its value in the
  resumed run equals the straight run's at every step both ran, on every rank".
- **learn**: every rule the healthy pair satisfies and observed at least once. The harness's
  applicability policy then drops what other healthy pairs (other seeds) or the reference
  solution's pairs violate, as for TrainCheck's relations.
- **check**: a rule whose values differ at a common step on some rank is a violation (with
  the first such step and the ranks); a rule with no common observation is not triggered.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from diagnostics.checking import invariant_id
from diagnostics.collect import run as collect_run
from diagnostics.traces import record_rank, records, trace_files
from diagnostics.train_args import option_value

RELATION = "ResumePreservation"

Key = tuple[str, str]  # (variable name, attribute)
Observations = dict[tuple[int, str, str], dict[int, str]]  # (rank, var, attr) -> step -> value


def observations(trace_dir: Path) -> Observations:
    """Every VAR attribute value of a trace folder, by rank, variable, attribute and step."""
    found: Observations = {}
    for path in trace_files(trace_dir, "VAR"):
        for record in records(path):
            rank = record_rank(record)
            step = (record.get("meta_vars") or {}).get("step")
            name = record.get("var_name")
            attributes = record.get("attributes")
            if rank is None or not isinstance(step, int) or not isinstance(name, str) \
                    or not isinstance(attributes, dict):
                continue
            for attr, value in attributes.items():
                # The last record of a step wins: a step's state is what it ended with.
                found.setdefault((rank, name, str(attr)), {})[step] = json.dumps(
                    value, sort_keys=True, default=str)
    return found


def rule(var_name: str, attribute: str) -> dict[str, Any]:
    return {"relation": RELATION, "var_name": var_name, "attribute": attribute,
            "text": f"{var_name}.{attribute} is preserved by resume: the resumed run's value "
                    "equals the straight run's at every step both ran, on every rank"}


def _compare(straight: Observations, resumed: Observations,
             ) -> dict[Key, tuple[int, list[tuple[int, int]]]]:
    """(var, attr) -> (common observations, [(step, rank) where the runs differ])."""
    result: dict[Key, tuple[int, list[tuple[int, int]]]] = {}
    for (rank, name, attr), by_step in resumed.items():
        other = straight.get((rank, name, attr))
        if other is None:
            continue
        common, differing = result.get((name, attr), (0, []))
        for step, value in by_step.items():
            if step in other:
                common += 1
                if other[step] != value:
                    differing.append((step, rank))
        result[(name, attr)] = (common, differing)
    return result


def learn(straight: Path, resumed: Path) -> list[dict[str, Any]]:
    """The rules a healthy straight/resumed pair satisfies (observed at least once)."""
    compared = _compare(observations(straight), observations(resumed))
    return [rule(name, attr) for (name, attr), (common, differing) in sorted(compared.items())
            if common and not differing]


def check(straight: Path, resumed: Path, rules: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Violations of ``rules`` by a straight/resumed pair, in the shape ``checking`` reports."""
    compared = _compare(observations(straight), observations(resumed))
    violations, not_triggered, checked = [], 0, 0
    for item in rules:
        checked += 1
        common, differing = compared.get((item["var_name"], item["attribute"]), (0, []))
        if not common:
            not_triggered += 1
            continue
        if differing:
            violations.append({
                "id": invariant_id(item), "relation": RELATION, "rule": item["text"],
                "first_step": min(step for step, _ in differing),
                "ranks": sorted({rank for _, rank in differing})})
    return {"outcome": "ok", "violations": violations, "n_checked": checked,
            "n_failed": len(violations), "n_not_triggered": not_triggered}


def _expand(word: str, values: dict[str, str]) -> str:
    # Plain replacement, not str.format: a task's argument may hold braces of its own.
    for name, value in values.items():
        word = word.replace("{" + name + "}", value)
    return word


def probe(src: Path, out: Path, config: str, train_args: list[str], spec: dict[str, Any], *,
          wall_s: float, selective: bool = False) -> dict[str, Any]:
    """The straight run and its resume from the step-k checkpoint, both traced with state
    observation; returns (and writes) ``out/probe.json``. ``selective``: the runs record
    no torch call (TrainCheck's selective collection with an empty selection), only what
    the resume rules read: the sampled parameters and the observed state.

    ``spec`` is the packet's ``diagnostics.resume`` (``save_every``, ``save_args``,
    ``resume_args``, ``checkpoint``; see ``grading.packet.ResumeProbeSpec``)."""
    words = {key: spec.get(key) for key in ("save_args", "resume_args")}
    if not isinstance(spec.get("save_every"), int) or not isinstance(spec.get("checkpoint"), str) \
            or not all(isinstance(v, list) and v and all(isinstance(w, str) for w in v)
                       for v in words.values()):
        raise ValueError("the resume spec needs save_every (an integer), save_args and "
                         "resume_args (lists of strings) and checkpoint (a string)")
    save_every = spec["save_every"]
    steps_text = option_value(train_args, "--steps")
    if steps_text is None:
        raise ValueError("the training arguments need --steps")
    steps = int(steps_text)
    if save_every < 1 or steps <= save_every:
        raise ValueError(f"--steps {steps} must exceed the checkpoint step {save_every}: the "
                         "resumed run needs a step to take")
    if option_value(train_args, "--out") is not None:
        raise ValueError("--out is set by the runner, not by the caller")
    if out.exists():
        raise FileExistsError(f"output folder {out} exists; every probe needs a fresh one")
    out.mkdir(parents=True)
    started = time.monotonic()
    selection = None
    if selective:
        selection = out / "no-calls.invariants.json"
        selection.write_text("")
    values = {"k": str(save_every), "ckpt": str(out / "ckpt"),
              "out": str(out / "straight" / "train")}  # collect.run's --out for that run
    straight = collect_run(src, out / "straight", config,
                           [*train_args, *(_expand(w, values) for w in spec["save_args"])],
                           traced=True, wall_s=wall_s, observe_state=True,
                           invariants=selection)
    checkpoint = Path(_expand(str(spec["checkpoint"]), values))
    result: dict[str, Any] = {"config": config, "save_every": save_every, "steps": steps,
                              "checkpoint": str(checkpoint), "straight": straight,
                              "resumed": None}
    if straight["outcome"] != "ok":
        result.update(outcome=straight["outcome"], cause=f"straight run: {straight['cause']}")
    elif not checkpoint.exists():
        result.update(outcome="no_checkpoint",
                      cause=f"the straight run left no step-{save_every} checkpoint at "
                            f"{checkpoint}")
    else:
        values["checkpoint"] = str(checkpoint)
        resumed = collect_run(src, out / "resumed", config,
                              [*train_args, *(_expand(w, values) for w in spec["resume_args"])],
                              traced=True, wall_s=wall_s, observe_state=True,
                              first_step=save_every, invariants=selection)
        result["resumed"] = resumed
        if resumed["outcome"] != "ok":
            result.update(outcome=resumed["outcome"], cause=f"resumed run: {resumed['cause']}")
        else:
            result.update(outcome="ok", cause="")
    result["wall_s"] = round(time.monotonic() - started, 3)
    (out / "probe.json").write_text(json.dumps(result, indent=1) + "\n")
    return result
