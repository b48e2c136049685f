"""hub.core.topic_patterns: topics by name and by name prefix; and read grants of prefixes
(``topic_read_tokens`` keys ``pri*``, a signed read token's ``pri*``)."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from hub.core.access import ReadAccess
from hub.core.exceptions import BadRequest, Forbidden, Unauthorized
from hub.core.read_tokens import mint
from hub.core.settings import Settings, describe_error
from hub.core.topic_patterns import MAX_PREFIXES, TopicPatterns, check_pattern

KEY = "k" * 32


def test_patterns_are_names_and_name_prefixes() -> None:
    patterns = TopicPatterns.of(["news", "pri*", "*", "", "bad/name*", "x y"])
    assert patterns.names == {"news", "x y"} and patterns.prefixes == ("pri",)
    assert patterns.matches("news") and patterns.matches("private") and patterns.matches("pri")
    assert not patterns.matches("newsroom") and not patterns.matches("pr")
    assert patterns.covers_prefix("private-") and not patterns.covers_prefix("pr")
    assert "'pri*'" in patterns.shown()


@pytest.mark.parametrize("good", ["news", "pri*", "a*", "a.b-c_d*"])
def test_a_pattern_setting_takes_names_and_prefixes(good: str) -> None:
    assert check_pattern(good) == good


@pytest.mark.parametrize("bad", ["*", "**", "a**", "-a*", "a/b", "a b*", "", "é*", "a" * 128 + "*"])
def test_a_pattern_setting_refuses_anything_else(bad: str) -> None:
    with pytest.raises(ValueError, match="topic name"):
        check_pattern(bad)


def test_a_stream_asks_by_names_and_prefixes() -> None:
    asked = TopicPatterns.from_query(["a,b", "c"], ["repo-", "repo-"], max_topics=10)
    assert asked.names == {"a", "b", "c"} and asked.prefixes == ("repo-",)


@pytest.mark.parametrize(
    ("topics", "prefixes", "says"),
    [
        ([], [], "name the topics"),
        (["a,,b"], [], "topic="),
        (["a/b"], [], "topic="),
        (["ok"], [""], "topic_prefix"),
        ([], ["-x"], "topic_prefix"),
        ([], ["a b"], "topic_prefix"),
        ([",".join(f"t{i}" for i in range(11))], [], "stream_max_topics"),
        ([], [f"p{i}" for i in range(MAX_PREFIXES + 1)], "at most 32"),
    ],
)
def test_a_bad_ask_is_a_400_naming_the_parameter(
    topics: list[str], prefixes: list[str], says: str
) -> None:
    with pytest.raises(BadRequest, match=says):
        TopicPatterns.from_query(topics, prefixes, max_topics=10)


class TestPrefixGrants:
    def test_a_read_token_of_a_prefix_makes_its_topics_private(self) -> None:
        access = ReadAccess(Settings(topic_read_tokens={"pri*": ["rp"], "private-b": ["rb"]}))
        assert access.is_open("public") and access.is_open("pr")
        assert not access.is_open("private-a") and not access.is_open("pri")
        access.check("private-a", "Bearer rp")
        access.check("private-b", "Bearer rp")  # its prefix's token, and its own
        access.check("private-b", "Bearer rb")
        with pytest.raises(Forbidden):
            access.check("private-a", "Bearer rb")
        with pytest.raises(Unauthorized):
            access.check("pri", None)
        sees = access.sight("Bearer rp")
        assert (
            sees("private-a")
            and sees("public")
            and not ReadAccess(Settings(topic_read_tokens={"pri*": ["rp"]})).sight("Bearer rb")(
                "private-a"
            )
        )

    def test_a_signed_read_token_may_name_a_prefix(self) -> None:
        access = ReadAccess(Settings(jwt_key=KEY, read_tokens=["g"]))
        token = mint(KEY, ["pri*", "news"], 60)
        authorization = f"Bearer {token}"
        for topic in ("private", "pri", "news"):
            assert access.grant(topic, authorization).ends_at is not None
        with pytest.raises(Forbidden, match="'news', 'pri\\*'"):
            access.check("pr", authorization)
        sees = access.sight(authorization)
        assert sees("private-x") and not sees("other")

    def test_a_star_alone_grants_nothing(self) -> None:
        access = ReadAccess(Settings(jwt_key=KEY, read_tokens=["g"]))
        with pytest.raises(Forbidden):
            access.check("anything", f"Bearer {mint(KEY, ['*'], 60)}")

    def test_checking_a_token_once_for_a_stream(self) -> None:
        access = ReadAccess(Settings(jwt_key=KEY, topic_read_tokens={"pri*": ["rp"]}))
        access.check_token(None)  # no token: the open topics
        access.check_token("Bearer rp")
        access.check_token(f"Bearer {mint(KEY, ['x'], 60)}")
        with pytest.raises(Forbidden, match="reads no topic"):
            access.check_token("Bearer nope")
        with pytest.raises(Unauthorized, match="Bearer"):
            access.check_token("Basic x")
        expired = mint(KEY, ["x"], 1, now=time.time() - 3600)
        with pytest.raises(Unauthorized, match="expired"):
            access.check_token(f"Bearer {expired}")
        ReadAccess(Settings()).check_token("Bearer anything")  # every topic open: ignored

    def test_a_bad_prefix_key_is_a_bad_setting_naming_it(self) -> None:
        with pytest.raises(ValidationError) as refused:
            Settings(topic_read_tokens={"*": ["t"]})
        text = describe_error(refused.value)
        assert "RSHUB_TOPIC_READ_TOKENS" in text and "followed by '*'" in text
