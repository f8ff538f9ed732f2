"""Generate ``docs/records.md`` from the record models, so the reference cannot drift.

``python -m harness.records.doc`` rewrites the file; ``--check`` exits 1 when it is stale.
CI's unit layer fails on a stale file (tests/unit/records/test_events.py).
"""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any

from pydantic import BaseModel

from grading.models import GradeReport
from harness.paths import REPO_ROOT
from harness.records import chains, events, outcomes
from harness.records.attempt import (
    CHAINS_NAME,
    GRADE_SUMMARY_NAME,
    JUDGEMENTS_NAME,
    MANIFEST_NAME,
    RECORD_NAME,
    SESSION_SCHEMA_VERSION,
    TRANSCRIPT_NAME,
    DiffSummary,
    GradeSummary,
    LaunchInfo,
    SessionRecord,
    TranscriptHead,
)
from harness.records.budget import Usage
from harness.records.grades import SnapshotGrade, SnapshotGrades

DOC_PATH = REPO_ROOT / "docs" / "records.md"

ATTEMPT_FILES = [
    (RECORD_NAME, "The session record (below): assignment, image, status, outcome, usage, "
     "the diff's summary and the transcript's head hash; written when the session ends and "
     "never again (records of earlier versions also list grade summaries)."),
    (TRANSCRIPT_NAME, "The hash-chained event log (below), one JSON object per line; "
     "`harness verify` checks the chain against the head in the record and the manifest."),
    ("blobs/<sha256>", "Strings too long to inline in an event, stored once under their sha256 "
     "(read-only); the event holds a `TextBlob` reference."),
    ("artifacts/NNNN-<tool>.log", "A tool call's whole output when it was longer than what the "
     "transcript keeps (`tool_result.artifact` names it)."),
    ("baseline/", "The packet's repository as the agent received it (host copy)."),
    ("final/", "The workspace copied out of the container at the end (regular files only)."),
    ("submission.diff", "`git diff` of final/ against baseline/: what is graded."),
    ("snapshots/NNNN.diff", "The code as a diff against baseline/ at each candidate run, "
     "public-test run, diagnostic call, submit and budget stop (`snapshot` events)."),
    (MANIFEST_NAME, "sha256 of every file above, written when the session ends; a grading "
     "adds its own files and never changes an entry. `harness verify` checks every entry, and "
     "the diff, final tree and snapshots against the digests their events recorded."),
    (f"grades/grade-N/{GRADE_SUMMARY_NAME}", "The grading's summary (`GradeSummary`, below), "
     "written once by the host."),
    ("grades/grade-N/grader.json", "The host's record of one grading: grader image, submission "
     "id, the digests the grade must carry, exit code, and the reason of a `grader_error`."),
    ("grades/grade-N/out/grade.json", "The grade (below), bound to this submission."),
    ("grades/grade-N/out/logs/", "Inert evidence from the grader: regular files only; anything "
     "else is listed in `out/refused.txt`."),
    ("grades/grade-N/grader-output.log", "The grader container's own output."),
    ("grades/snapshots.json", "`harness grade --snapshots`: each snapshot's verdict and "
     "per-contract outcomes (below), graded blind in `grades/snapshots/grade-N/` folders "
     "numbered in a random order; snapshots of the same diff share one grading "
     "(`same_diff_as` names the first)."),
    ("grades/snapshots/grade-N/reused.json", "Only in a copied grading: another verified "
     "attempt of the study had graded exactly these inputs (grader image and code, task, "
     "packet.yaml, baseline, hidden tree, diff), and this folder is a byte copy of that "
     "grading; names its folder and the sha256 of its manifest (`harness grade --snapshots "
     "--no-reuse` grades afresh)."),
    (CHAINS_NAME, "`harness audit propose`: the candidate evidence chains (below), "
     "bound to the transcript's sha256; never listed in the manifest."),
    (JUDGEMENTS_NAME, "`harness audit judge`: auditors' judgements, one `judgement` "
     "event each (below), append-only and hash-chained like the transcript; never listed in "
     "the manifest."),
]


