"""``python -m diagnostics <command>``: the contained TrainCheck runner's command line.

Every command prints one JSON object on its last stdout line (what the harness parses) and
exits 0 when the command itself worked, even if the diagnosed program crashed: that is a
finding recorded in the JSON, not an error of the runner.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from diagnostics import checking, collect, inspect, resume, transparency


def _emit(obj: object) -> None:
    text = json.dumps(obj, sort_keys=True)
    # Long results (hundreds of violations) go to a file too, past any output cap.
    result_file = os.environ.get("DIAGNOSTICS_RESULT")
    if result_file:
        Path(result_file).write_text(text + "\n")
    print(text)


def _overlap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--liveness-overlap", type=float,
                        help="TrainCheck's liveness-overlap threshold for the check "
                        "(default: TrainCheck's own, 1%%)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diagnostics")
    sub = parser.add_subparsers(dest="command", required=True)

    p_run = sub.add_parser("run", help="run one configuration, plain or traced")
    p_run.add_argument("--src", type=Path, required=True)
    p_run.add_argument("--out", type=Path, required=True)
    p_run.add_argument("--config", required=True)
    p_run.add_argument("--traced", action="store_true")
    p_run.add_argument("--wall-s", type=float, default=600.0)
    p_run.add_argument("--invariants", type=Path)
    p_run.add_argument("train_args", nargs=argparse.REMAINDER)

    p_inspect = sub.add_parser("inspect", help="what a trace folder actually recorded")
    p_inspect.add_argument("--trace", type=Path, required=True)

    p_infer = sub.add_parser("infer", help="learn invariants from trace folders")
    p_infer.add_argument("--trace", type=Path, nargs="+", required=True)
    p_infer.add_argument("--out", type=Path, required=True)
    p_infer.add_argument("--relations", nargs="+", required=True)
    p_infer.add_argument("--wall-s", type=float, default=1800.0)

    p_check = sub.add_parser("check", help="check a trace folder against invariants")
    p_check.add_argument("--trace", type=Path, required=True)
    p_check.add_argument("--invariants", type=Path, required=True)
    p_check.add_argument("--out", type=Path, required=True)
    p_check.add_argument("--wall-s", type=float, default=900.0)
    _overlap_option(p_check)

    p_split = sub.add_parser("check-per-rank", help="check each rank's trace on its own")
    p_split.add_argument("--trace", type=Path, required=True)
    p_split.add_argument("--invariants", type=Path, required=True)
    p_split.add_argument("--out", type=Path, required=True)
    p_split.add_argument("--wall-s", type=float, default=900.0)
    _overlap_option(p_split)

    p_diag = sub.add_parser("diagnose", help="trace a tree, check it, compare with control")
    p_diag.add_argument("--src", type=Path, required=True)
    p_diag.add_argument("--out", type=Path, required=True)
    p_diag.add_argument("--config", required=True)
    p_diag.add_argument("--reference", type=Path, required=True,
                        help="folder with <config>.invariants.json and <config>.control.json")
    p_diag.add_argument("--resume-spec", type=json.loads,
                        help="the packet's diagnostics.resume as JSON: also run the resume "
                        "probe against <config>.resume.json")
    p_diag.add_argument("--wall-s", type=float, default=600.0)
    _overlap_option(p_diag)
    p_diag.add_argument("--selective", action="store_true",
                        help="collect only what the frozen invariants name (and no torch call "
                        "in the resume probe), as the reference's policy runs did")
    p_diag.add_argument("train_args", nargs=argparse.REMAINDER)

    p_transp = sub.add_parser("transparency",
                              help="plain vs traced healthy runs: outputs, state, resume")
    p_transp.add_argument("--src", type=Path, required=True)
    p_transp.add_argument("--out", type=Path, required=True)
    p_transp.add_argument("--config", required=True)
    p_transp.add_argument("--save-every", type=int, required=True)
    p_transp.add_argument("--wall-s", type=float, default=600.0, help="per run")
    p_transp.add_argument("--observe-state", action="store_true",
                          help="the traced runs also observe the training state")
    p_transp.add_argument("--invariants", type=Path,
                          help="the traced runs collect selectively for these invariants")
    p_transp.add_argument("train_args", nargs=argparse.REMAINDER)

    p_probe = sub.add_parser("resume-probe",
                             help="a straight traced run and its resume from a mid checkpoint")
    p_probe.add_argument("--src", type=Path, required=True)
    p_probe.add_argument("--out", type=Path, required=True)
    p_probe.add_argument("--config", required=True)
    p_probe.add_argument("--spec", type=json.loads, required=True,
                         help="the packet's diagnostics.resume, as JSON")
    p_probe.add_argument("--wall-s", type=float, default=600.0, help="per run")
    p_probe.add_argument("--selective", action="store_true",
                         help="record no torch call, only parameters and observed state")
    p_probe.add_argument("train_args", nargs=argparse.REMAINDER)

    p_rlearn = sub.add_parser("resume-learn", help="resume rules a healthy probe satisfies")
    p_rlearn.add_argument("--probe", type=Path, required=True, help="a resume-probe folder")
    p_rlearn.add_argument("--out", type=Path, required=True)

    p_rcheck = sub.add_parser("resume-check", help="check a resume probe against rules")
    p_rcheck.add_argument("--probe", type=Path, required=True, help="a resume-probe folder")
    p_rcheck.add_argument("--rules", type=Path, required=True)

    a = parser.parse_args(argv)
    train_args = [x for x in getattr(a, "train_args", []) if x != "--"]
    try:
        if a.command == "run":
            _emit(collect.run(a.src, a.out, a.config, train_args, traced=a.traced,
                              wall_s=a.wall_s, invariants=a.invariants))
        elif a.command == "inspect":
            _emit(inspect.inspect_trace(a.trace))
        elif a.command == "infer":
            _emit(checking.infer(a.trace, a.out, a.relations, a.wall_s))
        elif a.command == "check":
            _emit(checking.check(a.trace, a.invariants, a.out, a.wall_s, a.liveness_overlap))
        elif a.command == "check-per-rank":
            _emit(checking.check_per_rank(a.trace, a.invariants, a.out, a.wall_s,
                                          a.liveness_overlap))
        elif a.command == "diagnose":
            _emit(checking.diagnose(a.src, a.out, a.config, train_args, a.reference,
                                    a.wall_s, resume_spec=a.resume_spec,
                                    selective=a.selective, overlap=a.liveness_overlap))
        elif a.command == "transparency":
            _emit(transparency.transparency(a.src, a.out, a.config, train_args,
                                            save_every=a.save_every, wall_s=a.wall_s,
                                            observe_state=a.observe_state,
                                            invariants=a.invariants))
        elif a.command == "resume-probe":
            _emit(resume.probe(a.src, a.out, a.config, train_args, a.spec, wall_s=a.wall_s,
                               selective=a.selective))
        elif a.command == "resume-learn":
            rules = resume.learn(a.probe / "straight" / "trace", a.probe / "resumed" / "trace")
            if a.out.exists():
                raise FileExistsError(f"rules file {a.out} exists; learn into a fresh one")
            a.out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rules))
            _emit({"outcome": "ok", "n_rules": len(rules), "out": str(a.out)})
        elif a.command == "resume-check":
            _emit(resume.check(a.probe / "straight" / "trace", a.probe / "resumed" / "trace",
                               checking.read_invariants(a.rules)))
    except (OSError, ValueError) as exc:
        _emit({"error": f"{type(exc).__name__}: {exc}"})
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
