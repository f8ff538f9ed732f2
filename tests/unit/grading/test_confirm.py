"""grading.confirm: a crash or hang is run again, and two runs settle the outcome."""

from __future__ import annotations

from grading.confirm import crash_or_hang_in_log, settle, wants_rerun
from grading.models import ContractResult, verdict_for


def _run(outcome: str, reason: str | None = None, **evidence: object) -> ContractResult:
    return ContractResult(id="hidden:t", kind="hidden_check", statement="s",
                          outcome=outcome, reason=reason, evidence=dict(evidence))  # type: ignore[arg-type]


def test_a_crash_then_a_pass_is_flaky_never_a_pass() -> None:
    first = _run("crash", "the pytest process died in this test (SIGABRT)", round=1)
    settled = settle(first, _run("pass", round=2))
    assert settled.outcome == "flaky"
    assert "pass on the rerun" in (settled.reason or "") and "SIGABRT" in (settled.reason or "")
    # Both runs' evidence.
    assert settled.evidence["round"] == 1 and settled.evidence["rerun"]["evidence"]["round"] == 2
    assert verdict_for([settled], diff_applied=True) == "incomplete"


def test_the_same_failure_twice_counts_as_it_is() -> None:
    for outcome in ("crash", "hang"):
        settled = settle(_run(outcome, "why"), _run(outcome, "why again"))
        assert settled.outcome == outcome
        assert settled.evidence["rerun"]["outcome"] == outcome
        assert f"ended {outcome} too" in (settled.reason or "")
    # A crash, then a plain failure: still not a pass, and the rerun is on record.
    settled = settle(_run("crash", "died"), _run("fail"))
    assert settled.outcome == "crash" and settled.evidence["rerun"]["outcome"] == "fail"


def test_a_rerun_that_could_not_run_leaves_the_first_outcome_unconfirmed() -> None:
    for rerun in (None, _run("not_run", "the hidden checks' time budget ran out")):
        settled = settle(_run("hang", "killed"), rerun)
        assert settled.outcome == "hang"
        assert "not confirmed" in (settled.reason or "")
        assert settled.evidence["rerun"]["outcome"] == "not_run"


def test_what_asks_for_a_rerun() -> None:
    assert wants_rerun(_run("crash")) and wants_rerun(_run("hang"))
    assert not wants_rerun(_run("pass")) and not wants_rerun(_run("not_run"))
    # A plain failure is run once; a failure whose log shows a crashed process, again.
    assert not wants_rerun(_run("fail"), "FAILED tests/test_x.py::test_a - assert 1 == 2")
    for log in ("terminate called without an active exception",
                "  exitcode  : -6 (pid: 4242)",
                "torch.distributed.elastic.multiprocessing.api: Signal 6 (SIGABRT) received",
                "Fatal Python error: Segmentation fault",
                "subprocess died with <Signals.SIGSEGV: 11>"):
        assert crash_or_hang_in_log(log), log
        assert wants_rerun(_run("fail"), log)
    assert not crash_or_hang_in_log("exitcode  : 1 (pid: 4242)")


def test_a_failure_whose_log_shows_a_run_that_never_ended_is_run_again() -> None:
    """The packet tests meet a two-rank run that printed its result and never exited with their
    own timeout, and report a failing test (hybrid-arch's gold validation, 2026-12-05; these
    lines are from its public-tests log): that is a hang, and a hang is confirmed by a rerun."""
    seen = ("E           subprocess.TimeoutExpired: Command '['/opt/venv/bin/python', '-m', "
            "'torch.distributed.run', '--nproc-per-node', '2', 'train.py', '--config', "
            "'gloo-ddp-2']' timed out after 180 seconds\n"
            "/usr/lib/python3.11/subprocess.py:1251: TimeoutExpired")
    assert wants_rerun(_run("fail"), seen)
    assert wants_rerun(_run("fail"), "+++++++++++ Timeout +++++++++++")
    assert not wants_rerun(_run("fail"), "FAILED tests/test_x.py::test_timeout_option - "
                                         "assert 3 == 4")
