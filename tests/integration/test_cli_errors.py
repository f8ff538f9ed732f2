"""Bad input gets one clear error line, a non-zero exit, and nothing recorded is touched."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import write_study
from tests.helpers import harness, one_error_line


def test_image_missing(tmp_path: Path) -> None:
    study = write_study(tmp_path)
    result = harness("session", "--study", str(study), "--pair", "1", "--arm", "treatment",
                     env={"HARNESS_IMAGE_TAG": "never-built"})
    one_error_line(result, "harness-treatment:never-built", "harness images build")
    assert not (tmp_path / "runs").exists()


