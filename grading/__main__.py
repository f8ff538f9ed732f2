"""``python -m grading``: grade one diff against one task, write ``--out/grade.json``.

Exit status: 0 whenever grade.json was written (whatever the verdict), 2 for bad arguments or
inputs, 1 for a grader bug. Failures print one line on stderr; a bug's traceback goes to
``--out/grader-error.log``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import NoReturn

from grading import sealed
from grading.errors import GraderError
from grading.grade import grade, write_report
from grading.layout import GradeOptions
from grading.packet import load_packet_spec

EXIT_BAD_INPUT = 2
EXIT_BUG = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"grading: error: {message} (see python -m grading --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m grading", description="Grade one submission's diff.")
    p.add_argument("--baseline", type=Path, required=True, help="pristine repo/ of the packet")
    p.add_argument("--packet", type=Path, required=True, help="the packet's packet.yaml")
    p.add_argument("--diff", type=Path, required=True, help="git diff --binary to grade")
    p.add_argument("--hidden", type=Path, required=True, help="hidden/<task> (with checks/)")
    p.add_argument("--out", type=Path, required=True, help="folder for grade.json and logs")
    p.add_argument("--submission-id", required=True)
    p.add_argument(
        "--work",
        type=Path,
        default=None,
        help="scratch folder (must be new or empty; kept); default: a temp folder, removed",
    )
    p.add_argument(
        "--expect-hidden-sha256",
        default=None,
        help="refuse to grade unless --hidden has this digest (the host always sends it)",
    )
    p.add_argument(
        "--hidden-timeout-s",
        type=float,
        default=1800.0,
        help="wall time for all hidden checks together",
    )
    p.add_argument(
        "--hidden-test-timeout-s",
        type=float,
        default=300.0,
        help="a hidden test that runs longer is killed and reported as hang",
    )
    return p


def _check_inputs(args: argparse.Namespace) -> str | None:
    """The first problem with the arguments, as one line; None when they are usable."""
    if not args.submission_id.strip():
        return "--submission-id is empty"
    if not args.baseline.is_dir():
        return f"--baseline {args.baseline} is not a directory"
    if not args.diff.is_file():
        return f"--diff {args.diff} is not a file"
    if not args.hidden.is_dir():
        return f"--hidden {args.hidden} is not a directory"
    if args.hidden_timeout_s <= 0 or args.hidden_test_timeout_s <= 0:
        return "timeouts must be positive"
    if (args.out / "grade.json").exists():
        return f"{args.out / 'grade.json'} already exists; grade into a new --out folder"
    if args.work is not None and args.work.exists():
        if not args.work.is_dir() or any(args.work.iterdir()):
            return f"--work {args.work} exists and is not an empty directory"
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if (problem := _check_inputs(args)) is not None:
        print(f"grading: error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        sealed.candidate_uids()
    except sealed.SealError as exc:
        print(f"grading: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        packet = load_packet_spec(args.packet)
    except ValueError as exc:
        print(f"grading: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_BAD_INPUT

    args.out.mkdir(parents=True, exist_ok=True)
    keep_work = args.work is not None
    work = args.work if keep_work else Path(tempfile.mkdtemp(prefix="grading-work-"))
    work.mkdir(parents=True, exist_ok=True)
    opts = GradeOptions(
        baseline=args.baseline.resolve(),
        packet=packet,
        diff=args.diff.resolve(),
        hidden=args.hidden.resolve(),
        out=args.out.resolve(),
        submission_id=args.submission_id,
        work=work.resolve(),
        hidden_timeout_s=args.hidden_timeout_s,
        hidden_test_timeout_s=args.hidden_test_timeout_s,
        expect_hidden_sha256=args.expect_hidden_sha256,
        announce=True,
    )
    try:
        report = grade(opts)
        path = write_report(report, opts.out)
    except (GraderError, sealed.SealError) as exc:
        print(f"grading: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:
        log = opts.out / "grader-error.log"
        log.write_text(traceback.format_exc())
        print(
            f"grading: internal error: {type(exc).__name__}: {exc} (traceback in {log})",
            file=sys.stderr,
        )
        return EXIT_BUG
    finally:
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"grading: {report.verdict}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
