"""``harness replay``: a real scripted session with hostile output, read back in a terminal
and in headless Chromium; tampered, cut and damaged transcripts shown broken where they break.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from harness.audit import replay, timeline, viewer
from harness.records import events
from harness.records.attempt import (
    TRANSCRIPT_NAME,
    AttemptPaths,
    TranscriptHead,
    manifest_problem,
    read_record,
    write_manifest,
    write_record,
)
from harness.records.grades import SnapshotGrade, SnapshotGrades
from harness.records.transcript import TranscriptWriter, read_events
from harness.study.session import SessionOptions, run_session
from tests.conftest import write_script, write_study

CHROMIUM = "/usr/bin/chromium"
# What an agent (or a program it runs) could print to attack a terminal or a page.
SCRIPT_TAG = "</script><script>alert(1)</script>"
ANSI = "\x1b[31mRED\x1b[0m"
TITLE_ESCAPE = "\x1b]0;pwned\x07"
MARKUP = "[bold red]markup[/bold red]"
BIDI = "\u202eevil"
HOSTILE_TOOL = "</script><script>alert(4)</script>"
BIG_MARK = "END-OF-BIG"
PAGE_NAME = "hostile-page.html"


@pytest.fixture(scope="module")
def attempt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real session in the control image whose outputs carry every hostile string."""
    tmp = tmp_path_factory.mktemp("replay")
    printed = (f"printf '%s %s %s %s %s\\n' '{ANSI}' '{TITLE_ESCAPE}' '{MARKUP}' "
               f"'{SCRIPT_TAG}' '{BIDI}'")
    script = write_script(tmp, [
        {"tool": "bash", "args": {"command": printed},
         "text": f"thinking out loud: {SCRIPT_TAG} <img src=x onerror=alert(2)> {ANSI}"},
        # Over the 64 KiB shown to the model: the output is cut, kept whole in the artifact,
        # and the transcript stores it as a blob.
        {"tool": "bash", "args": {"command": "head -c 200000 /dev/zero | tr '\\0' a; echo; "
                                             f"echo {BIG_MARK}"}},
        {"tool": HOSTILE_TOOL, "args": {"x": SCRIPT_TAG}},
        {"tool": "write_file", "args": {"path": PAGE_NAME,
                                        "content": f"<p>{SCRIPT_TAG}</p>\n"}},
        {"tool": "submit", "args": {"summary": f"done {MARKUP}"}},
    ])
    study = write_study(tmp, agent={"model": f"scripted:{script}"})
    return run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                       log=lambda _m: None)


