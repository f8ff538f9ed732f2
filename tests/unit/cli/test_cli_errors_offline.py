"""Bad input gets one clear error line, a non-zero exit, and nothing recorded is touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.oracle.validate import unfinished_validation
from tests.conftest import write_study
from tests.helpers import one_error_line, run_cli


def test_unknown_study_file(tmp_path: Path) -> None:
    result = run_cli("session", "--study", str(tmp_path / "nope.yaml"), "--pair", "1",
                     "--arm", "control")
    one_error_line(result, "nope.yaml", "does not exist")


def test_malformed_study_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntasks: [\n")
    one_error_line(run_cli("session", "--study", str(bad), "--pair", "1", "--arm",
                                  "control"), "not valid YAML")
    bad.write_text("name: x\ntasks: []\n")
    one_error_line(run_cli("session", "--study", str(bad), "--pair", "1", "--arm",
                                  "control"), "bad.yaml")


@pytest.mark.parametrize(("pair", "arm", "words"), [
    ("7", "control", ("pairs 1-1", "not 7")),
    ("1", "placebo", ("unknown arm", "placebo")),
])
def test_unknown_pair_or_arm(tmp_path: Path, pair: str, arm: str, words: tuple[str]) -> None:
    study = write_study(tmp_path)
    result = run_cli("session", "--study", str(study), "--pair", pair, "--arm", arm)
    one_error_line(result, *words)
    assert not (tmp_path / "runs").exists()  # nothing was started or recorded


def test_docker_daemon_down(tmp_path: Path) -> None:
    study = write_study(tmp_path)
    result = run_cli("session", "--study", str(study), "--pair", "1", "--arm", "control",
                     env={"DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"})
    one_error_line(result, "Docker daemon")
    assert not (tmp_path / "runs").exists()


def test_grade_of_unknown_session(tmp_path: Path) -> None:
    result = run_cli("grade", str(tmp_path / "nothing"), "--runs", str(tmp_path))
    one_error_line(result, "no session found")


def test_existing_attempts_are_never_overwritten(tmp_path: Path) -> None:
    from harness.records.attempt import new_attempt_dir

    first, n1 = new_attempt_dir(tmp_path / "s")
    (first / "session.json").write_text("{}")
    second, n2 = new_attempt_dir(tmp_path / "s")
    assert second.name == "attempt-2" and not (second / "session.json").exists()
    assert (n1, n2) == (1, 2) and (first / "session.json").read_text() == "{}"


def test_malformed_model_override(tmp_path: Path) -> None:
    study = write_study(tmp_path)
    result = run_cli("session", "--study", str(study), "--pair", "1", "--arm", "control",
                     "--model", "gpt-without-provider")
    one_error_line(result, "PROVIDER:NAME")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("option", "value", "words"), [
    ("--mutant", "arith-0000000000", ("no mutant with id(s) ['arith-0000000000']",)),
    ("--operator", "teleport", ("unknown mutation operator(s) ['teleport']",)),
])
def test_oracle_strength_bad_selection(option: str, value: str, words: tuple[str]) -> None:
    fixture = "tests/fixtures/task_packets/tiny-regression"
    one_error_line(run_cli("oracle-strength", "--task", "tiny-regression", "--packet", fixture,
                           option, value), *words)


@pytest.mark.parametrize(("edit", "words"), [
    # A misspelt key is named first, with the key it probably is, not the "Field required"
    # its absence causes.
    (("pairs_per_task:", "pairs_per_tsk:"),
     ("unknown key `pairs_per_tsk`", "did you mean `pairs_per_task`?")),
    (("  model:", "  modle:"), ("unknown key `agent.modle`", "did you mean `model`?")),
    (None, ("not valid YAML at line 3", "expected")),
    (("", ""), ("is empty",)),
])
def test_study_errors_name_the_real_culprit(tmp_path: Path, edit: tuple[str, str] | None,
                                            words: tuple[str, ...]) -> None:
    study = write_study(tmp_path, agent={"max_output_tokens": 512})
    text = study.read_text()
    if edit is None:
        text = "name: x\ntasks: [\n"
    elif edit == ("", ""):
        text = "  \n"
    else:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1])
    study.write_text(text)
    one_error_line(run_cli("matrix", "plan", "--study", str(study)), *words)


def test_an_unknown_provider_is_named_as_such(tmp_path: Path) -> None:
    study = write_study(tmp_path, agent={"model": "mistral:large"})
    line = one_error_line(run_cli("matrix", "plan", "--study", str(study)),
                          "unknown provider 'mistral'", "anthropic:<model>")
    assert "^(" not in line  # no regex


def test_a_study_path_from_the_environment_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "gone.yaml"
    result = run_cli("matrix", "plan", env={"HARNESS_STUDY": str(missing)})
    one_error_line(result, "gone.yaml", "does not exist", "came from $HARNESS_STUDY",
                   "unset $HARNESS_STUDY")


@pytest.mark.parametrize(("gpus", "words"), [("-1", ("--gpus",)), ("1", ("needs 1 GPU",))])
def test_a_gpu_count_this_host_cannot_give_leaves_nothing(
    tmp_path: Path, gpus: str, words: tuple[str, ...]
) -> None:
    study = write_study(tmp_path)
    result = run_cli("session", "--study", str(study), "--pair", "1", "--arm", "control",
                     "--gpus", gpus, env={"HARNESS_GPU_IDS": ""})
    one_error_line(result, *words)
    assert not (tmp_path / "runs").exists()  # no attempt folder, finished or not


def test_cleanup_takes_the_study_file(tmp_path: Path) -> None:
    one_error_line(run_cli("cleanup", "--study", str(tmp_path / "nope.yaml")),
                   "nope.yaml", "does not exist")
    one_error_line(run_cli("cleanup", "--study", "pilot"), "does not exist")


def test_validate_resume_takes_no_variants_and_needs_a_stopped_run(tmp_path: Path) -> None:
    one_error_line(run_cli("validate", "--task", "moe-router", "--resume", "--variant",
                           "baseline"), "--resume and --variant")
    with pytest.raises(HarnessError, match="no validation to resume"):
        unfinished_validation(tmp_path / "moe-router")
    (tmp_path / "moe-router" / "validation-2").mkdir(parents=True)
    (tmp_path / "moe-router" / "validation-10").mkdir()
    assert unfinished_validation(tmp_path / "moe-router").name == "validation-10"
    (tmp_path / "moe-router" / "validation-10" / "validation.json").write_text("{}")
    with pytest.raises(HarnessError, match="finished: nothing to resume"):
        unfinished_validation(tmp_path / "moe-router")
