"""The study report's numbers computed again, independently of ``harness/report/``: from the
records' raw JSON (lock, session records, manifests, grade files, snapshot grades, transcript
lines, judgements, calibration reports) with plain Python, then compared with ``report.json``.

It shares no code with the report: where the two disagree, one of them is wrong.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

INFRA = {"harness_error", "sandbox_lost", "provider_error:retries_exhausted",
         "provider_error:malformed_response"}
PASSING = {"complete", "complete_on_cpu"}
FAILING = {"fail", "crash", "hang", "flaky", "diff_rejected"}
CLASS = {"fail": "silent_regression"}
REPO = Path(__file__).resolve().parents[1]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _intact(folder: Path) -> bool:
    """Every file the manifest lists still has its digest, and the diff is the recorded one."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for rel, digest in manifest["files"].items():
        path = folder / rel
        if not path.is_file() or _sha(path) != digest:
            return False
    record = json.loads((folder / "session.json").read_text())
    diff = record.get("diff")
    return diff is None or _sha(folder / "submission.diff") == diff["sha256"]


def _grade(folder: Path) -> dict[str, Any] | None:
    """The newest grading's summary that is not a grader error."""
    found = []
    grades = folder / "grades"
    for summary in sorted(grades.glob("grade-*/summary.json"),
                          key=lambda p: int(p.parent.name.split("-")[1])):
        data = json.loads(summary.read_text())
        if data["verdict"] != "grader_error":
            found.append(data)
    return found[-1] if found else None