def _timeline(target: Path, filters: timeline.Filters | None = None) -> str:
    """The terminal timeline as a colour terminal would get it (so markup *would* apply)."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system="truecolor", width=220)
    loaded = replay.load(target)
    filters = filters or timeline.Filters()
    timeline.print_timeline(loaded, timeline.select(loaded, filters), console, filters=filters)
    return buffer.getvalue()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", "replay", *args],
                          capture_output=True, text=True, timeout=120)


def _rows(stdout: str) -> dict[int, str]:
    """Timeline rows by transcript line number."""
    rows = {}
    for text in stdout.splitlines():
        match = re.match(r"^\s*(\d+)\s", text)
        if match and " lines shown" not in text:
            rows[int(match.group(1))] = text
    return rows


def _copy(attempt: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "attempt"
    shutil.copytree(attempt, dest, symlinks=True)
    for path in [dest, *dest.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)
    return dest


# -- the terminal ---------------------------------------------------------------------------------


def test_replay_verifies_then_prints_every_event(attempt: Path) -> None:
    events = read_events(attempt / TRANSCRIPT_NAME)
    result = _cli(str(attempt))
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first == f"transcript verified: {len(events)} events, chain and end intact"
    rows = _rows(result.stdout)
    for line, event in enumerate(events, start=1):
        assert re.match(rf"^\s*{line}\s+{event.seq}\s+[\d.]+\s+{event.kind}\b", rows[line]), (
            line, rows.get(line))
        assert rows[line].rstrip().endswith("ok")
    assert f"{len(events)} of {len(events)} lines shown" in result.stdout
    # Tokens and budgets so far: the last tool call is the 5th of the study's 40.
    assert re.search(r"\btool_call\s+submit\b.*\s5/40\s", result.stdout)
    assert "final grade: not graded" in result.stdout


def test_hostile_output_is_inert_in_the_terminal(attempt: Path) -> None:
    out = _timeline(attempt)
    for live in (ANSI, "\x1b[31m", "\x1b]0;", "\x07", "\u202e"):
        assert live not in out, repr(live)
    # Shown as what it is: escapes spelled out, markup left literal.
    assert "\\x1b[31mRED\\x1b[0m" in out and "\\x1b]0;pwned\\x07" in out
    assert MARKUP in out and "\\u202eevil" in out
    # The tool the model named is shown as a name, not interpreted.
    assert "</script><script>alert(4)" in out


def test_filters_by_kind_tool_and_text(attempt: Path) -> None:
    events = read_events(attempt / TRANSCRIPT_NAME)

    def lines(*args: str) -> set[int]:
        result = _cli(str(attempt), *args)
        assert result.returncode == 0, result.stderr
        return set(_rows(result.stdout))

    calls = {i for i, e in enumerate(events, 1) if e.kind == "tool_call"}
    assert lines("--kind", "tool_call") == calls
    bash = {i for i, e in enumerate(events, 1)
            if e.kind in ("tool_call", "tool_result") and e.data.get("name") == "bash"}
    assert len(bash) == 4 and lines("--tool", "bash") == bash
    # The big output sits in a blob: the search reads it.
    big = lines("--grep", BIG_MARK.lower(), "--kind", "tool_result")
    assert len(big) == 1
    (line,) = big
    assert events[line - 1].data["output_truncated"] is True
    assert set(events[line - 1].data["output"]) == {"blob", "size", "text"}
    assert lines("--kind", "tool_call", "--tool", "write_file", "--grep", PAGE_NAME) == {
        i for i in calls if events[i - 1].data["name"] == "write_file"}


def test_a_tampered_transcript_is_broken_at_the_edited_event(attempt: Path,
                                                             tmp_path: Path) -> None:
    copy = _copy(attempt, tmp_path)
    path = copy / TRANSCRIPT_NAME
    lines = path.read_bytes().splitlines(keepends=True)
    target = next(i for i, line in enumerate(lines)
                  if b'"kind":"tool_result"' in line and b'"exit_code":0' in line)
    lines[target] = lines[target].replace(b'"exit_code":0', b'"exit_code":7', 1)
    path.write_bytes(b"".join(lines))
    result = _cli(str(copy))
    assert result.returncode == 1
    out = result.stdout.splitlines()
    assert out[0].startswith(f"TRANSCRIPT BROKEN at line {target + 1} after {target} good "
                             f"events: event {target} (tool_result)")
    banner = next(i for i, text in enumerate(out) if text.startswith("---- the chain breaks"))
    assert f"at line {target + 1}" in out[banner] and "hash mismatch" in out[banner]
    rows = _rows(result.stdout)
    assert len(rows) == len(lines)  # everything is still shown
    for line, text in rows.items():
        assert text.rstrip().endswith("UNVERIFIED" if line > target else "ok"), text
    assert _rows("\n".join(out[banner + 1:])).keys() == set(range(target + 1, len(lines) + 1))


def test_a_cut_transcript_is_broken_at_its_end_and_a_partial_line_is_shown(
    attempt: Path, tmp_path: Path
) -> None:
    copy = _copy(attempt, tmp_path)
    path = copy / TRANSCRIPT_NAME
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-3]))  # whole events cut off the end
    result = _cli(str(copy))
    assert result.returncode == 1
    assert "TRANSCRIPT BROKEN at its end" in result.stdout.splitlines()[0]
    assert "events were cut off the end" in result.stdout
    assert result.stdout.count("---- the transcript's end does not match the record") == 1
    assert len(_rows(result.stdout)) == len(lines) - 3

    path.write_bytes(b"".join(lines[:-3]) + lines[-3][:40])  # and half a line
    loaded = replay.load(copy)
    assert not loaded.verification.ok
    last = loaded.events[-1]
    assert last.status == "damaged" and "partial last line" in (last.problem or "")
    out = _timeline(copy, timeline.Filters(kinds=["tool_call"]))
    assert "partial last line" in out  # a damaged line passes every filter


def test_a_damaged_line_in_the_middle_is_shown_and_what_follows_is_unverified(
    attempt: Path, tmp_path: Path
) -> None:
    copy = _copy(attempt, tmp_path)
    path = copy / TRANSCRIPT_NAME
    lines = path.read_bytes().splitlines(keepends=True)
    lines[5] = b'{"not": "an event", "ansi": "\\u001b[31m"\n'
    path.write_bytes(b"".join(lines))
    loaded = replay.load(copy)
    assert loaded.verification.break_line == 6
    assert loaded.events[5].status == "damaged"
    assert {e.status for e in loaded.events[6:]} == {"unverified"}
    assert {e.status for e in loaded.events[:5]} == {"verified"}


# -- snapshots and reasoning (formats other parts of issue 15 will write) ----------------------


def test_a_snapshot_event_and_its_grade_are_shown_when_recorded(attempt: Path,
                                                                tmp_path: Path) -> None:
    copy = _copy(attempt, tmp_path)
    patch = f"--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new {SCRIPT_TAG}\n"
    (copy / "snapshots").mkdir(exist_ok=True)
    (copy / "snapshots/0009.diff").write_text(patch)
    with TranscriptWriter(copy / TRANSCRIPT_NAME, events.validate) as writer:
        writer.append("snapshot", {"index": 9, "trigger": "run_public_tests", "call_id": "c9",
                                   "diff": "snapshots/0009.diff", "files_changed": ["x.py"],
                                   "sha256": hashlib.sha256(patch.encode()).hexdigest(),
                                   "bytes": len(patch), "duration_s": 0.1})
        head = TranscriptHead(events=writer.next_seq, head=writer.last_hash)
    record = read_record(copy)
    record.transcript = head
    write_record(copy, record)
    (copy / "grades").mkdir(exist_ok=True)
    AttemptPaths(root=copy).snapshot_grades.write_text(SnapshotGrades(
        graded_at="now", snapshots=[SnapshotGrade(
            index=9, trigger="run_public_tests", call_id="c9", diff_sha256="0" * 64,
            folder="grades/snapshots/grade-1", verdict="incomplete",
            contracts={"public-tests": "pass", "hidden:resume": "fail"})]).model_dump_json())
    write_manifest(copy)
    loaded = replay.load(copy)
    assert loaded.verification.ok, loaded.verification.error
    snap = next(s for s in loaded.snapshots if s.id == "9")  # the session took its own too
    assert snap.grade is not None and snap.grade.contracts["hidden:resume"] == "fail"
    assert "snapshot 9 after run_public_tests" in _timeline(copy)
    assert "grade: incomplete (pass 1, fail 1)" in _timeline(copy)
    page = viewer.render(loaded)
    assert '<table class="strip">' in page and "hidden:resume" in page
    assert SCRIPT_TAG not in page and "+new &lt;/script&gt;" in page


def test_reasoning_blocks_are_shown_escaped(tmp_path: Path) -> None:
    path = tmp_path / TRANSCRIPT_NAME
    with TranscriptWriter(path) as writer:
        writer.append("model_response", {
            "text": "answer", "tool_calls": [], "usage": {"input_tokens": 5, "output_tokens": 7},
            "provider_content": [{"type": "thinking", "thinking": f"hmm {SCRIPT_TAG}"},
                                 {"type": "redacted_thinking", "data": "opaque"},
                                 {"type": "text", "text": "answer"}]})
    loaded = replay.load(path)
    assert loaded.verification.ok and "chain only" in loaded.verification.notes[0]
    page = viewer.render(loaded)
    assert "reasoning 1 (as the provider returned it)" in page
    assert "hmm &lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "redacted" in page and SCRIPT_TAG not in page


# -- the HTML viewer ------------------------------------------------------------------------------


def _data_block(page: str) -> dict[str, object]:
    start = page.index('<script type="application/json" id="replay-data">')
    body = page[start:].split(">", 1)[1]
    body = body[: body.index("</script>")]
    assert "<" not in body and ">" not in body
    return json.loads(body)


def test_the_html_escapes_everything_it_shows(attempt: Path, tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    result = _cli("html", str(attempt), "--out", str(out))
    assert result.returncode == 0, result.stderr
    page = out.read_text()
    assert SCRIPT_TAG not in page and HOSTILE_TOOL not in page and "<img" not in page
    assert page.count("<script") == 2  # the data block and the page's own script
    assert "\x1b" not in page and "\u202e" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page
    data = _data_block(page)
    events = read_events(attempt / TRANSCRIPT_NAME)
    assert data["lines"] == len(events)
    assert HOSTILE_TOOL in {e["tool"] for e in data["events"]}  # type: ignore[attr-defined]
    # The whole big output, from its blob, one click away.
    assert BIG_MARK in page and page.count("a" * 1000) >= 100


def test_the_viewer_in_headless_chromium(attempt: Path, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    assert Path(CHROMIUM).is_file(), "scripts/setup.sh installs Debian's chromium"
    out = tmp_path / "page.html"
    loaded = replay.load(attempt)
    viewer.write(loaded, out)
    term = PAGE_NAME
    expected = {e.line for e in timeline.select(loaded, timeline.Filters(grep=term))}
    assert len(expected) >= 3
    study_file = attempt.parents[3] / "study.yaml"
    index_dir = tmp_path / "index"
    result = _cli("index", "--study", str(study_file), "--out", str(index_dir))
    assert result.returncode == 0, result.stdout + result.stderr

    problems: list[str] = []
    dialogs: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 1600})
        page.on("console", lambda m: problems.append(m.text) if m.type in (
            "error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.on("request", lambda r: problems.append(f"request {r.url}")
                if not r.url.startswith("file://") else None)
        page.goto(out.as_uri())
        assert problems == [] and dialogs == []

        lines = page.eval_on_selector_all("li[data-item]", "els => els.map(e => +e.dataset.line)")
        assert lines == list(range(1, len(loaded.events) + 1))  # every event, in order
        assert page.locator("#count").text_content() == f"{len(lines)} of {len(lines)} shown"
        assert page.eval_on_selector_all("script", "els => els.length") == 2
        assert page.eval_on_selector_all("img", "els => els.length") == 0

        # expect(), not wait_for_function: the page's CSP forbids eval, as it should.
        page.fill("#search", term)
        expect(page.locator("#count")).to_have_text(f"{len(expected)} of {len(lines)} shown")
        shown = page.eval_on_selector_all(
            "li[data-item]:not(.hidden)", "els => els.map(e => +e.dataset.line)")
        assert set(shown) == expected
        page.fill("#search", "")
        expect(page.locator("#count")).to_have_text(f"{len(lines)} of {len(lines)} shown")

        first_bash = next(e.line for e in loaded.events
                          if e.kind == "tool_result" and e.tool == "bash")
        output = page.locator(f"#line-{first_bash} details.out").first
        pre = output.locator("pre")
        assert output.get_attribute("open") is None and not pre.is_visible()
        output.locator("summary").click()
        assert output.get_attribute("open") is not None and pre.is_visible()
        text = pre.text_content() or ""
        assert SCRIPT_TAG in text and MARKUP in text and "\\x1b[31mRED" in text

        shot = tmp_path / "replay-viewer.png"
        page.locator(f"#line-{first_bash}").scroll_into_view_if_needed()
        page.screenshot(path=str(shot))
        print(f"screenshot of the replay viewer: {shot}")

        page.goto((index_dir / "index.html").as_uri())
        links = page.eval_on_selector_all("table.index a", "els => els.map(e => e.href)")
        assert len(links) == 1 and Path(links[0].removeprefix("file://")).is_file()
        assert page.locator("table.index tr[data-item]").count() == 2  # one without attempt
        page.goto(links[0])
        assert page.locator("li[data-item]").count() == len(loaded.events)
        assert problems == [] and dialogs == []
        browser.close()
    assert shot.stat().st_size > 10_000


def test_absurd_numbers_and_nan_do_not_break_the_timeline_or_the_chart(tmp_path: Path) -> None:
    path = tmp_path / TRANSCRIPT_NAME
    with TranscriptWriter(path) as writer:
        writer.append("budget_start", {"budget": {"tool_calls": 10**400, "tokens_total": True},
                                       "deadline_s": 10**400})
        writer.append("budget", {"tool_calls": 10**400, "tokens_total": 3})
    with path.open("ab") as fh:  # no writer emits NaN: a forged line
        fh.write(b'{"data":{"tool_calls":NaN},"hash":"x","kind":"budget","prev_hash":"y",'
                 b'"seq":2,"ts":"2026-01-01T00:00:00.000000Z"}\n')
    loaded = replay.load(path)
    assert loaded.verification.break_line == 3 and loaded.events[2].status == "damaged"
    assert loaded.events[1].progress.tokens_total == 3
    assert loaded.caps == {"tool_calls": None, "tokens_total": None}
    assert "no capped budget" in viewer.budget_chart(loaded)
    assert "3" in _timeline(path)


# -- re-execution ---------------------------------------------------------------------------------


def test_reexecuting_the_scripted_demo_reproduces_every_call_and_the_final_diff(
    tmp_path: Path,
) -> None:
    from harness.audit.reexecute import reexecute

    # The fixture study's own scripted agent: reads, edits, runs a training command, the
    # public tests and a candidate run, submits.
    study = write_study(tmp_path)
    demo = run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                       log=lambda _m: None)
    report = reexecute(demo, log=lambda _m: None)
    record = read_record(demo)
    assert report.divergences == [], report.divergences
    assert len(report.calls) == record.usage.tool_calls  # type: ignore[union-attr]
    assert {c.tool for c in report.calls} >= {"run_public_tests", "run_candidate", "submit"}
    assert report.diff_sha256 == record.diff.sha256  # type: ignore[union-attr]
    folder = Path(report.folder)
    assert folder.parent == demo.parent and (folder / "reexecute.json").is_file()
    assert manifest_problem(demo) is None  # the attempt itself was not touched


def test_reexecution_lists_a_planted_divergence(tmp_path: Path) -> None:
    script = write_script(tmp_path, [
        {"tool": "bash", "args": {"command": "echo stable"}},
        {"tool": "bash", "args": {"command": "head -c 16 /dev/urandom | od -An -tx1 "
                                             "| tee noise.txt"}},
        {"tool": "submit", "args": {"summary": "noise"}},
    ])
    study = write_study(tmp_path, agent={"model": f"scripted:{script}"})
    noisy = run_session(SessionOptions(study_path=study, pair=1, arm="control", grade=False),
                        log=lambda _m: None)
    result = _cli("reexecute", str(noisy))
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "echo stable: same" in out
    assert re.search(r"line \d+ bash head -c 16 /dev/urandom.*: DIVERGES: output_sha256", out)
    assert "(DIFFERENT)" in out and "2 divergence(s):" in out
    assert "final diff: recorded sha256" in out


def test_a_broken_transcript_is_not_reexecuted(attempt: Path, tmp_path: Path) -> None:
    copy = _copy(attempt, tmp_path)
    path = copy / TRANSCRIPT_NAME
    path.write_bytes(path.read_bytes().replace(b'"exit_code":0', b'"exit_code":1', 1))
    result = _cli("reexecute", str(copy))
    assert result.returncode == 2
    assert "only a verified transcript can be re-executed" in result.stderr
    assert not list(tmp_path.glob("reexecute-*"))
