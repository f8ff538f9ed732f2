"""The study file's price table: one price per model and token category, one currency."""

from __future__ import annotations

import datetime

import pytest
from pydantic import ValidationError

from harness.records.study import Price, Study

BASE = {"name": "s", "tasks": [{"id": "t"}], "pairs_per_task": 1,
        "arms": {"control": {"image": "control"}, "treatment": {"image": "treatment"}},
        "agent": {"model": "openai:m"}, "budget": {}}
PRICE = {"model": "openai:m", "category": "input", "per_million_tokens": 1.5,
         "date": "2026-12-01", "source": "price page"}


def test_a_price_table_is_read_with_its_date_and_source() -> None:
    study = Study.model_validate({**BASE, "prices": [PRICE, {**PRICE, "category": "output"}]})
    assert study.prices[0] == Price(model="openai:m", category="input", per_million_tokens=1.5,
                                    date=datetime.date(2026, 12, 1), source="price page")
    assert Study.model_validate(BASE).prices == []


@pytest.mark.parametrize(("prices", "words"), [
    ([PRICE, PRICE], "more than once"),
    ([PRICE, {**PRICE, "category": "output", "currency": "EUR"}], "more than one currency"),
    ([{**PRICE, "category": "cached"}], "category"),
    ([{k: v for k, v in PRICE.items() if k != "source"}], "source"),
    ([{**PRICE, "per_million_tokens": -1}], "per_million_tokens"),
])
def test_a_price_table_that_cannot_be_added_up_is_refused(prices: list[object],
                                                           words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        Study.model_validate({**BASE, "prices": prices})
