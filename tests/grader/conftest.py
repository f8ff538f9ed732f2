"""Fixtures of the tests that run inside the grader image
(``tests/integration/test_grader_image.py``)."""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from grading import sealed


@pytest.fixture(autouse=True)
def candidate_area(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A candidate uid and a job area for code under test that runs candidate processes.

    The grader image sets its candidate uid, and the container is its own PID namespace. Run
    anywhere else (as root), each test takes a random unused uid, because the grader kills
    every process of that uid and a shared one would reach other graders on the machine.
    """
    if not os.environ.get(sealed.CANDIDATE_UID_VAR):
        monkeypatch.setenv(sealed.CANDIDATE_UID_VAR, str(random.randrange(3_000_000, 4_000_000)))
    # In /tmp (world-searchable), not under pytest's 0700 tmp_path: the candidate must reach it.
    area = sealed.make_area(Path(tempfile.mkdtemp(prefix="grading-area-")))
    monkeypatch.setenv(sealed.CANDIDATE_AREA_VAR, str(area))
    yield area
    # A failed test can leave a candidate's deep tree behind; shutil.rmtree recurses per level.
    with contextlib.suppress(OSError):
        sealed.remove_tree(str(area))
