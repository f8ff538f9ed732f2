"""No check takes the candidate's word: submissions whose processes report what the checks want.

Each is a real submission graded by ``python -m grading`` as in the grader container, its
payload (``forge_payload.py``) appended to ``tinytrain/__init__.py``: in a probe process it
replaces the probe runner's writer, in a ``train.py`` process it can swallow the option and log
the ramp. Every forgery is shown to have happened (its report file), every check says where it
observed (``grading.observation``, in its evidence), and no check passes on a forged report
alone: the judge's or the outside observation of the same check fails it.
"""

from __future__ import annotations

import ast
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from forge_payload import PAYLOAD
from support import (
    HIDDEN_DIR,
    PACKET_DIR,
    apply_reference,
    git,
    grade_tiny,
    hidden_outcomes,
    make_diff,
)

from grading import observation

FAULTS = HIDDEN_DIR / "faults"


def declared_kinds() -> dict[str, str]:
    """Each tiny-regression check's declared kinds, as its evidence must show them."""
    path = HIDDEN_DIR / "checks" / "test_warmup.py"
    names = {"JUDGE": observation.JUDGE, "OUTSIDE": observation.OUTSIDE,
             "CANDIDATE_REPORT": observation.CANDIDATE_REPORT}
    kinds = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and getattr(dec.func, "id", "") == "observed_in":
                    found = {names[a.id] for a in dec.args if isinstance(a, ast.Name)}
                    kinds[node.name] = ",".join(k for k in observation.KINDS if k in found)
    return kinds


def report_file() -> Path:
    """A file every candidate process may append to (the grader clears only what the candidate
    creates in shared folders, not the judge's own files)."""
    path = Path(tempfile.mkdtemp(prefix="forged-reports-")) / "forged.jsonl"
    path.touch(mode=0o666)
    os.chmod(path, 0o666)
    os.chmod(path.parent, 0o755)
    return path


def forged(path: Path) -> set[str]:
    return {json.loads(line)["forged"] for line in path.read_text().splitlines()}


def grade_forgery(tmp_path: Path, name: str, *, forge: list[str], cli: bool,
                  base: str = "baseline") -> tuple[dict[str, Any], set[str]]:
    """Grade the baseline (or the reference with fault ``base``) plus the forging payload."""
    reports = report_file()
    payload = (PAYLOAD.replace("@FORGE@", ",".join(forge)).replace("@CLI@", "1" if cli else "0")
               .replace("@REPORT@", str(reports)))

    def change(repo: Path) -> None:
        if base != "baseline":
            apply_reference(repo)
            git(["apply", "--binary", str(FAULTS / base / "fault.patch")], repo)
        init = repo / "tinytrain" / "__init__.py"
        init.write_text(init.read_text() + payload)

    diff = make_diff(PACKET_DIR / "repo", tmp_path, change)
    _, report = grade_tiny(tmp_path, diff, name)
    for contract in report["contracts"]:  # shown when the test fails
        print(contract["id"], contract["outcome"], contract["evidence"].get("duration_s"),
              contract.get("reason"), str(contract["evidence"].get("message", ""))[:300])
    return report, forged(reports)


