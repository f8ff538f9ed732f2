"""Faces of reading an attempt back: verify, replay, evidence chains."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from harness.cli.common import (
    DEFAULT_RUNS,
    AttemptArgument,
    RunsOption,
    StudyOption,
    clear_errors,
    console,
    fail,
    legacy_group,
    log,
    study_path,
)
from harness.errors import HarnessError


@clear_errors
def verify(
    target: Annotated[str, typer.Argument(
        metavar="ATTEMPT", help="attempt folder, its transcript.jsonl, or STUDY/SESSION (the "
        "attempt the study counts)")],
    runs: RunsOption = DEFAULT_RUNS,
) -> None:
    """Verify an attempt: the transcript's hash chain and blobs, its end against the one the
    session recorded, every file the manifest lists, and the diff, final tree and snapshots
    against the digests the transcript recorded; exit 1 naming the first problem."""
    from harness.records.attempt import resolve_attempt
    from harness.records.verify import verify_records

    path = Path(target)
    if not path.exists():
        path = resolve_attempt(target, runs)
    verdict = verify_records(path)
    if verdict.ok:
        notes = f" ({'; '.join(verdict.notes)})" if verdict.notes else ""
        files = ("; every file matches the manifest, and the diff, final tree and snapshots "
                 "the digests the transcript recorded" if verdict.files_checked else "")
        log(f"ok: {verdict.events} events verified{files}{notes}")
        return
    fail(f"FAILED after {verdict.events} good events: {verdict.error}")


replay = legacy_group(
    "replay", "Verify an attempt's transcript, then show it: a timeline on the terminal, a "
    "self-contained HTML page, an index of a study's pages, or a re-execution of its tool "
    "calls. `harness replay ATTEMPT` is the timeline.",
    legacy={"--reexecute": ("reexecute", None), "--html-index": ("index", "--out"),
            "--html": ("html", "--out")},
    default="timeline")
audit = legacy_group(
    "audit", "Evidence chains: observation -> the agent's messages and edits -> snapshot "
    "grades before and after, and auditors' judgements of them (append-only, bound to the "
    "transcript).",
    legacy={"--propose": ("propose", None), "--judge": ("judge", "--chain"),
            "--show": ("show", None)})

ReplayAttempt = Annotated[str, typer.Argument(
    metavar="ATTEMPT", help="attempt folder, its transcript.jsonl, or STUDY/SESSION (the "
    "attempt the study counts)")]


def _load_replay(attempt: str, runs: Path) -> Any:
    from harness.audit import replay as rp
    from harness.records.attempt import AttemptPaths, resolve_attempt

    target = Path(attempt)
    if not (target.is_file() or AttemptPaths(root=target).transcript.is_file()):
        target = resolve_attempt(attempt, runs)
    return rp.load(target)


@replay.command("timeline")
@clear_errors
def replay_timeline(
    attempt: ReplayAttempt,
    kind: Annotated[list[str] | None, typer.Option(
        "--kind", metavar="KIND", help="only events of this kind (repeatable)")] = None,
    tool: Annotated[list[str] | None, typer.Option(
        "--tool", metavar="TOOL", help="only calls and results of this tool (repeatable)")]
    = None,
    grep: Annotated[str | None, typer.Option(
        metavar="TEXT",
        help="only events whose text holds TEXT (case-insensitive; blobs searched too)")]
    = None,
    runs: RunsOption = DEFAULT_RUNS,
) -> None:
    """The attempt's timeline; exit 1 when its transcript is broken.

    A broken chain is shown where it breaks, and every event from there on is marked
    UNVERIFIED; a damaged line is always shown, whatever the filters.
    """
    from harness.audit import timeline

    loaded = _load_replay(attempt, runs)
    filters = timeline.Filters(kinds=kind or [], tools=tool or [], grep=grep)
    timeline.print_timeline(loaded, timeline.select(loaded, filters), console, filters=filters)
    if not loaded.verification.ok:
        sys.exit(1)


@replay.command("html")
@clear_errors
def replay_html(
    attempt: ReplayAttempt,
    out: Annotated[Path, typer.Option(metavar="FILE", help="the page to write")],
    runs: RunsOption = DEFAULT_RUNS,
) -> None:
    """A self-contained HTML viewer of the whole attempt (no network, no foreign script).
    An attempt that does not verify is refused, and nothing is written: `harness replay
    timeline` shows where it breaks."""
    from harness.audit import viewer

    if out.is_dir():
        raise HarnessError(f"--out {out} is a folder", "name the page's file, e.g. page.html")
    loaded = _load_replay(attempt, runs)
    if not loaded.verification.ok:
        raise HarnessError(f"{loaded.attempt_dir} does not verify: {loaded.verification.error}",
                           "see where it breaks with `harness replay timeline`; no page was "
                           "written")
    viewer.write(loaded, out)
    log(f"wrote {out}")


@replay.command("index")
@clear_errors
def replay_index(
    out: Annotated[Path, typer.Option(metavar="DIR", help="folder for the pages")],
    study: StudyOption = None,
) -> None:
    """A viewer for every attempt of a study and an index.html linking them; exit 1 when a
    transcript is broken."""
    from harness.audit import viewer
    from harness.records.study import launch_order, load_study

    if out.exists() and not out.is_dir():
        raise HarnessError(f"--out {out} is a file", "name a folder for the pages")
    loaded = load_study(study_path(study))
    order = [a.session_id for a in launch_order(loaded)]
    index, rows = viewer.write_index(loaded.name, loaded.runs_root(), order, out)
    broken = [row for row in rows if not row.ok]
    log(f"wrote {index} ({len(rows)} rows, {len(broken)} broken transcript(s))")
    if broken:
        sys.exit(1)


@replay.command("reexecute")
@clear_errors
def replay_reexecute(attempt: ReplayAttempt, runs: RunsOption = DEFAULT_RUNS) -> None:
    """Run the recorded tool calls again in a fresh container of the recorded image on the
    recorded baseline, compare every result and the final diff; exit 1 listing every
    divergence."""
    from rich.text import Text

    from harness.audit.reexecute import reexecute as run_again
    from harness.audit.reexecute import report_lines
    from harness.text import inert_block

    def inert(message: str) -> None:
        console.print(Text(inert_block(message)), soft_wrap=True)

    loaded = _load_replay(attempt, runs)
    inert(loaded.verification.line())
    report = run_again(loaded.attempt_dir, loaded=loaded, log=inert)
    for line in report_lines(report):
        inert(line)
    if not report.reproduced:
        sys.exit(1)


@audit.command("propose")
@clear_errors
def audit_propose(attempt: AttemptArgument, runs: RunsOption = DEFAULT_RUNS) -> None:
    """Verify the transcript, propose the evidence chains and write them to
    audit/chains.json."""
    from rich.text import Text

    from harness.audit import evidence
    from harness.records.attempt import AttemptPaths, resolve_attempt

    folder = resolve_attempt(attempt, runs)
    proposal = evidence.propose(folder)
    table = Table(title=f"evidence chains of {proposal.session_id} attempt "
                        f"{proposal.attempt} ({proposal.arm})", show_lines=True)
    columns = ("chain", "observation", "response", "next run", "before", "after",
               "improved", "regressed")
    for column in columns:
        table.add_column(column, overflow="fold")
    for chain in proposal.chains:
        cells = evidence.describe(chain)
        # Transcript text: a Text is never read as markup, and inert() shows escapes.
        table.add_row(*(Text(evidence.inert(cells[c])) for c in columns))
    if proposal.chains:
        console.print(table)
    else:
        log("no chain: no diagnostic report and no failed run of the agent's own")
    graded = ("snapshot grades " + proposal.snapshot_grades_sha256[:16]
              if proposal.snapshot_grades_sha256 else
              "snapshots not graded (harness grade ATTEMPT --snapshots)")
    log(f"{len(proposal.chains)} chain(s), bound to transcript sha256 "
        f"{proposal.transcript_sha256[:16]}... ({graded}); wrote "
        f"{AttemptPaths(root=folder).chains}")


@audit.command("judge")
@clear_errors
def audit_judge(
    attempt: AttemptArgument,
    chain: Annotated[str, typer.Option(metavar="CHAIN", help="the chain judged")],
    category: Annotated[str, typer.Option(
        metavar="CATEGORY", help="helped, no_defect_present, no_applicable_rule, "
        "tool_not_used, diagnostic_ignored or diagnostic_misleading")],
    auditor: Annotated[str, typer.Option(metavar="NAME", help="who judges")],
    note: Annotated[str, typer.Option(metavar="TEXT", help="why, in a few words")] = "",
    runs: RunsOption = DEFAULT_RUNS,
) -> None:
    """Record an auditor's judgement of one chain (append-only, hash-chained)."""
    from harness.audit import evidence
    from harness.records.attempt import AttemptPaths, resolve_attempt

    folder = resolve_attempt(attempt, runs)
    evidence.judge(folder, chain, category, auditor, note)
    log(evidence.inert(f"recorded: chain {chain} {category} by {auditor} in "
                       f"{AttemptPaths(root=folder).judgements}"))