def _type_name(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    if inspect.isclass(annotation) and not getattr(annotation, "__args__", None):
        text = annotation.__name__
    text = re.sub(r"\b(?:typing|pathlib|harness\.[a-z_.]+|grading\.[a-z_.]+)\.", "", text)
    text = text.replace("NoneType", "None").replace("<class '", "").replace("'>", "")
    # A validated string (its validator's repr holds an address): name what it admits.
    text = re.sub(r"Annotated\[str, AfterValidator\(.*?\)\]", "SessionOutcome", text)
    return re.sub(r"^Optional\[(.*)\]$", r"\1 | None", text)


def _first_line(model: type[BaseModel]) -> str:
    doc = inspect.getdoc(model) or ""
    base = inspect.getdoc(events.EventData) or ""
    if doc == base:
        return ""
    return " ".join(doc.split("\n\n")[0].split())


def _fields(model: type[BaseModel]) -> list[str]:
    lines = ["| field | type | required |", "| --- | --- | --- |"]
    for name, field in model.model_fields.items():
        if field.is_required():
            required = "yes"
        elif field.default_factory is not None:
            required = "no (default empty)"
        else:
            required = f"no (default `{field.default!r}`)"
        lines.append(f"| `{name}` | `{_type_name(field.annotation)}` | {required} |")
    return lines


def render() -> str:
    out = [
        "# Records",
        "",
        "<!-- Generated by `python -m harness.records.doc` from the models; do not edit. -->",
        "",
        "What a session leaves behind and the format of each record. Every record is a "
        "pydantic model in the code; this page is generated from those models and CI checks "
        "it is current.",
        "",
        "## An attempt folder",
        "",
        "`runs/<study>/<session>/attempt-N/` holds:",
        "",
        "| path | what |",
        "| --- | --- |",
        *[f"| `{path}` | {what} |" for path, what in ATTEMPT_FILES],
        "",
        f"## `{RECORD_NAME}` (schema version {SESSION_SCHEMA_VERSION})",
        "",
        "A record without `schema_version` was written before the field existed (version 1).",
        "",
        *_fields(SessionRecord),
        "",
        "`outcome` is one of: " + ", ".join(f"`{o}`" for o in outcomes.known_outcomes())
        + " (harness/records/outcomes.py says which are the agent's and which are infrastructure "
        "failures a matrix retries).",
        "",
        *[line for model in (GradeSummary, DiffSummary, TranscriptHead,
                             LaunchInfo, Usage)
          for line in (f"`{model.__name__}`:", "", *_fields(model), "")],
        "## `grade.json`",
        "",
        *_fields(GradeReport),
        "",
        "## `grades/snapshots.json`",
        "",
        *_fields(SnapshotGrades),
        "",
        "Each entry of `snapshots`:",
        "",
        *_fields(SnapshotGrade),
        "",
        f"## `{CHAINS_NAME}` (schema version {chains.CHAINS_SCHEMA_VERSION})",
        "",
        _first_line(chains.ChainProposal),
        "",
        *_fields(chains.ChainProposal),
        "",
        *[line for model in (chains.Chain, chains.Observation, chains.Violation,
                             chains.Message, chains.Edit, chains.OtherCall,
                             chains.NextRun, chains.SnapshotState)
          for line in (f"`{model.__name__}`: {_first_line(model)}", "", *_fields(model), "")],
        f"## `{JUDGEMENTS_NAME}`",
        "",
        "Each line is an event as in the transcript (`seq`, `ts`, `kind`, `data`, `prev_hash`, "
        f"`hash`), of kind `{chains.JUDGEMENT_KIND}`; its `data`:",
        "",
        *_fields(chains.Judgement),
        "",
        "`category` is one of: " + ", ".join(f"`{c}`" for c in chains.CATEGORIES) + ".",
        "",
        "## Transcript events",
        "",
        "Each line of the transcript is an event: `seq` (from 0), `ts` (UTC), `kind`, `data`, "
        "`prev_hash` and `hash` (sha256 of the canonical JSON of the event without `hash`, "
        "chained through `prev_hash`). Any string in `data` longer than the inline limit is "
        "replaced by a `TextBlob` (`blob`: sha256, `size`, `text`: encoding) stored under "
        "`blobs/`. The kinds, in the order a session usually writes them:",
        "",
    ]
    for kind, model in events.EVENT_DATA.items():
        out += [f"### `{kind}`", ""]
        summary = _first_line(model)
        if summary:
            out += [summary, ""]
        out += [*_fields(model), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = DOC_PATH.read_text() if DOC_PATH.exists() else ""
        if current != text:
            print(f"error: {DOC_PATH.relative_to(REPO_ROOT)} is stale; fix: run "
                  "`python -m harness.records.doc` and commit it", file=sys.stderr)
            return 1
        return 0
    DOC_PATH.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
