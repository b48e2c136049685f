"""A stored subscription record is read whole or refused whole: each field of the type the
hub writes, else :class:`DamagedData` naming the field (never a worker that fails on it
later, as one did on a count stored as text)."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from hub.core.exceptions import DamagedData
from hub.store.subscriptions import _FIELD_TYPES, Subscription

GOOD = Subscription("t", "http://hub.example/topics/t", "http://cb.example/", 86400, 2e9)


def test_every_field_has_its_type_checked() -> None:
    assert set(_FIELD_TYPES) == {f.name for f in dataclasses.fields(Subscription)}


def test_a_record_the_hub_wrote_reads_back_equal() -> None:
    assert Subscription.from_json(GOOD.to_json()) == GOOD
    filled = dataclasses.replace(
        GOOD, failures=3, filter_changes=["created"], rate_limit=[2.0, 5], token_jti="j"
    )
    assert Subscription.from_json(filled.to_json()) == filled


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("failures", "many"),
        ("failures", 1.5),
        ("failures", True),
        ("lease_seconds", 1.5),
        ("expires_at", "soon"),
        ("retry_at", None),
        ("last_error", 5),
        ("filter_changes", "created"),
        ("filter_prefixes", [1]),
        ("rate_limit", ["x", 1]),
        ("signature", None),
        ("token_fingerprint", ["a"]),
    ],
)
def test_a_field_of_another_type_is_damaged_data_naming_it(field: str, value: object) -> None:
    record = orjson.loads(GOOD.to_json())
    record[field] = value
    with pytest.raises(DamagedData, match=f"its {field} is of the wrong type"):
        Subscription.from_json(orjson.dumps(record))


def test_an_integral_float_lease_reads_as_an_int() -> None:
    record = orjson.loads(GOOD.to_json())
    record["lease_seconds"] = 3600.0
    read = Subscription.from_json(orjson.dumps(record))
    assert read.lease_seconds == 3600 and isinstance(read.lease_seconds, int)