@audit.command("show")
@clear_errors
def audit_show(attempt: AttemptArgument, runs: RunsOption = DEFAULT_RUNS) -> None:
    """The judgements recorded, their chain verified; exit 1 when one was made on another
    transcript than the one in the folder now."""
    from rich.text import Text

    from grading.hashing import file_sha256
    from harness.audit import evidence
    from harness.records.attempt import AttemptPaths, resolve_attempt

    folder = resolve_attempt(attempt, runs)
    recorded = evidence.read_judgements(folder)
    current = evidence.transcript_sha256(folder)
    chains_path = AttemptPaths(root=folder).chains
    proposal_now = file_sha256(chains_path) if chains_path.is_file() else None
    table = Table(title=f"judgements of {folder} (chain verified)")
    for column in ("#", "at", "chain", "category", "auditor", "note", "transcript",
                   "proposal"):
        table.add_column(column, overflow="fold")
    for entry in recorded:
        j = entry.judgement
        table.add_row(*(Text(evidence.inert(cell)) for cell in (
            str(entry.seq), j.at, j.chain, j.category, j.auditor, j.note or "-",
            "this one" if j.transcript_sha256 == current else "ANOTHER",
            "current" if j.chains_sha256 == proposal_now else "an earlier one")))
    console.print(table)
    log(f"{len(recorded)} judgement(s); transcript sha256 {current[:16]}...")
    if any(e.judgement.transcript_sha256 != current for e in recorded):
        fail("error: some judgements were made on another transcript than the one in this "
             "folder now (fix: find out why it changed)")