def contracts(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The hidden contracts by test name, parameters kept (``test_x[1-4]``)."""
    return {c["id"].split("::")[-1]: c for c in report["contracts"]
            if c["id"].startswith("hidden:")}


def assert_declared(report: dict[str, Any]) -> None:
    """Every check's evidence says where it observed, as its declaration does."""
    want = declared_kinds()
    for name, contract in contracts(report).items():
        props = contract["evidence"].get("properties", {})
        kinds = want[name.split("[")[0]]
        assert props.get(observation.KINDS_PROPERTY) == kinds, (name, props)
        if observation.CANDIDATE_REPORT in kinds:
            assert props.get(observation.REPORTS_PROPERTY), (name, props)
            assert props.get(observation.CORROBORATION_PROPERTY), (name, props)


def failure_of(report: dict[str, Any], name: str) -> str:
    contract = contracts(report)[name]
    assert contract["outcome"] == "fail", (name, contract)
    evidence = contract["evidence"]
    return f"{evidence.get('message', '')}\n{evidence.get('details', '')}"


def test_forged_probe_reports_pass_no_check_of_a_tree_without_the_option(tmp_path: Path) -> None:
    """candidate_report: the baseline, its probe results forged (``train()`` raised ValueError,
    the default and the zero run are one, the ramp's learning rates were used): every check
    fails, and those that take a probe's word fail on their own judge or outside observation."""
    report, done = grade_forgery(tmp_path, "forged-probes", cli=False, forge=[
        "raised_by", "default_and_zero", "train", "resume_mid_warmup"])
    assert {"probe:raised_by", "probe:default_and_zero", "probe:train",
            "probe:resume_mid_warmup"} <= done, done
    assert set(hidden_outcomes(report).values()) == {"fail"}, hidden_outcomes(report)
    assert report["verdict"] == "incomplete"
    assert_declared(report)
    # The probe's word was taken (a ValueError, one run for default and zero) and the
    # command line, run outside the forged process, refused the verdict.
    assert "--warmup-steps 3 failed" in failure_of(report, "test_negative_warmup_is_rejected")
    assert "cli-zero run failed" in failure_of(report, "test_default_config_is_baseline_behaviour")
    # judge: the forged learning rates are accepted, the parameters are not the ramp's.
    assert "parameters differ from the reference loop" in failure_of(
        report, "test_lr_follows_linear_warmup[5-12]")
    # Under warmup 1 the ramp is the constant rate: the forged run's parameters are right, and
    # only the command line, run outside the forged process, tells the option is missing.
    assert "--warmup-steps 3 failed" in failure_of(report, "test_lr_follows_linear_warmup[1-4]")


def test_a_forged_command_line_passes_no_check_the_judge_reads_back(tmp_path: Path) -> None:
    """outside: the same forger also makes ``train.py`` swallow --warmup-steps, refuse a
    negative value (exit 2, nothing written) and log the ramp's learning rates: the exits and
    logs say what the checks want, the checkpoints the judge reads are constant-rate training.
    Only --warmup-steps 0 passes, which is the baseline's run for real."""
    report, done = grade_forgery(tmp_path, "forged-cli", cli=True, forge=[
        "raised_by", "default_and_zero", "train", "resume_mid_warmup"])
    assert {"cli:option-swallowed", "cli:refused-negative", "cli:ramp-logged",
            "probe:raised_by", "probe:default_and_zero"} <= done, done
    outcomes = {k.split("::")[-1]: v for k, v in hidden_outcomes(report).items()}
    assert outcomes.pop("test_warmup_zero_is_bitwise_baseline") == "pass"
    assert set(outcomes.values()) == {"fail"}, outcomes
    assert_declared(report)
    for name in ("test_negative_warmup_is_rejected", "test_default_config_is_baseline_behaviour",
                 "test_lr_follows_linear_warmup[1-4]"):
        assert "the option does not reach training" in failure_of(report, name), name
    assert "parameters differ from the reference loop" in failure_of(report,
                                                                      "test_cli_warmup_flag")


def test_a_forged_resume_report_does_not_hide_a_resume_that_restarts_the_ramp(
        tmp_path: Path) -> None:
    """judge: the reference with its scheduler never restored on resume (the fault
    ``scheduler-not-resumed``), and a probe that reports the in-process resume as equal to the
    uninterrupted run: the resume check fails on the judge's perturbed-checkpoint resume, every
    other check passes."""
    report, done = grade_forgery(tmp_path, "forged-resume", cli=False,
                                 forge=["resume_mid_warmup"], base="scheduler-not-resumed")
    assert "probe:resume_mid_warmup" in done, done
    outcomes = {k.split("::")[-1]: v for k, v in hidden_outcomes(report).items()}
    assert outcomes.pop("test_resume_mid_warmup_equals_uninterrupted") == "fail"
    assert set(outcomes.values()) == {"pass"}, outcomes
    assert_declared(report)
    assert "perturbed step-3 checkpoint" in failure_of(
        report, "test_resume_mid_warmup_equals_uninterrupted")
