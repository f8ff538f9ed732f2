"""Removing a container that another cleanup is removing too: the daemon's answers, scripted.

The real engine's race is exercised in tests/integration/test_sandbox.py (two cleanups at once);
here each
answer the daemon can give is played in turn, including those a race rarely produces.
"""

from __future__ import annotations

import docker.errors
import pytest
import requests

from harness.errors import HarnessError
from harness.infra.sandbox import _remove_container


def api_error(status: int, explanation: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError("daemon said no", response=response, explanation=explanation)


IN_PROGRESS = api_error(409, "removal of container abc is already in progress")


class ScriptedContainer:
    """Answers ``remove`` and ``reload`` from two scripts: an exception to raise, or a status
    for ``reload`` to set (None: ``remove`` succeeds)."""

    name = "harness-test-abc"

    def __init__(self, removes: list[Exception | None], reloads: list[Exception | str]) -> None:
        self.removes, self.reloads = removes, reloads
        self.status = "running"
        self.calls: list[str] = []

    def remove(self, *, force: bool, v: bool) -> None:
        assert force and v
        self.calls.append("remove")
        answer = self.removes.pop(0)
        if answer is not None:
            raise answer

    def reload(self) -> None:
        self.calls.append("reload")
        answer = self.reloads.pop(0)
        if isinstance(answer, Exception):
            raise answer
        self.status = answer


def test_removed_at_once_or_already_gone() -> None:
    assert _remove_container(ScriptedContainer([None], [])) is True
    assert _remove_container(ScriptedContainer([docker.errors.NotFound("gone")], [])) is False


def test_another_removal_in_progress_is_waited_for() -> None:
    box = ScriptedContainer([IN_PROGRESS], ["removing", docker.errors.NotFound("gone")])
    assert _remove_container(box) is True
    assert box.calls == ["remove", "reload", "reload"]


def test_a_removal_that_failed_elsewhere_is_tried_again_and_its_error_surfaces() -> None:
    # The other removal ended with the container still there ("dead"): remove it again, and
    # what the daemon says then is what the caller sees.
    fatal = api_error(500, "driver failed to remove root filesystem")
    box = ScriptedContainer([IN_PROGRESS, fatal], ["dead"])
    with pytest.raises(docker.errors.APIError) as caught:
        _remove_container(box)
    assert caught.value is fatal and box.calls == ["remove", "reload", "remove"]
    again = ScriptedContainer([IN_PROGRESS, None], ["dead"])
    assert _remove_container(again) is True


def test_other_conflicts_and_errors_are_not_waited_for() -> None:
    for error in (api_error(409, "container is paused"), api_error(500, "boom")):
        box = ScriptedContainer([error], [])
        with pytest.raises(docker.errors.APIError):
            _remove_container(box)
        assert box.calls == ["remove"]


def test_a_removal_that_never_ends_is_one_clear_error() -> None:
    box = ScriptedContainer([IN_PROGRESS], ["removing"] * 100)
    with pytest.raises(HarnessError, match="still being removed") as caught:
        _remove_container(box, wait_s=1.2)
    assert "harness cleanup" in caught.value.fix
