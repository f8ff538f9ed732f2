"""The mutant generator: only the reference's lines, one readable edit each, every one compiles."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from grading.errors import GraderError
from grading.models import ContractResult
from grading.mutants import classify
from harness.errors import HarnessError
from harness.infra.workspace import compute_diff, snapshot_baseline
from harness.oracle.mutation import (
    OPERATORS,
    Mutant,
    beyond_lines,
    changed_lines,
    generate_mutants,
    sample_evenly,
)
from harness.oracle.strength import load_equivalents
from harness.paths import REPO_ROOT

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "task_packets" / "tiny-regression"
REFERENCE = (REPO_ROOT / "hidden" / "tiny-regression" / "reference" / "solution.patch")

BASE = '''import math
import torch
import torch.distributed as dist


def f(x):
    return x
'''
FEATURE = '''import math
import torch
import torch.distributed as dist


def f(x):
    return x


def shard(n, rank, world_size, x, block):
    per_rank = math.ceil(n / world_size)
    start = rank * per_rank
    y = x.to(torch.float64).mean(dim=0) / world_size
    dist.all_reduce(y, op=dist.ReduceOp.SUM)
    z = torch.zeros(3, dtype=torch.float32, device=x.device)
    with block.no_sync():
        h = x + block(x).detach()
    state = {"step": 1, "weights": h}
    for i in range(start, start + per_rank):
        if i >= n and not False:
            break
    p = torch.softmax(h, dim=-1)
    return y, z, state, -(-n // world_size)
'''


def _repo(tmp_path: Path, text: str) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "mod.py").write_text(text)
    return repo


@pytest.fixture(scope="module")
def feature(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    tmp_path = tmp_path_factory.mktemp("feature")
    baseline = tmp_path / "baseline"
    snapshot_baseline(_repo(tmp_path, BASE), baseline)
    after = tmp_path / "after"
    snapshot_baseline(_repo(tmp_path, FEATURE), after)
    patch, _ = compute_diff(baseline, after, max_diff_bytes=1 << 20)
    return baseline, patch


@pytest.fixture(scope="module")
def every_mutant(feature: tuple[Path, bytes]) -> list[Mutant]:
    """Every mutant of FEATURE (each one's diff is a git call: made once per module)."""
    return generate_mutants(*feature)


def test_changed_lines_are_the_new_side_of_added_lines(feature: tuple[Path, bytes]) -> None:
    _, patch = feature
    lines = changed_lines(patch)
    assert set(lines) == {"mod.py"}
    # FEATURE is BASE (7 lines) with lines appended: exactly the appended ones count.
    assert lines["mod.py"] == set(range(8, len(FEATURE.splitlines()) + 1))


def test_every_operator_family_fires_and_every_mutant_compiles(
        every_mutant: list[Mutant]) -> None:
    mutants = every_mutant
    ops = Counter(m.operator for m in mutants)
    for expected in ("arith", "compare", "boolean", "constant", "negate-condition",
                     "delete-statement", "reduction", "collective-drop", "collective-dup",
                     "no-sync", "world-size", "ceil-floor", "off-by-one", "device-dtype",
                     "residual", "detach", "rank-offset", "state-key", "duplicate-statement",
                     "insert-call", "scale-value", "detach-tensor"):
        assert ops[expected] > 0, f"operator {expected} produced nothing: {ops}"
    assert set(ops) <= set(OPERATORS)
    assert len({m.id for m in mutants}) == len(mutants)
    for m in mutants:
        assert m.path == "mod.py" and m.line > 7
        # The statement holding the edit: what line coverage is checked against.
        assert m.first_line <= m.line <= m.last_line
        # The graded diff applies to the baseline and holds exactly one changed line set.
        assert m.diff.startswith("diff --git a/mod.py b/mod.py")
        edited = [ln for ln in m.change.splitlines() if ln[:1] in "+-"
                  and not ln.startswith(("---", "+++"))]
        assert edited, m.change
    # Specific edits a reader would expect.
    changes = {m.mutated for m in mutants}
    assert "per_rank = math.floor(n / world_size)" in changes
    assert "pass" in {m.mutated for m in mutants if m.operator == "collective-drop"}
    assert "z = torch.zeros(3, dtype=torch.float32)" in changes
    assert "z = torch.zeros(3, device=x.device)" in changes
    assert "y = (x).mean(dim=0) / world_size" in changes
    assert "y = (x.to(torch.float64).mean(dim=0))" in changes
    assert "h = x + (block(x))" in changes
    assert "start = 0" in changes
    assert "dist.all_reduce(y, op=dist.ReduceOp.AVG)" in changes
    # The insertion family: an effect twice, an extra random draw, a value scaled, a detach.
    assert "z = torch.zeros(3, dtype=torch.float32, device=x.device)\n" \
        "z = torch.zeros(3, dtype=torch.float32, device=x.device)" in changes
    assert "torch.rand(())\nper_rank = math.ceil(n / world_size)" in changes
    assert "y = (x.to(torch.float64).mean(dim=0) / world_size) * 2" in changes
    assert "p = (torch.softmax(h, dim=-1)).detach()" in changes
    assert all(m.scope == "diff" for m in mutants)
    assert {m.family for m in mutants if m.operator == "scale-value"} == {"insertion"}
    # An expression inside the loop's `if` is held by that `if` (lines 20-21).
    negated = next(m for m in mutants if m.operator == "negate-condition")
    assert (negated.first_line, negated.last_line) == (20, 21)


def test_mutants_are_stable_and_sampling_is_even(feature: tuple[Path, bytes],
                                                 every_mutant: list[Mutant]) -> None:
    baseline, patch = feature
    everything = every_mutant
    some = {"arith", "insert-call", "state-key"}
    again = generate_mutants(baseline, patch, operators=some)
    assert sorted(m.id for m in everything if m.operator in some) == sorted(m.id for m in again)
    firing = len({m.operator for m in everything})
    sample = generate_mutants(baseline, patch, limit=firing, seed=7)
    per_op = Counter(m.operator for m in sample)
    # A limit of as many as fire takes one of each operator, never all of the largest.
    assert len(sample) == firing and max(per_op.values()) == 1
    assert [m.id for m in generate_mutants(baseline, patch, limit=firing, seed=7)] == \
        [m.id for m in sample]
    picked = {everything[0].id, everything[-1].id}
    assert {m.id for m in generate_mutants(baseline, patch, ids=picked)} == picked
    with pytest.raises(ValueError, match="no mutant with id"):
        generate_mutants(baseline, patch, ids={"arith-0000000000"})
    with pytest.raises(ValueError, match="unknown mutation operator"):
        generate_mutants(baseline, patch, operators={"teleport"})


def test_the_beyond_scope_mutates_executed_lines_the_reference_left_alone(
        feature: tuple[Path, bytes]) -> None:
    """Beyond the diff: the editable files' lines the reference's grade executed, less the
    lines it changed, mutated by the same operators and sampled and scored apart."""
    baseline, patch = feature
    coverage = {"hidden:t.py::a": {"/w/graded/mod.py": [6, 7, 9], "/w/graded/tests/t.py": [1]},
                "public-tests": {"/w/job/copy/mod.py": [12], "/w/other/notmine.py": [3]}}
    lines = beyond_lines(coverage, patch, ["mod.py"])
    # Lines 9 and 12 are the reference's own (diff scope); tests/ is not an editable file.
    assert lines == {"mod.py": {6, 7}}
    # Two operators keep this fast (a mutant's diff is a git call); every operator applies.
    ops = {"insert-call", "delete-statement"}
    both = generate_mutants(baseline, patch, beyond=lines, operators=ops)
    beyond = [m for m in both if m.scope == "beyond"]
    assert {(m.operator, m.line) for m in beyond} == {("insert-call", 7),
                                                      ("delete-statement", 7)}
    assert "torch.rand(())\nreturn x" in {m.mutated for m in beyond}
    assert {m.id for m in both if m.scope == "diff"} == {m.id for m in generate_mutants(
        baseline, patch, operators=ops)}
    only = generate_mutants(baseline, patch, beyond=lines, include_diff=False, operators=ops)
    assert {m.id for m in only} == {m.id for m in beyond}
    # A limit samples scopes and operators evenly: both scopes are in a small sample.
    assert {m.scope for m in generate_mutants(baseline, patch, beyond=lines, limit=4,
                                              operators=ops)} == {"diff", "beyond"}


def test_beyond_the_diff_a_statement_is_in_scope_by_its_first_line() -> None:
    """Coverage records a multi-line statement's first line only; the diff scope deletes a
    statement only when the reference wrote every line of it."""
    from harness.oracle.mutation import _edits

    source = "def f(x):\n    y = g(x,\n          1)\n    return y\n"
    def deleted(scope: str) -> bool:
        return any(e.operator == "delete-statement" and e.first_line == 2
                   for e in _edits(source, {2, 4}, scope))  # type: ignore[arg-type]
    assert deleted("beyond") and not deleted("diff")


def test_each_scope_is_scored_apart_and_the_goal_holds_for_each() -> None:
    from grading.mutant_report import MutantResult, MutantsReport
    from harness.oracle.strength import goal_met, render_markdown, score_report

    def m(mid: str, scope: str) -> Mutant:
        return Mutant(id=mid, operator="constant", family="classic", scope=scope,  # type: ignore[arg-type]
                      path="p.py", line=1, original="a = 1", mutated="a = 2",
                      change="-a = 1\n+a = 2\n", diff="d")
    mutants = [m("d1", "diff"), m("d2", "diff"), m("b1", "beyond"), m("b2", "beyond")]
    graded = MutantsReport(task_id="t", reference_verdict="complete", reference_duration_s=1,
                           hidden_test_timeout_s=60, grader_source_sha256="g",
                           hidden_tree_sha256="h", mutants=[
                               MutantResult(id="d1", status="killed", killed_by="x"),
                               MutantResult(id="d2", status="killed", killed_by="x"),
                               MutantResult(id="b1", status="killed", killed_by="x"),
                               MutantResult(id="b2", status="survived")])
    report = score_report("t", mutants, graded, {}, seed=0, limit=None)
    assert [(r.scope, r.mutants, r.detected, r.score) for r in report.by_scope] == [
        ("diff", 2, 2, 1.0), ("beyond", 2, 1, 0.5)]
    assert report.score == 0.75 and not goal_met(report)
    text = render_markdown(report)
    assert "Score: **75.0%** (diff 100.0%; beyond 50.0%)" in text
    assert "goal 90% in each scope: NOT met" in text
    marked = score_report("t", mutants, graded, {"b2": "a is never read again here"}, seed=0,
                          limit=None)
    assert [r.score for r in marked.by_scope] == [1.0, 1.0] and goal_met(marked)


def test_sample_evenly_round_robins() -> None:
    def m(op: str, n: int) -> Mutant:
        return Mutant(id=f"{op}-{n}", operator=op, family="classic", path="p", line=1,
                      original="", mutated="", change="", diff="")
    pools = {"a": [m("a", i) for i in range(10)], "b": [m("b", 0)], "c": [m("c", 0),
                                                                       m("c", 1)]}
    picked = Counter(x.operator for x in sample_evenly(pools, 5, 0))
    assert picked == {"a": 2, "b": 1, "c": 2}


def test_the_fixture_reference_yields_compiling_mutants(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline"
    snapshot_baseline(FIXTURE / "repo", baseline)
    # An even sample across operators (sampled before the diffs are made, so it is cheap):
    # at least 30 mutants exist, and each sampled one's diff applies and parses.
    mutants = generate_mutants(baseline, REFERENCE.read_bytes(), limit=30)
    assert len(mutants) == 30
    for m in mutants[::4]:
        tree = tmp_path / m.id
        from harness.infra.workspace import apply_patch

        apply_patch(baseline, m.diff.encode(), tree)
        ast.parse((tree / m.path).read_text())


def _contract(cid: str, outcome: str, **evidence: object) -> ContractResult:
    return ContractResult(id=cid, kind="hidden_check" if cid.startswith("hidden:")
                          else "public_tests", statement="s", outcome=outcome,  # type: ignore[arg-type]
                          evidence=dict(evidence))


def test_classify_names_the_first_killer_and_the_import_crash() -> None:
    survived = classify("m", [_contract("public-tests", "pass"),
                              _contract("hidden:t.py::a", "pass")], True)
    assert survived.status == "survived" and survived.contracts_run == 2
    killed = classify("m", [_contract("public-tests", "pass"),
                            _contract("hidden:t.py::a", "fail", properties={
                                "configurations": "gloo-ddp-2, gloo-fsdp-2"}),
                            _contract("hidden:t.py::b", "not_run")], True)
    assert (killed.status, killed.killed_by, killed.configurations) == (
        "killed", "hidden:t.py::a", ["gloo-ddp-2", "gloo-fsdp-2"])
    hung = classify("m", [_contract("public-tests", "hang")], True)
    assert hung.status == "timed_out"
    imported = classify("m", [_contract("public-tests", "fail",
                                        excerpt="ImportError while importing test module")],
                        True)
    assert imported.status == "crashed_at_import"
    # Whichever contract saw it: the last traceback's innermost frame is the top level of a
    # file of the graded tree.
    at_import = ('E   Traceback (most recent call last):\n'
                 'E     File "/w/graded/train.py", line 3, in <module>\n'
                 'E       from pkg.model import Model\n'
                 'E     File "/w/graded/pkg/model.py", line 9, in <module>\n'
                 'E       LIMIT = 1 / 0\n'
                 'E   ZeroDivisionError: division by zero\n')
    in_call = at_import.replace('line 9, in <module>', 'line 9, in forward')
    not_the_tree = ('Traceback (most recent call last):\n'
                    '  File "<string>", line 1, in <module>\n'
                    'AssertionError\n')
    earlier = at_import + ("During handling of the above exception, another exception "
                           "occurred:\n\n") + in_call
    for text, status in ((at_import, "crashed_at_import"), (in_call, "killed"),
                         (not_the_tree, "killed"), (earlier, "killed")):
        graded = classify("m", [_contract("public-tests", "not_run"),
                                _contract("hidden:t.py::a", "fail", excerpt=text)], True,
                          "/w/graded")
        assert (graded.status, graded.killed_by) == (status, "hidden:t.py::a")
    # The graded tree unknown: only the public tests' own words count.
    assert classify("m", [_contract("hidden:t.py::a", "fail", excerpt=at_import)],
                    True).status == "killed"
    assert classify("m", [], False).status == "not_applied"


def test_equivalence_marks_need_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "t.equivalent.yaml"
    path.write_text("arith-1234567890: the value is multiplied by 1 on every path\n")
    assert load_equivalents(path) == {
        "arith-1234567890": "the value is multiplied by 1 on every path"}
    path.write_text("arith-1234567890: same\n")
    with pytest.raises(HarnessError, match="without a reason"):
        load_equivalents(path)
    assert load_equivalents(tmp_path / "absent.yaml") == {}


def test_rescore_applies_new_equivalence_marks_without_grading(tmp_path: Path) -> None:
    from grading.mutant_report import MutantResult, MutantsReport
    from harness.oracle.strength import rescore

    def m(mid: str) -> Mutant:
        return Mutant(id=mid, operator="constant", family="classic", path="p.py", line=1,
                      original="a = 1", mutated="a = 2", change="-a = 1\n+a = 2\n", diff="d")
    run = tmp_path / "run-1"
    (run / "out").mkdir(parents=True)
    (run / "mutants.json").write_text(
        "[" + ",".join(x.model_dump_json() for x in (m("constant-a"), m("constant-b"))) + "]")
    graded = MutantsReport(task_id="t", reference_verdict="complete", reference_duration_s=1,
                           hidden_test_timeout_s=60, grader_source_sha256="g",
                           hidden_tree_sha256="h", mutants=[
                               MutantResult(id="constant-a", status="killed", killed_by="x"),
                               MutantResult(id="constant-b", status="survived")])
    (run / "out" / "mutants.json").write_text(graded.model_dump_json())
    reports = tmp_path / "reports"
    before = rescore("t", tmp_path, run, reports, log=lambda _m: None)
    assert (before.score, before.survived) == (0.5, 1)
    (reports / "t.equivalent.yaml").write_text("constant-b: a is never read after this line\n")
    after = rescore("t", tmp_path, run, reports, log=lambda _m: None)
    assert (after.score, after.survived, after.equivalent) == (1.0, 0, 1)
    assert "equivalent: a is never read" in (reports / "t.md").read_text()
    with pytest.raises(HarnessError, match="is a run of t, not u"):
        rescore("u", tmp_path, run, reports, log=lambda _m: None)


def test_a_mutant_runs_the_checks_that_ran_its_statement_first_then_every_other() -> None:
    from grading import trace
    from grading.mutant_report import MutantSpec
    from grading.mutants import CoverageMap

    coverage = CoverageMap(
        by_check={
            trace.PUBLIC_KEY: {"/w/graded/pkg/a.py": {1, 2}},
            "t.py::slow": {"/w/graded/pkg/a.py": {1, 10, 11}},
            "t.py::fast": {"/w/baseline/pkg/a.py": {10}},  # another copy of the file counts
            "t.py::other": {"/w/graded/pkg/b.py": {10}},
            "t.py::static": {},  # ran no graded code: judged by nothing, so counts as covering
        },
        durations={"t.py::slow": 30.0, "t.py::fast": 2.0, "t.py::other": 1.0,
                   "t.py::static": 5.0})
    spec = MutantSpec(id="m", path="pkg/a.py", first_line=10, last_line=12)
    chosen = coverage.select(spec)
    # Those that ran lines 10-12 cheapest first, then the one that did not; the public tests
    # (which never ran them) last.
    assert chosen.hidden == ("t.py::fast", "t.py::static", "t.py::slow", "t.py::other")
    assert chosen.public and chosen.public_last
    assert chosen.covering == {"hidden:t.py::fast", "hidden:t.py::static", "hidden:t.py::slow"}
    assert chosen.not_covering() == 2
    on_line_one = coverage.select(MutantSpec(id="m", path="pkg/a.py", first_line=1, last_line=1))
    # The public tests ran line 1: they go first (an import broken there fails them at once).
    assert on_line_one.public and not on_line_one.public_last
    assert on_line_one.hidden == ("t.py::static", "t.py::slow", "t.py::other", "t.py::fast")
    assert on_line_one.not_covering() == 2
    # Timed, they go first only if they cost no more than the cheapest check that ran it
    # (t.py::static, 5 s); otherwise every covering check runs before them.
    for public_s, first in ((5.0, True), (5.5, False), (60.0, False)):
        timed = CoverageMap(by_check=coverage.by_check, durations=coverage.durations,
                            public_s=public_s)
        line_one = timed.select(MutantSpec(id="m", path="pkg/a.py", first_line=1, last_line=1))
        assert (line_one.public_last, line_one.hidden) == (not first, on_line_one.hidden)
        assert line_one.covering == on_line_one.covering
    # Nothing else ran it: the public tests are the cheapest contract that did.
    only_public = CoverageMap(by_check={trace.PUBLIC_KEY: {"/w/graded/pkg/a.py": {3}},
                                        "t.py::slow": {"/w/graded/pkg/a.py": {1}}},
                              durations={"t.py::slow": 1.0}, public_s=60.0)
    assert not only_public.select(MutantSpec(id="m", path="pkg/a.py", first_line=3,
                                             last_line=3)).public_last
    # A check missing from the coverage (its process never traced) counts as covering.
    unseen = CoverageMap(by_check={trace.PUBLIC_KEY: {}}, durations={"t.py::new": 1.0})
    assert unseen.select(spec).hidden == ("t.py::new",)
    assert unseen.select(spec).not_covering() == 0


def test_a_survivor_cut_short_by_the_budget_says_so() -> None:
    from grading.hidden import BUDGET_RAN_OUT

    survived = classify("m", [_contract("public-tests", "pass"),
                              _contract("hidden:t.py::a", "pass")], True)
    assert (survived.status, survived.contracts_run, survived.hidden_run) == ("survived", 2, 1)
    assert survived.reason is None
    # A survivor whose checks ran out of time says so: not every check had its say.
    cut_short = classify("m", [_contract("hidden:t.py::a", "pass"), ContractResult(
        id="hidden:t.py::b", kind="hidden_check", statement="s", outcome="not_run",
        reason=f"{BUDGET_RAN_OUT} (5 s) before this test ran")], True)
    assert cut_short.status == "survived" and "1 check(s) not run" in (cut_short.reason or "")


def test_a_stopped_run_keeps_every_complete_result() -> None:
    from grading.mutant_report import MutantResult, MutantsReport, read_partial

    header = MutantsReport(task_id="t", reference_verdict="complete_on_cpu",
                           reference_duration_s=30.0, hidden_test_timeout_s=60.0,
                           grader_source_sha256="g" * 64, hidden_tree_sha256="h" * 64)
    lines = [MutantResult(id="a", status="killed", duration_s=5.0).model_dump_json(),
             MutantResult(id="a", status="survived", duration_s=9.0).model_dump_json(),
             MutantResult(id="b", status="survived", duration_s=7.0).model_dump_json(),
             '{"id": "c", "status": "kil']  # cut mid-write when the run was stopped
    partial = read_partial(header.model_dump_json().encode(), "\n".join(lines))
    assert [(m.id, m.status) for m in partial.mutants] == [("a", "killed"), ("b", "survived")]
    assert partial.duration_s == 42.0
    # Two grader containers, the reference's grade reused: the mutants' time shared by two.
    pooled = header.model_copy(update={"workers": 2, "reference_reused": True})
    partial = read_partial(pooled.model_dump_json().encode(), "\n".join(lines))
    assert partial.duration_s == 6.0


def test_a_report_says_how_many_containers_graded_and_whether_the_reference_was_reused(
) -> None:
    from grading.mutant_report import MutantResult, MutantsReport
    from harness.oracle.strength import render_markdown, score_report

    def m(mid: str) -> Mutant:
        return Mutant(id=mid, operator="constant", family="classic", path="p.py", line=1,
                      original="a = 1", mutated="a = 2", change="-a = 1\n+a = 2\n", diff="d")
    graded = MutantsReport(task_id="t", reference_verdict="complete", reference_duration_s=600,
                           hidden_test_timeout_s=60, grader_source_sha256="g",
                           hidden_tree_sha256="h", duration_s=120, workers=2,
                           reference_reused=True, warm_start=True, mutants=[
                               MutantResult(id="constant-a", status="killed", killed_by="x",
                                            confirmed="first")])
    text = render_markdown(score_report("t", [m("constant-a"), m("constant-b")], graded, {},
                                        seed=0, limit=None))
    # The reused reference's 10 min are not part of this run's 2 min.
    assert "2.0 min, the mutants in 2 grader containers side by side, their candidate " \
        "processes forked from a warm interpreter" in text
    assert "10.0 min (an earlier run's grade" in text and "the mutants took 2.0 min" in text
    assert "Stopped early:** 1 of 2" in text and "at most 1 that were still being" in text


def test_kills_and_survivors_are_checked_in_a_setup_the_reference_passed() -> None:
    from grading.mutant_report import MutantResult
    from grading.mutants import Selection, _confirm

    every = Selection(public=True, hidden=("t.py::a", "t.py::b"),
                      covering=frozenset({"public-tests", "hidden:t.py::a"}))
    asked: list[Selection] = []

    def regrade_to(result: MutantResult):  # type: ignore[no-untyped-def]
        def regrade(selection: Selection) -> MutantResult:
            asked.append(selection)
            return result
        return regrade

    killed_second = MutantResult(id="m", status="killed", killed_by="hidden:t.py::b",
                                 contracts_run=2, hidden_run=2)
    # Killed after another check in the same process: graded again alone.
    kept = _confirm(killed_second, every, regrade_to(killed_second))
    assert (kept.status, kept.confirmed) == ("killed", "alone")
    assert asked[-1] == Selection(public=False, hidden=("t.py::b",))
    # ... by a check coverage said never runs the statement: kept, with a note.
    assert "coverage said never runs" in (kept.reason or "")
    passes_alone = MutantResult(id="m", status="survived", hidden_run=1)
    # ... not again alone (passes, or another contract fails): not counted. The grade stopped
    # at t.py::b, the last check, and the public tests ran first: nothing else to grade.
    for again in (passes_alone, killed_second.model_copy(update={"killed_by": "hidden:t.py::a"})):
        asked.clear()
        dropped = _confirm(killed_second, every, regrade_to(again))
        assert dropped.status == "survived" and "alone it passes" in (dropped.reason or "")
        assert (dropped.confirmed, dropped.killed_by) == ("alone", None)
        assert asked == [Selection(public=False, hidden=("t.py::b",))]
    # Killed by the first check of its process: the reference's own setup, nothing rerun.
    asked.clear()
    first = MutantResult(id="m", status="killed", killed_by="hidden:t.py::a", hidden_run=1)
    confirmed_first = _confirm(first, every, regrade_to(first))
    assert confirmed_first.confirmed == "first" and confirmed_first.reason is None
    assert asked == []
    # Killed by the public tests: graded again alone wherever they ran (their own training
    # runs turn a host's crash into a plain failure), first or after hidden checks.
    by_public = MutantResult(id="m", status="killed", killed_by="public-tests",
                             contracts_run=3, hidden_run=2)
    assert _confirm(by_public, every, regrade_to(by_public)).confirmed == "alone"
    assert asked == [Selection(public=True, hidden=())]
    asked.clear()
    public_last = Selection(public=True, hidden=every.hidden, public_last=True,
                            covering=every.covering)
    assert _confirm(by_public, public_last, regrade_to(by_public)).confirmed == "alone"
    assert asked == [Selection(public=True, hidden=())]
    after_checks = _confirm(by_public, public_last, regrade_to(passes_alone))
    assert after_checks.status == "survived" and "alone it passes" in (after_checks.reason or "")
    asked.clear()
    # A kill that does not hold alone: what its grade never reached is graded then (the checks
    # after the killer, the public tests when they were to run last), checked the same way.
    three = Selection(public=True, hidden=("t.py::a", "t.py::b", "t.py::c"), public_last=True)
    by_b = MutantResult(id="m", status="killed", killed_by="hidden:t.py::b", hidden_run=2)
    by_c = MutantResult(id="m", status="killed", killed_by="hidden:t.py::c", hidden_run=1)
    answers = iter([passes_alone, by_c])

    def scripted(selection: Selection) -> MutantResult:
        asked.append(selection)
        return next(answers)
    assert three.after("public-tests") is None
    assert three.after("hidden:t.py::c") == Selection(public=True, hidden=(), public_last=True)
    assert Selection(public=True, hidden=("t.py::a",)).after("hidden:t.py::a") is None
    moved = _confirm(by_b, three, scripted)
    assert asked == [Selection(public=False, hidden=("t.py::b",)),
                     Selection(public=True, hidden=("t.py::c",), public_last=True)]
    assert (moved.status, moved.killed_by, moved.confirmed) == ("killed", "hidden:t.py::c",
                                                                "first")
    assert "hidden:t.py::b failed after other checks had run; graded again alone it " \
        "passes" in (moved.reason or "")
    asked.clear()
    answers = iter([passes_alone, MutantResult(id="m", status="survived", hidden_run=1)])
    kept_alive = _confirm(by_b, three, scripted)
    assert (kept_alive.status, kept_alive.confirmed) == ("survived", "alone")
    assert len(asked) == 2
    asked.clear()
    # A survivor ran every contract in its one grade: nothing graded again.
    survivor = MutantResult(id="m", status="survived", contracts_run=3, hidden_run=2)
    assert _confirm(survivor, every, regrade_to(first)).confirmed == "every_contract"
    # One whose checks ran out of time did not: not confirmed.
    cut_short = survivor.model_copy(update={"reason": "1 check(s) not run: ..."})
    assert _confirm(cut_short, every, regrade_to(first)).confirmed is None
    assert asked == []


def test_a_crash_or_hang_counts_only_when_it_happens_again() -> None:
    from grading.mutant_report import MutantResult
    from grading.mutants import Selection, _confirm

    every = Selection(public=True, hidden=("t.py::a", "t.py::b"))
    asked: list[Selection] = []
    answers: list[MutantResult] = []

    def scripted(selection: Selection) -> MutantResult:
        asked.append(selection)
        return answers.pop(0)
    passes_alone = MutantResult(id="m", status="survived", hidden_run=1)
    for outcome, status in (("crash", "killed"), ("hang", "timed_out")):
        # The first check of its process crashed (or hung): graded again alone before it counts.
        first = MutantResult(id="m", status=status, killed_by="hidden:t.py::a",
                             outcome=outcome, hidden_run=1)
        asked.clear()
        answers[:] = [first]
        kept = _confirm(first, every, scripted)
        assert (kept.status, kept.confirmed) == (status, "alone")
        # Failing again alone with a plain failure: the grade alone's labels are the report's.
        asked.clear()
        plain = first.model_copy(update={"status": "killed", "outcome": "fail",
                                         "excerpt": "AssertionError"})
        answers[:] = [plain]
        relabelled = _confirm(first, every, scripted)
        assert (relabelled.status, relabelled.outcome, relabelled.excerpt,
                relabelled.confirmed) == ("killed", "fail", "AssertionError", "alone")
        assert asked == [Selection(public=False, hidden=("t.py::a",))]
        # Alone it passes: the host's, not the mutant's. The checks after it are graded then.
        asked.clear()
        by_b = MutantResult(id="m", status="killed", killed_by="hidden:t.py::b",
                            outcome="fail", hidden_run=1)
        answers[:] = [passes_alone, by_b]
        moved = _confirm(first, every, scripted)
        assert (moved.status, moved.killed_by, moved.confirmed) == ("killed", "hidden:t.py::b",
                                                                    "first")
        assert f"ended in a {outcome} once; graded again alone it passes" in (moved.reason or "")
        assert asked == [Selection(public=False, hidden=("t.py::a",)),
                         Selection(public=False, hidden=("t.py::b",), public_last=True)]
    # The public tests crashed first: the same.
    asked.clear()
    public_crash = MutantResult(id="m", status="killed", killed_by="public-tests",
                                outcome="crash", hidden_run=0)
    answers[:] = [passes_alone, passes_alone]
    survived = _confirm(public_crash, every, scripted)
    assert (survived.status, survived.killed_by) == ("survived", None)
    assert asked[0] == Selection(public=True, hidden=())
    # A plain failure on a first check is the reference's setup: nothing graded again.
    asked.clear()
    failed = MutantResult(id="m", status="killed", killed_by="hidden:t.py::a", outcome="fail",
                          hidden_run=1)
    assert _confirm(failed, every, scripted).confirmed == "first" and asked == []


def test_a_result_counts_every_grade_it_took() -> None:
    from grading.mutant_report import MutantResult
    from grading.mutants import Selection, _confirm, over_every_grade

    # Killed by t.py::b after t.py::a; alone t.py::b passes; then t.py::c, never reached,
    # kills first in its process: three grades, the result is the third's.
    three = Selection(public=False, hidden=("t.py::a", "t.py::b", "t.py::c"))
    grades = [
        MutantResult(id="m", status="killed", killed_by="hidden:t.py::b", hidden_run=2,
                     duration_s=10.0, processes_warm=4, processes_fresh=1, judges_warm=1),
        MutantResult(id="m", status="survived", hidden_run=1, duration_s=3.5,
                     processes_warm=2, judges_warm=1),
        MutantResult(id="m", status="killed", killed_by="hidden:t.py::c", hidden_run=1,
                     duration_s=1.25, processes_warm=1, judges_warm=1),
    ]
    answers = iter(grades[1:])
    result = over_every_grade(_confirm(grades[0], three, lambda _s: next(answers)), grades)
    assert (result.status, result.killed_by, result.confirmed) == (
        "killed", "hidden:t.py::c", "first")
    assert (result.duration_s, result.processes_warm, result.processes_fresh,
            result.judges_warm) == (14.75, 7, 1, 3)
    # The grades themselves are left as they were (the result may be one of them).
    assert [g.judges_warm for g in grades] == [1, 1, 1] and grades[2].duration_s == 1.25


def test_the_reference_graded_in_parts_merges_into_one_header() -> None:
    from grading.hidden import NOT_SELECTED
    from grading.mutant_report import MutantsReport, merge_reference_parts
    from grading.packet import load_packet_spec

    packet = load_packet_spec(FIXTURE / "packet.yaml")

    def skipped(cid: str) -> ContractResult:
        return ContractResult(id=cid, kind="hidden_check" if cid.startswith("hidden:")
                              else "public_tests", statement="s", outcome="not_run",
                              reason=NOT_SELECTED)

    def part(k: int, contracts: list[ContractResult], seconds: float,
             coverage: dict[str, dict[str, list[int]]]) -> MutantsReport:
        return MutantsReport(
            task_id="tiny-regression", reference_verdict="incomplete",
            reference_duration_s=seconds, hidden_test_timeout_s=60.0 + k,
            grader_source_sha256="g", hidden_tree_sha256="h", collected=["t.py::a", "t.py::b"],
            coverage=coverage, coverage_recorded=True, reference_parts=2, reference_part=k,
            reference_contracts=contracts)

    first = part(0, [skipped("public-tests"), _contract("hidden:t.py::a", "pass", duration_s=4.0),
                     skipped("hidden:t.py::b")], 30.0,
                 {"t.py::a": {"/w/m.py": [1, 2]}, "": {"/w/m.py": [9]}})
    second = part(1, [_contract("public-tests", "pass", duration_s=7.0), skipped("hidden:t.py::a"),
                      _contract("hidden:t.py::b", "pass", duration_s=5.0)], 41.0,
                  {"t.py::b": {"/w/m.py": [3]}, "": {"/w/m.py": [4]}})
    merged = merge_reference_parts([first, second], packet)
    # Every contract as the part that ran it graded it: the reference passes as a whole.
    assert merged.reference_verdict == "complete" and merged.reference_failing == []
    assert merged.reference_durations_s == {"public-tests": 7.0, "hidden:t.py::a": 4.0,
                                            "hidden:t.py::b": 5.0}
    assert merged.coverage == {"t.py::a": {"/w/m.py": [1, 2]}, "t.py::b": {"/w/m.py": [3]},
                               "": {"/w/m.py": [4, 9]}}
    # The parts ran side by side: the slowest one's wall time, the larger per-test limit.
    assert (merged.reference_duration_s, merged.hidden_test_timeout_s) == (41.0, 61.0)
    assert merged.reference_parts == 2 and merged.collected == ["t.py::a", "t.py::b"]

    # A check no part ran, or one that failed in its part, fails the merged reference.
    unran = second.model_copy(update={"reference_contracts": [
        _contract("public-tests", "pass"), skipped("hidden:t.py::a"),
        skipped("hidden:t.py::b")]})
    assert merge_reference_parts([first, unran], packet).reference_verdict == "incomplete"
    failed = second.model_copy(update={"reference_contracts": [
        _contract("public-tests", "pass"), skipped("hidden:t.py::a"),
        _contract("hidden:t.py::b", "fail")]})
    assert merge_reference_parts([first, failed], packet).reference_failing == [
        "hidden:t.py::b"]
    # Parts of different grading code, or a part missing, are never merged.
    with pytest.raises(GraderError, match="one split"):
        merge_reference_parts([first, second.model_copy(
            update={"grader_source_sha256": "other"})], packet)
    with pytest.raises(GraderError, match="one split"):
        merge_reference_parts([first], packet)
    with pytest.raises(GraderError, match="one split"):
        merge_reference_parts([first, first], packet)
    with pytest.raises(GraderError, match="one split"):
        merge_reference_parts([first, second.model_copy(
            update={"configurations_not_run": {"cuda-1": "no GPU"}})], packet)
    with pytest.raises(GraderError, match="no part"):
        merge_reference_parts([], packet)
    # A check two parts both graded (one passing, one failing) is never settled by order.
    both = second.model_copy(update={"reference_contracts": [
        _contract("public-tests", "pass"), _contract("hidden:t.py::a", "fail"),
        _contract("hidden:t.py::b", "pass")]})
    with pytest.raises(GraderError, match="graded by two parts"):
        merge_reference_parts([first, both], packet)


def test_the_reference_parts_hold_every_check_exactly_once() -> None:
    from grading.hidden import share_of

    collected = [f"t.py::c{i}" for i in range(7)]
    for n in range(1, 5):
        parts = [share_of(collected, (k, n)) for k in range(n)]
        assert sorted(c for part in parts for c in part) == sorted(collected), n
        assert all(parts), n
