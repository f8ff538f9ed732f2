"""The contained TrainCheck runner (``python -m diagnostics``) in the real treatment image.

Real containers, real torchrun gloo ranks, real ``traincheck-collect``: a crashed rank and a
hung rank are explicit failures with their cause, tracing never writes into the source tree,
and the trace's environment dump holds no secret.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import docker
import pytest

from harness.traincheck.box import RUNS, DiagnosticsBox
from harness.traincheck.reference import traced_run

TREE = Path(__file__).parents[1] / "fixtures" / "diag_tree"


@pytest.fixture(scope="module")
def box(client: docker.DockerClient) -> DiagnosticsBox:
    with DiagnosticsBox(client, "runner-test") as opened:
        yield opened


def _tree_digest(box: DiagnosticsBox, path: str) -> str:
    listing = box.sandbox.exec(
        f"cd {path} && find . -type f -print0 | sort -z | xargs -0 sha256sum", timeout_s=60)
    assert listing.exit_code == 0, listing.output
    return hashlib.sha256(listing.output.encode()).hexdigest()


def test_traced_ddp_run_tags_ranks_and_leaves_the_tree_untouched(box: DiagnosticsBox) -> None:
    src = box.put_tree("healthy", TREE)
    before = _tree_digest(box, src)
    secret = "sk-harness-test-secret-0123456789"
    result = box.sandbox.exec(
        ["python", "-m", "diagnostics", "run", "--src", src, "--out", f"{RUNS}/healthy",
         "--config", "gloo-ddp-2", "--traced", "--wall-s", "240", "--", "--steps", "3"],
        timeout_s=300, env={"OPENAI_API_KEY": secret})
    assert result.exit_code == 0, result.output[-2000:]
    record = box.call(["inspect", "--trace", f"{RUNS}/healthy/trace"], timeout_s=120)
    assert record["kinds"]["rank_identity"]["status"] == "observed"
    assert record["kinds"]["step_identity"]["status"] == "observed"
    assert record["names_equal_across_ranks"] is True
    assert set(record["parameter_names"]) == {"0", "1"}
    # DDP replicas: every (parameter, step) hash is equal on both ranks.
    equal, compared = record["cross_rank_equal_pairs"]
    assert compared > 0 and equal == compared
    # Stable logical names: no DDP "module." prefix.
    assert all(name.startswith("model.0.") or name.startswith("model.2.")
               for name in record["parameter_names"]["0"])
    assert _tree_digest(box, src) == before
    listing = box.sandbox.exec(["ls", "-a", src], timeout_s=30).output
    assert "_traincheck_" not in listing and "_diag_entry" not in listing
    env_dump = box.read_bytes(f"{RUNS}/healthy/trace/env_dump.txt").decode()
    assert secret not in env_dump and "OPENAI_API_KEY" not in env_dump
    assert "OMP_NUM_THREADS: 1" in env_dump


def test_crashed_rank_is_a_failure_with_its_cause(box: DiagnosticsBox) -> None:
    src = box.put_tree("crash", TREE)
    record = traced_run(box, src, f"{RUNS}/crash", "gloo-ddp-2",
                        ["--steps", "3", "--crash-rank", "1"], 240)
    assert record["outcome"] == "crash"
    assert "rank 1" in record["cause"] and "SIGSEGV" in record["cause"]


def test_tracer_crash_is_a_failure_not_zero_violations(box: DiagnosticsBox) -> None:
    """TrainCheck itself fails (an unreadable invariants file for selective collection)."""
    src = box.put_tree("tracer-crash", TREE)
    box.sandbox.put_file("/workspace", "broken.json", b"{not json")
    record = box.call(["run", "--src", src, "--out", f"{RUNS}/tracer-crash", "--config",
                       "cpu-1", "--traced", "--wall-s", "240", "--invariants",
                       "/workspace/broken.json", "--", "--steps", "2"], timeout_s=300)
    assert record["outcome"] == "crash"
    assert record["cause"].startswith("exit code")
    assert "ranks" in record and not record["ranks"]


# One frozen-format invariant naming two torch functions the fixture calls every step.
_ONE_INVARIANT = json.dumps({
    "num_negative_examples": 0, "num_positive_examples": 2,
    "params": [{"api_full_name": "torch.optim.lr_scheduler.LRScheduler.step",
                "param_type": "APIParam"},
               {"api_full_name": "torch.optim.optimizer.Optimizer.zero_grad",
                "param_type": "APIParam"}],
    "precondition": {"func_lead": {"inverted": False,
                                   "preconditions": [{"clauses": "Unconditional"}]}},
    "relation": "FunctionLeadRelation",
    "text_description": "LRScheduler.step() always precedes Optimizer.zero_grad()"})

_CALLED = ("import glob, json, sys\n"
           "names = set()\n"
           "for path in glob.glob(sys.argv[1] + '/trace_API_*'):\n"
           "    names |= {json.loads(line)['function'] for line in open(path) if line.strip()}\n"
           "print(json.dumps(sorted(names)))")


def test_selective_collection_records_only_what_the_invariants_name(
        box: DiagnosticsBox) -> None:
    """TrainCheck reads its selection by a path relative to where the program starts; a run
    that moved away first recorded every torch call whatever it was given."""
    src = box.put_tree("selective", TREE)
    box.sandbox.put_file("/workspace", "one.json", (_ONE_INVARIANT + "\n").encode())
    record = traced_run(box, src, f"{RUNS}/selective", "gloo-ddp-2", ["--steps", "3"], 240,
                        selective="/workspace/one.json")
    assert record["outcome"] == "ok", record["cause"]
    assert set(record["ranks"]) == {"0", "1"}
    called = box.sandbox.exec(["python", "-c", _CALLED, record["trace_dir"]], timeout_s=60)
    assert json.loads(called.output.strip().splitlines()[-1]) == [
        "torch.optim.lr_scheduler.LRScheduler.step", "torch.optim.optimizer.Optimizer.zero_grad"]
    # Every rank still has its sampled parameters after each step.
    assert all(rank["var_records"] > 0 for rank in record["ranks"].values())
    # An empty selection records no call, and the run is not taken for a missing rank.
    box.sandbox.put_file("/workspace", "none.json", b"")
    bare = traced_run(box, src, f"{RUNS}/selective-none", "gloo-ddp-2", ["--steps", "3"], 240,
                      selective="/workspace/none.json")
    assert bare["outcome"] == "ok", bare["cause"]
    assert all(not rank["api_files"] and rank["var_records"] > 0
               for rank in bare["ranks"].values())


def test_hung_rank_is_killed_at_the_wall_limit(box: DiagnosticsBox) -> None:
    src = box.put_tree("hang", TREE)
    record = traced_run(box, src, f"{RUNS}/hang", "gloo-ddp-2",
                        ["--steps", "3", "--hang-rank", "1"], 60)
    assert record["outcome"] == "hang"
    assert "wall limit of 60 s" in record["cause"]
    left = box.sandbox.exec("ps -eo args | grep -c '[_]diag_entry' || true", timeout_s=30)
    assert left.output.strip().splitlines()[0] == "0"


def test_output_folder_is_never_reused(box: DiagnosticsBox) -> None:
    src = box.put_tree("reuse", TREE)
    traced_run(box, src, f"{RUNS}/reuse", "cpu-1", ["--steps", "1"], 120, traced=False)
    with pytest.raises(Exception, match="exists"):
        traced_run(box, src, f"{RUNS}/reuse", "cpu-1", ["--steps", "1"], 120, traced=False)


def test_clean_removes_a_finished_runs_folders_and_nothing_else(box: DiagnosticsBox) -> None:
    """What keeps a long build or calibration plan inside the box's 2 GiB /workspace."""
    made = box.sandbox.exec(
        f"cd {RUNS} && mkdir -p clean-s1/trace clean-s1-chk clean-s10 clean-s1.kept && "
        "touch clean-s1/trace/t clean-s1-resume clean-s1.kept.json", timeout_s=30)
    assert made.exit_code == 0, made.output
    box.clean(f"{RUNS}/clean-s1")
    left = box.sandbox.exec(f"cd {RUNS} && ls -d clean-*", timeout_s=30).output.split()
    assert sorted(left) == ["clean-s1.kept", "clean-s1.kept.json", "clean-s10"]
