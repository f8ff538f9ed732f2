"""The study layer: the pilot files, the lock, drift, the diagnostic gate, the default study."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from harness.paths import REPO_ROOT
from harness.records.outcomes import outcome_kind
from harness.records.study import launch_order, load_study

TINY = "tiny-regression"


def test_the_pilot_and_its_offline_variant_have_the_same_shape() -> None:
    pilot = load_study(Path("studies/pilot.yaml"))
    offline = load_study(Path("studies/pilot-offline.yaml"))
    assert [t.id for t in pilot.tasks] == ["moe-router", "hybrid-arch"]
    assert pilot.pairs_per_task == 3 and len(launch_order(pilot)) == 12
    assert pilot.agent.model.split(":")[0] in ("anthropic", "openai")
    assert pilot.caps.cpu_hours is not None and pilot.caps.gpu_hours is not None
    for field in ("tasks", "pairs_per_task", "seed", "arms", "budget", "caps", "matrix",
                  "resources"):
        assert getattr(offline, field) == getattr(pilot, field), field
    # Every session of the offline pilot has its scripted agent.
    for spec in launch_order(offline):
        script = offline.agent_for(spec).model.removeprefix("scripted:")
        assert (REPO_ROOT / script).is_file(), script
    # Every budget number in the pilot carries its reason (a comment right above it;
    # tokens_total shares the token reasoning above tokens_output).
    section = (REPO_ROOT / "studies/pilot.yaml").read_text().split("\nbudget:\n", 1)[1]
    reason = False
    for line in section.split("\ncaps:", 1)[0].splitlines():
        if line.strip().startswith("#"):
            reason = True
            continue
        key = line.split(":")[0].strip()
        assert reason or key == "tokens_total", f"no reason given for {key}"
        reason = False


def test_the_regression_and_repair_agent_writes_the_solve_then_breaks_and_repairs_it() -> None:
    solve = yaml.safe_load((REPO_ROOT / "tests/fixtures/agents/moe-router-solve.yaml")
                           .read_text())["steps"]
    steps = yaml.safe_load((REPO_ROOT / "studies/agents/pilot-offline/moe-router-treatment.yaml")
                           .read_text())["steps"]
    feature = solve[:10]
    assert steps[:10] == feature and feature[-1]["tool"] == "edit_file"
    tools = [s["tool"] for s in steps[10:]]
    assert tools == ["edit_file", "traincheck", "edit_file", "traincheck", "bash",
                     "run_public_tests", "run_candidate", "submit"]
    broken, repaired = steps[10]["args"], steps[12]["args"]
    assert (repaired["old"], repaired["new"]) == (broken["new"], broken["old"])


def test_launch_order_is_seeded_and_blocked_by_pair() -> None:
    study = load_study(Path("studies/pilot.yaml"))
    order = launch_order(study)
    assert order == launch_order(study)  # deterministic
    assert {(s.pair, s.arm) for s in order} == {(p, a) for p in range(1, 7)
                                                for a in ("control", "treatment")}
    for first, second in zip(order[::2], order[1::2], strict=True):
        assert first.pair == second.pair and {first.arm, second.arm} == {"control", "treatment"}
    other = study.model_copy(update={"seed": study.seed + 1})
    assert [s.session_id for s in launch_order(other)] != [s.session_id for s in order]


def test_every_outcome_the_harness_writes_is_classified() -> None:
    """A new outcome string must be classified in harness/records/outcomes.py before a matrix run
    treats it as anything: this finds every literal the agent loop and the session write."""
    sources = "".join((REPO_ROOT / p).read_text() for p in (
        "harness/agent/loop.py", "harness/study/session.py"))
    literals = set(re.findall(r'outcome="([a-z_]+)"', sources))
    literals |= set(re.findall(r'^\s*record\.outcome = "([a-z_]+)"', sources, re.MULTILINE))
    literals |= set(re.findall(r'record\.status, record\.outcome = "[a-z]+", "([a-z_]+)"',
                               sources))
    assert {"submitted", "agent_stopped", "workspace_full", "sandbox_lost", "harness_error",
            "interrupted", "diff_failed"} <= literals
    for outcome in literals:
        assert outcome_kind(outcome) is not None, outcome
    providers = "".join(p.read_text() for p in (REPO_ROOT / "harness/agent/providers").glob("*.py"))
    for kind in set(re.findall(r'ProviderError\(\s*"([a-z_]+)"', providers)) | {
            "auth", "permission", "not_found", "bad_request"}:
        assert outcome_kind(f"provider_error:{kind}") is not None, kind
    assert outcome_kind("budget_exhausted:tokens_total") == "agent"
    assert outcome_kind("provider_error:retries_exhausted") == "infra"
    assert outcome_kind("sandbox_lost") == "infra"
    assert outcome_kind("provider_error:auth") == "agent"
    assert outcome_kind("something_new") is None


def test_a_cli_agent_speaks_its_own_providers_api() -> None:
    from pydantic import ValidationError

    from harness.records.study import AgentSettings

    AgentSettings(kind="claude-code", model="anthropic:claude-x")
    AgentSettings(kind="codex", model="openai:gpt-x", cli_version="0.169.0")
    AgentSettings(kind="codex", model="scripted:{task}-{arm}.yaml")
    for bad in ({"kind": "claude-code", "model": "openai:gpt-x"},
                {"kind": "codex", "model": "anthropic:claude-x"},
                {"kind": "loop", "model": "openai:gpt-x", "cli_version": "1"},
                {"kind": "aider", "model": "openai:gpt-x"}):
        try:
            AgentSettings.model_validate(bad)
        except ValidationError:
            continue
        raise AssertionError(f"accepted {bad}")


def test_the_offline_pilot_runs_a_cli_agent_with_one_more_line(tmp_path: Path) -> None:
    from harness.agent.gateway.scripted import claude_turns, codex_turns
    from harness.agent.providers.scripted import load_script

    text = (REPO_ROOT / "studies/pilot-offline.yaml").read_text()
    for kind, turns in (("claude-code", claude_turns), ("codex", codex_turns)):
        changed = text.replace("\nagent:\n", f"\nagent:\n  kind: {kind}\n", 1)
        assert len(changed.splitlines()) == len(text.splitlines()) + 1
        path = tmp_path / f"pilot-{kind}.yaml"
        path.write_text(changed)
        study = load_study(path)
        assert study.agent.kind == kind
        for spec in launch_order(study):
            script = load_script(REPO_ROOT / study.agent_for(spec).model.removeprefix(
                "scripted:"))
            assert all(turns(step) for step in script.steps)