def _is_figure(name: str) -> bool:
    """README, the report's section 4: held-out loss, memory, throughput and time the checks
    record, of the submission's own runs (never the baseline's, the reference's or a claim)."""
    low = name.lower()
    own = low[len("run:"):] if low.startswith("run:") else low
    if any(own.startswith(p) for p in ("reference", "reported", "expected", "baseline")):
        return False
    loss = low == "heldout_loss" or low.endswith("_heldout_loss")
    memory = "memory" in low or ("peak" in low and low.endswith(("_bytes", "_mb", "_mib", "_gib")))
    throughput = "throughput" in low or low.endswith(("_per_s", "per_second"))
    time = low == "train_s" or low.endswith((":wall_s", "_wall_s"))
    return loss or memory or throughput or time


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def recompute(study_file: Path, repo_root: Path = REPO) -> dict[str, Any]:
    """``repo_root``: the checkout a relative ``runs_dir`` (default ``runs``) is under."""
    study = yaml.safe_load(study_file.read_text())
    runs_dir = Path(study.get("runs_dir", "runs"))
    runs = (runs_dir if runs_dir.is_absolute() else repo_root / runs_dir) / study["name"]
    lock_path = sorted((runs / "locks").glob("rev-*.json"))[-1]
    lock_sha = _sha(lock_path)
    lock = json.loads(lock_path.read_text())
    sessions = {s["session_id"]: s for s in lock["sessions"]}
    attempts: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    every: list[tuple[str, int]] = []
    all_cpu = 0.0
    for record_path in sorted(runs.glob("*/attempt-*/session.json")):
        record = json.loads(record_path.read_text())
        every.append((record["session_id"], record["attempt"]))
        if record["in_frozen_study"] and record["lock_sha256"] == lock_sha:
            attempts.setdefault(record["session_id"], []).append((record_path.parent, record))
            all_cpu += (record.get("usage") or {}).get("cpu_hours", 0.0)
    used: dict[str, tuple[Path, dict[str, Any], dict[str, Any] | None]] = {}
    for sid, found in attempts.items():
        found.sort(key=lambda item: item[1]["attempt"])
        ended = [(f, r) for f, r in found if r["status"] == "finished"
                 and r["outcome"] not in INFRA and r["outcome"] != "interrupted"]
        if not ended or not all(_intact(f) for f, _r in ended):
            continue
        folder, record = ended[-1]
        grade = _grade(folder)
        if grade is not None or record.get("diff") is None:
            used[sid] = (folder, record, grade)

    prices = {(p["model"], p["category"]): p["per_million_tokens"]
              for p in study.get("prices") or []}

    def money(model: str, category: str, tokens: int) -> float | None:
        for key in ((model, category), (study["agent"]["model"], category)):
            if key in prices:
                return round(tokens * prices[key] / 1e6, 6)
        return None

    out: dict[str, Any] = {
        "lock_sha256": lock_sha, "sessions_total": len(sessions),
        "sessions_graded": len(used),
        "used": sorted(used),
        "left_out": sorted(set(every) - {(sid, r["attempt"]) for sid, (_f, r, _g) in used.items()}),
        "heads": {sid: r["transcript"]["head"] for sid, (_f, r, _g) in used.items()},
        "primary": {}, "contracts": {}, "trajectory": {}, "quality": [], "costs": {},
        "diagnostics": {}, "calibration": {}, "paired": {}, "all_cpu_hours": round(all_cpu, 6)}
    for sid, (folder, record, grade) in used.items():
        verdict = grade["verdict"] if grade else None
        out["primary"][sid] = (verdict, sorted((grade or {}).get("configurations_not_run", {})))
        report_path = folder / grade["folder"] / "out/grade.json" if grade else None
        contracts = json.loads(report_path.read_text())["contracts"] if report_path else []
        for contract in contracts:
            key = (record["arm"], CLASS.get(contract["outcome"], contract["outcome"]))
            out["contracts"][key] = out["contracts"].get(key, 0) + 1
            if verdict in PASSING:
                for name, value in (contract["evidence"].get("properties") or {}).items():
                    if _is_figure(str(name)) and (number := _as_number(value)) is not None:
                        out["quality"].append((sid, name, number))
        lines = _lines(folder / "transcript.jsonl")
        snaps_path = folder / "grades/snapshots.json"
        first = None
        regressions = 0
        if snaps_path.is_file():
            grades = {g["index"]: g for g in json.loads(snaps_path.read_text())["snapshots"]}
            start = lines[0]["ts"]
            last: dict[str, str] = {}
            for line in lines:
                if line["kind"] != "snapshot" or line["data"]["index"] not in grades:
                    continue
                snap = grades[line["data"]["index"]]
                if first is None and snap["verdict"] in PASSING:
                    tokens = [e["data"]["tokens_total"] for e in lines
                              if e["seq"] < line["seq"] and e["kind"] == "budget"
                              and e["data"].get("tokens_total") is not None]
                    seconds = (datetime.fromisoformat(line["ts"])
                               - datetime.fromisoformat(start)).total_seconds()
                    first = (snap["index"], round(seconds, 3), tokens[-1] if tokens else 0)
                for contract, outcome in sorted(snap["contracts"].items()):
                    if outcome == "not_run":
                        continue
                    if last.get(contract) == "pass" and outcome in FAILING:
                        regressions += 1
                    last[contract] = outcome
        residual = sorted(c["id"] for c in contracts if c["outcome"] in FAILING)
        out["trajectory"][sid] = (first, regressions, residual)
        usage = record["usage"]
        m_in = money(record["model"], "input", usage["tokens_input"])
        m_out = money(record["model"], "output", usage["tokens_output"])
        total = None if m_in is None or m_out is None else round(m_in + m_out, 6)
        out["costs"][sid] = (usage["tokens_input"], usage["tokens_output"], m_in, m_out, total)
        if record["arm"] == "treatment":
            calls = sum(1 for e in lines if e["kind"] == "tool_call"
                        and e["data"]["name"] == "traincheck")
            violations = sum(len(e["data"]["details"].get("new_violations") or [])
                             for e in lines if e["kind"] == "tool_result"
                             and e["data"]["name"] == "traincheck")
            judged: dict[str, str] = {}
            judgements = folder / "audit/judgements.jsonl"
            if judgements.is_file():
                for line in _lines(judgements):
                    judged[line["data"]["chain"]] = line["data"]["category"]
            categories: dict[str, int] = {}
            for category in judged.values():
                categories[category] = categories.get(category, 0) + 1
            out["diagnostics"][sid] = (calls, violations, categories)
    for task in study["tasks"]:
        calibration = Path(task.get("reports") or "reports/traincheck") / task["id"] \
            / "calibration.json"
        if calibration.is_file():
            data = json.loads(calibration.read_text())
            confirmed = {r["variant"] for c in data["configs"].values() for r in c["rows"]
                         if r["kind"] == "fault" and r["oracle"] and r["oracle"]["confirmed"]}
            detected = {r["variant"] for c in data["configs"].values() for r in c["rows"]
                        if r["variant"] in confirmed and r["verdict"] == "detected"}
            out["calibration"][task["id"]] = (len(detected), len(confirmed))
    for pair in sorted({s["pair"] for s in sessions.values()}):
        ids = {s["arm"]: sid for sid, s in sessions.items() if s["pair"] == pair}
        if ids.get("control") in used and ids.get("treatment") in used:
            c, t = used[ids["control"]], used[ids["treatment"]]
            done = [int(bool(g) and g["verdict"] in PASSING) for _f, _r, g in (t, c)]
            out["paired"][pair] = (done[0] - done[1], t[1]["usage"]["tokens_total"]
                                   - c[1]["usage"]["tokens_total"])
    return out


