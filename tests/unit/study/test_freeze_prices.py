"""The lock digests a study file without its price table: prices are read by reports only,
so a new price list is not a new study; a file without a table keeps the digest of its bytes."""

from __future__ import annotations

from pathlib import Path

import yaml

from grading.hashing import file_sha256
from harness.study.freeze import study_file_sha256

PRICE = {"model": "openai:m", "category": "input", "per_million_tokens": 1.0,
         "date": "2026-12-01", "source": "s"}


def test_a_study_file_without_prices_is_digested_as_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "study.yaml"
    path.write_text("name: s\n# a comment\npairs_per_task: 1\n")
    assert study_file_sha256(path) == file_sha256(path)


def test_the_price_table_is_left_out_of_the_digest_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "pairs_per_task": 1, "prices": [PRICE]}))
    before = study_file_sha256(path)
    path.write_text(yaml.safe_dump({"name": "s", "pairs_per_task": 1,
                                    "prices": [{**PRICE, "per_million_tokens": 2.0}]}))
    assert study_file_sha256(path) == before
    path.write_text(yaml.safe_dump({"name": "s", "pairs_per_task": 2,
                                    "prices": [{**PRICE, "per_million_tokens": 2.0}]}))
    assert study_file_sha256(path) != before
