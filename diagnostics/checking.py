"""Inference and checking with TrainCheck, and the comparison with a healthy control.

``traincheck-infer`` / ``traincheck-check`` write logs into their working directory, so each
runs from its own scratch folder. A checker that crashes or times out is an explicit outcome.
Invariants are identified by the SHA-256 of their canonical JSON, so a violation can be
matched with the control run's and with the frozen reference set.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from diagnostics.collect import run as collect_run
from diagnostics.collect import scrubbed_env
from diagnostics.traces import rank_traces

TAIL = 3000

# ``traincheck-check`` with TrainCheck's liveness-overlap threshold set first (its module
# constant, read at check time). The Consistency relation pairs two ranks' values of a
# variable when their lifetimes overlap by more than the threshold (intersection over
# union, 1% by default). Ranks dump their parameters a few milliseconds apart even after a
# barrier (measured: 4-5 ms on a loaded 2-core host), so when a step takes about 100 ms, as
# in a selectively collected run, step k on one rank overlaps step k+1 on the other by more
# than 1% and a healthy DDP run "violates" cross-rank consistency.
_CHECK_AT_OVERLAP = (
    "import sys\n"
    "import traincheck.config.config as config\n"
    "config.LIVENESS_OVERLAP_THRESHOLD = float(sys.argv[1])\n"
    "from traincheck.checker import main\n"
    "sys.argv = ['traincheck-check', *sys.argv[2:]]\n"
    "sys.exit(main())\n")


def invariant_id(invariant: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(invariant, sort_keys=True).encode()).hexdigest()[:16]


def read_invariants(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _json_stream(text: str) -> list[dict[str, Any]]:
    """Concatenated (pretty-printed) JSON objects, as TrainCheck's failed.log holds them."""
    decoder = json.JSONDecoder()
    objects: list[dict[str, Any]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return objects
        obj, pos = decoder.raw_decode(text, pos)
        objects.append(obj)


def _run_tool(command: list[str], cwd: Path, wall_s: float) -> tuple[str, int | None, float]:
    """Run a TrainCheck command; returns (outcome, return code, seconds)."""
    cwd.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with (cwd / "tool.log").open("wb") as log:
        proc = subprocess.Popen(command, cwd=cwd, env=scrubbed_env(cwd), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=wall_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "hang", None, time.monotonic() - started
    return ("ok" if code == 0 else "crash"), code, time.monotonic() - started


def _log_tail(cwd: Path) -> str:
    path = cwd / "tool.log"
    return path.read_text(errors="replace")[-TAIL:] if path.exists() else ""


def infer(traces: list[Path], out: Path, relations: list[str], wall_s: float) -> dict[str, Any]:
    """Learn invariants from trace folders into ``out`` (TrainCheck's JSON-lines format)."""
    work = out.parent / f"{out.name}.work"
    command = ["traincheck-infer", "-f", *map(str, traces), "-o", str(out),
               "--enable-relation", *relations]
    outcome, code, seconds = _run_tool(command, work, wall_s)
    result: dict[str, Any] = {"outcome": outcome, "return_code": code, "wall_s": round(seconds, 3),
                              "relations": relations, "traces": [str(t) for t in traces],
                              "invariants_file": str(out)}
    if outcome == "ok" and out.exists():
        invariants = read_invariants(out)
        result["n_invariants"] = len(invariants)
        result["by_relation"] = _count(inv["relation"] for inv in invariants)
    else:
        result["cause"] = f"traincheck-infer {outcome} (code {code})"
        result["log_tail"] = _log_tail(work)
    return result


def _count(items: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return dict(sorted(counts.items()))


def _violation(entry: dict[str, Any]) -> dict[str, Any]:
    invariant = entry["invariant"]
    steps = sorted({r.get("meta_vars.step") for r in entry.get("trace") or []
                    if isinstance(r.get("meta_vars.step"), int)})
    ranks = sorted({r.get("meta_vars.rank") for r in entry.get("trace") or []
                    if isinstance(r.get("meta_vars.rank"), int)})
    return {"id": invariant_id(invariant), "relation": invariant.get("relation"),
            "rule": invariant.get("text_description", ""),
            "first_step": steps[0] if steps else None, "ranks": ranks}


def check(trace: Path, invariants: Path, out: Path, wall_s: float,
          overlap: float | None = None) -> dict[str, Any]:
    """Check one trace folder; the violations carry the rule, first step and ranks.
    ``overlap``: TrainCheck's liveness-overlap threshold for the check (its default 1%
    when None), as the frozen reference's configuration says."""
    if out.exists():
        raise FileExistsError(f"check folder {out} exists; every check needs a fresh one")
    arguments = ["-f", str(trace), "-i", str(invariants), "-o", str(out), "--no-html-report"]
    command = (["traincheck-check", *arguments] if overlap is None else
               ["python", "-c", _CHECK_AT_OVERLAP, repr(overlap), *arguments])
    outcome, code, seconds = _run_tool(command, out.parent / f"{out.name}.work", wall_s)
    result: dict[str, Any] = {"outcome": outcome, "return_code": code,
                              "wall_s": round(seconds, 3), "trace": str(trace),
                              "invariants": str(invariants), "out": str(out),
                              "liveness_overlap": overlap}
    results_dir = out / trace.name
    failed_log = results_dir / "failed.log"
    if outcome != "ok" or not failed_log.exists():
        result.update(outcome="crash" if outcome == "ok" else outcome,
                      cause=f"traincheck-check {outcome} (code {code}); no failed.log",
                      log_tail=_log_tail(out.parent / f"{out.name}.work"))
        return result
    violations = [_violation(e) for e in _json_stream(failed_log.read_text())]
    result["violations"] = violations
    result["n_checked"] = len(read_invariants(invariants))
    result["n_failed"] = len(violations)
    not_triggered = results_dir / "not_triggered.log"
    result["n_not_triggered"] = (len(_json_stream(not_triggered.read_text()))
                                 if not_triggered.exists() else 0)
    (out / "check.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def check_per_rank(trace: Path, invariants: Path, out: Path, wall_s: float,
                   overlap: float | None = None) -> dict[str, Any]:
    """Check each rank's trace files on their own: what independent per-rank checking sees.

    The comparison with ``check`` on the whole folder shows which violations need the
    cross-rank aggregation (one merged trace, records paired across ranks)."""
    ranks = rank_traces(trace)
    per_rank: dict[str, Any] = {}
    for rank, entry in sorted(ranks.items()):
        alone = out / f"rank{rank}-trace"
        alone.mkdir(parents=True)
        for name in entry["api_files"] + entry["var_files"]:
            shutil.copy2(trace / name, alone / name)
        per_rank[str(rank)] = check(alone, invariants, out / f"rank{rank}-check", wall_s,
                                    overlap)
    ids = sorted({v["id"] for r in per_rank.values() for v in r.get("violations", [])})
    return {"outcome": "ok" if all(r["outcome"] == "ok" for r in per_rank.values()) else
            "crash", "ranks": sorted(per_rank), "violated_ids": ids,
            "wall_s": round(sum(r["wall_s"] for r in per_rank.values()), 3)}


def beyond_control(violations: list[dict[str, Any]], control_ids: set[str]) -> list[dict[str, Any]]:
    """The violations a healthy control run of the same configuration did not show."""
    return [v for v in violations if v["id"] not in control_ids]


def render_report(report: dict[str, Any]) -> str:
    """The full report as plain text, for the file the agent can open."""
    run = report["run"]
    lines = [f"# TrainCheck diagnostic: {run['config']}", "",
             f"outcome: {report['outcome']}"]
    if report.get("cause"):
        lines.append(f"cause: {report['cause']}")
    lines.append(f"collect {run['wall_s']:.1f} s; check "
                 f"{report.get('check', {}).get('wall_s', 0):.1f} s"
                 + ("; collected selectively (only the torch calls the frozen invariants "
                    "name were recorded)" if run.get("selective") else ""))
    new = report.get("new_violations", [])
    lines += ["", f"violations beyond the healthy control: {len(new)}"]
    for v in new:
        where = f"step {v['first_step']}" if v["first_step"] is not None else "step unknown"
        lines.append(f"- [{v['relation']}] {v['rule']} (first at {where}, ranks {v['ranks']})")
    if report.get("control_violations_seen"):
        lines.append(f"(also {report['control_violations_seen']} violation(s) that the healthy "
                     "control run shows too; not reported)")
    resumed = report.get("resume")
    if resumed:
        lines += ["", f"resume probe (a checkpoint at step {resumed['save_every']}, a run "
                  "resumed from it, compared with the straight run step by step): "
                  f"{resumed['outcome']} in {resumed['wall_s']:.1f} s"
                  + (f"; {resumed['n_checked']} resume rules checked, "
                     f"{resumed['n_not_triggered']} not triggered" if "n_checked" in resumed
                     else f"; {resumed['cause']}")]
    if run.get("output_tail") and report["outcome"].startswith("diagnostic_"):
        lines += ["", "program output (tail):", run["output_tail"]]
    return "\n".join(lines) + "\n"


def _resume_part(src: Path, out: Path, config: str, train_args: list[str], rules: Path,
                 spec: dict[str, Any], wall_s: float, selective: bool) -> dict[str, Any]:
    """The resume probe of ``src`` checked against the frozen resume rules."""
    from diagnostics import resume  # resume.py imports this module

    probed = resume.probe(src, out, config, train_args, spec, wall_s=wall_s,
                          selective=selective)
    part: dict[str, Any] = {"outcome": probed["outcome"], "cause": probed["cause"],
                            "wall_s": probed["wall_s"], "save_every": probed["save_every"],
                            "violations": []}
    if probed["outcome"] == "ok":
        checked = resume.check(out / "straight" / "trace", out / "resumed" / "trace",
                               read_invariants(rules))
        part.update(violations=checked["violations"], n_checked=checked["n_checked"],
                    n_not_triggered=checked["n_not_triggered"])
    return part


def diagnose(src: Path, out: Path, config: str, train_args: list[str], reference: Path,
             wall_s: float, resume_spec: dict[str, Any] | None = None,
             selective: bool = False, overlap: float | None = None) -> dict[str, Any]:
    """Trace ``src`` under ``config`` in a scratch copy, check it against the frozen reference
    invariants, and keep the violations beyond those of the healthy control; with
    ``resume_spec`` (the packet's ``diagnostics.resume``), also run the resume probe and
    check it against the frozen resume rules. ``selective``: collect only what the frozen
    invariants name, and ``overlap``: check at that liveness-overlap threshold, as the
    reference's policy runs did (its manifest says both)."""
    invariants = reference / f"{config}.invariants.json"
    control_file = reference / f"{config}.control.json"
    rules = reference / f"{config}.resume.json"
    if not invariants.exists() or not control_file.exists():
        raise ValueError(f"no frozen reference for {config} under {reference}")
    if resume_spec is not None and not rules.exists():
        raise ValueError(f"no frozen resume rules for {config} under {reference}")
    control_ids = set(json.loads(control_file.read_text())["violated_ids"])
    started = time.monotonic()
    run = collect_run(src, out / "run", config, train_args, traced=True, wall_s=wall_s,
                      invariants=invariants if selective else None)
    report: dict[str, Any] = {"config": config, "run": run, "report_path": str(out / "report.md")}
    if run["outcome"] != "ok":
        report.update(outcome=f"diagnostic_{run['outcome']}", cause=run["cause"])
    else:
        elapsed = time.monotonic() - started

        def begun(part: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
            # When a part began, in seconds from the answer's start: the record of the overlap.
            begin = round(time.monotonic() - started, 3)
            return {**part(*args), "started_s": begin}

        # The resume probe runs beside the check, not after it: the check reads only the
        # traced run's finished trace and the probe only makes runs of its own, so neither
        # sees the other, and the check's verdict cannot depend on timing (it is offline).
        # The answer then costs the longer of the two instead of their sum (the session's
        # container has two CPUs; the check is one single-threaded process). Both end
        # within the answer's wall limit: the check has what is left of it, each of the
        # probe's two runs half.
        probing: Future[dict[str, Any]] | None = None
        with ThreadPoolExecutor(max_workers=1) as pool:
            if resume_spec is not None:
                probing = pool.submit(begun, _resume_part, src, out / "resume", config,
                                      train_args, rules, resume_spec,
                                      max(60.0, wall_s - elapsed) / 2, selective)
            checked = begun(check, Path(run["trace_dir"]), invariants, out / "check",
                            max(30.0, wall_s - elapsed), overlap)
            part = probing.result() if probing is not None else None
        report["check"] = checked
        if part is not None:
            report["resume"] = part
        if checked["outcome"] != "ok":
            report.update(outcome=f"checker_{checked['outcome']}", cause=checked["cause"])
        else:
            new = beyond_control(checked["violations"], control_ids)
            report.update(outcome="violations" if new else "no_new_violations", cause="",
                          new_violations=new,
                          control_violations_seen=len(checked["violations"]) - len(new))
            if part is not None:
                # Every frozen resume rule survived the healthy policy probes: no control.
                new += part["violations"]
                if new:
                    report.update(outcome="violations", new_violations=new)
                if part["outcome"] != "ok":
                    cause = f"resume probe: {part['cause']}"
                    if new:  # a verdict stands; the probe's failure is said beside it
                        report["cause"] = cause
                    else:  # nothing found is not clean when the resume went unchecked
                        report.update(outcome=f"resume_probe_{part['outcome']}", cause=cause)
    report["wall_s"] = round(time.monotonic() - started, 3)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(render_report(report))
    return report