def compare(report: dict[str, Any], expected: dict[str, Any]) -> None:
    """Every recomputed number against ``report.json``; an assertion names the first that
    differs."""
    assert report["lock"]["sha256"] == expected["lock_sha256"]
    assert report["sessions_total"] == expected["sessions_total"]
    assert report["sessions_graded"] == expected["sessions_graded"]
    assert report["partial"] == (expected["sessions_graded"] < expected["sessions_total"])
    assert sorted(s["session_id"] for s in report["sessions"] if s["used"]) == expected["used"]
    assert {s["session_id"]: s["transcript_head"] for s in report["sessions"]
            if s["used"]} == expected["heads"]
    assert sorted((x["session_id"], x["attempt"]) for x in report["left_out"]) \
        == expected["left_out"]
    primary = {r["session_id"]: (r["verdict"], sorted(r["not_determined_for"]))
               for r in report["primary"]["rows"] if r["complete"] is not None}
    assert primary == expected["primary"]
    contracts = {(arm, cls): n for arm, counts in report["contracts"]["totals"].items()
                 for cls, n in counts.items() if n}
    assert contracts == expected["contracts"]
    for trajectory in report["trajectory"]["sessions"]:
        first, regressions, residual = expected["trajectory"][trajectory["session_id"]]
        got = (None if trajectory["first_passing_snapshot"] is None else
               (trajectory["first_passing_snapshot"], trajectory["seconds_to_first_pass"],
                trajectory["tokens_to_first_pass"]))
        assert got == first, trajectory["session_id"]
        assert len(trajectory["regressions"]) == regressions, trajectory["session_id"]
        assert trajectory["residual_defects"] == residual, trajectory["session_id"]
    assert sorted((f["session_id"], f["figure"], f["value"])
                  for f in report["quality"]["figures"]) == sorted(expected["quality"])
    costs = {c["session_id"]: (c["tokens_input"], c["tokens_output"],
                               c["money_input"]["amount"], c["money_output"]["amount"],
                               c["money_total"]["amount"])
             for c in report["costs"]["sessions"]}
    assert costs == expected["costs"]
    assert report["costs"]["cpu_hours_all_attempts"] == expected["all_cpu_hours"]
    diagnostics = {d["session_id"]: (d["tool_calls"], d["violations_reported"],
                                     {c: n for c, n in d["judgements"].items() if n})
                   for d in report["diagnostics"]["sessions"]}
    assert diagnostics == expected["diagnostics"]
    calibration = {t["task"]: (t["faults_detected"], t["faults_confirmed"])
                   for t in report["calibration"]["tasks"] if t["calibration_found"]}
    assert calibration == expected["calibration"]
    paired = {p["pair"]: (p["feature_complete"], p["tokens_total"])
              for p in report["paired"]["pairs"] if p["complete"]}
    assert paired == expected["paired"]
