"""hub.core.access: read tokens and the admin token, as plain data."""

from __future__ import annotations

import pytest

from hub.core.access import MetricsAccess, OperatorAccess, ReadAccess
from hub.core.exceptions import Forbidden, Unauthorized
from hub.core.settings import Settings


def readers(**settings: object) -> ReadAccess:
    return ReadAccess(Settings(**settings))  # type: ignore[arg-type]


def test_reading_is_open_by_default() -> None:
    access = readers()
    assert access.is_open("t")
    access.check("t", None)
    assert access.readable("t", "Bearer anything")


def test_a_topic_read_token_makes_only_that_topic_private() -> None:
    access = readers(topic_read_tokens={"secret": ["r1"]})
    assert access.is_open("other") and not access.is_open("secret")
    with pytest.raises(Unauthorized, match="private"):
        access.check("secret", None)
    with pytest.raises(Unauthorized, match="Bearer"):
        access.check("secret", "Basic abc")
    with pytest.raises(Forbidden):
        access.check("secret", "Bearer r2")
    access.check("secret", "Bearer r1")
    assert not access.readable("secret", None)


def test_global_read_tokens_make_every_topic_private() -> None:
    access = readers(read_tokens=["g"], topic_read_tokens={"a": ["ra"]})
    assert not access.is_open("b")
    access.check("b", "Bearer g")
    access.check("a", "Bearer ra")
    with pytest.raises(Forbidden):
        access.check("b", "Bearer ra")


def test_publisher_tokens_grant_read() -> None:
    access = readers(
        read_tokens=["g"], tokens=["pub"], topic_tokens={"a": ["pa"]}, topic_read_tokens={}
    )
    access.check("z", "Bearer pub")
    access.check("a", "Bearer pa")
    with pytest.raises(Forbidden):
        access.check("z", "Bearer pa")


def test_admin_token_is_required_when_set() -> None:
    access = OperatorAccess(Settings(admin_token="adm"), hub_open=True)
    access.check("Bearer adm", loopback=False)
    with pytest.raises(Unauthorized):
        access.check(None, loopback=True)
    with pytest.raises(Forbidden):
        access.check("Bearer nope", loopback=True)


def test_without_admin_token_only_loopback_clients_of_an_open_hub() -> None:
    access = OperatorAccess(Settings(), hub_open=True)
    access.check(None, loopback=True)
    with pytest.raises(Forbidden, match="loopback"):
        access.check(None, loopback=False)
    closed = OperatorAccess(Settings(tokens=["p"]), hub_open=False)
    with pytest.raises(Forbidden, match="admin-token"):
        closed.check("Bearer p", loopback=True)


def test_sight_names_private_topics_only_to_tokens_that_may_read_them() -> None:
    access = readers(
        tokens=["pub"], topic_tokens={"a": ["pa"]}, topic_read_tokens={"a": ["ra"], "b": ["rb"]}
    )
    topics = ["a", "b", "open"]
    for authorization, seen in [
        (None, ["open"]),
        ("Basic cmE6", ["open"]),
        ("Bearer wrong", ["open"]),
        ("Bearer ra", ["a", "open"]),
        ("Bearer pa", ["a", "open"]),  # a topic's publisher reads what it writes
        ("Bearer rb", ["b", "open"]),
        ("Bearer pub", topics),  # a global publisher token reads every topic
    ]:
        assert [t for t in topics if access.sight(authorization)(t)] == seen, authorization
    everything_private = readers(read_tokens=["r"], topic_read_tokens={"a": ["ra"]})
    assert [t for t in topics if everything_private.sight(None)(t)] == []
    assert [t for t in topics if everything_private.sight("Bearer ra")(t)] == ["a"]
    assert [t for t in topics if everything_private.sight("Bearer r")(t)] == topics


def test_the_admin_token_is_admitted_only_when_configured() -> None:
    assert OperatorAccess(Settings(admin_token="adm"), hub_open=True).admits("Bearer adm")
    assert not OperatorAccess(Settings(admin_token="adm"), hub_open=True).admits("Bearer ad")
    assert not OperatorAccess(Settings(), hub_open=True).admits("Bearer ")
    assert not OperatorAccess(Settings(), hub_open=True).admits(None)


def test_the_metrics_token_when_set_admits_it_and_the_admin_token_only() -> None:
    MetricsAccess(Settings()).check(None)  # unset: public
    access = MetricsAccess(Settings(metrics_token="mt", admin_token="adm", read_tokens=["r"]))
    access.check("Bearer mt")
    access.check("bearer  adm ")
    for refused in (None, "", "Bearer", "Bearer m", "Bearer mtx", "Bearer r", "Basic bXQ="):
        with pytest.raises(Unauthorized):
            access.check(refused)
