"""Sets of topics named by name or by name prefix: what a stream asks for, what a token reads.

A pattern is a topic name (``news``) or a prefix of names followed by ``*`` (``repo-*``:
every topic whose name starts with ``repo-``). The prefix is itself the start of a valid
name (a letter or digit, then letters, digits, ``.``, ``_`` or ``-``): ``*`` alone names
nothing, as "every topic" has settings of its own (``RSHUB_READ_TOKENS``). Streams of several
topics ask with ``topic=`` (names, repeatable or comma-separated) and ``topic_prefix=``
(:meth:`TopicPatterns.from_query`); read tokens grant with ``topic_read_tokens`` keys and a
signed read token's ``topics`` claim (:mod:`hub.core.access`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from hub.core.exceptions import BadRequest
from hub.core.topics import check_name
from rsclient.topic_names import TOPIC_NAME_RULE

#: The start of a topic name: what may come before the ``*`` of a prefix pattern.
NAME_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,126}")
#: A pattern, as a setting or a claim may spell it.
PATTERN_RULE = f"a topic name ({TOPIC_NAME_RULE}) or the start of one followed by '*'"
#: Prefixes one stream may follow at most.
MAX_PREFIXES = 32


def check_pattern(value: str) -> str:
    """``value`` if it is a pattern (ValueError naming the rule otherwise: for settings)."""
    if value.endswith("*"):
        if NAME_PREFIX.fullmatch(value[:-1]):
            return value
    else:
        try:
            return check_name(value)
        except BadRequest:
            pass
    raise ValueError(f"{value[:140]!r} is not {PATTERN_RULE}")


@dataclass(frozen=True, slots=True)
class TopicPatterns:
    """Topics by name and by name prefix."""

    names: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    @classmethod
    def of(cls, patterns: Iterable[str]) -> TopicPatterns:
        """The patterns ``patterns`` spell (``name`` or ``prefix*``); anything else names no
        topic (a signed read token's claim is another party's text: it grants what it can
        be read as, and never more)."""
        names, prefixes = set(), set()
        for pattern in patterns:
            if pattern.endswith("*"):
                if NAME_PREFIX.fullmatch(pattern[:-1]):
                    prefixes.add(pattern[:-1])
            elif pattern:
                names.add(pattern)
        return cls(frozenset(names), tuple(sorted(prefixes)))

    @classmethod
    def from_query(
        cls, topics: list[str], prefixes: list[str], *, max_topics: int
    ) -> TopicPatterns:
        """What a stream of several topics asks for: ``topic=`` (repeatable, or names
        separated by commas) and ``topic_prefix=`` (repeatable); 400 naming the parameter
        for a bad name or prefix, none at all, or more than the limits."""
        names: set[str] = set()
        for value in topics:
            for name in value.split(","):
                try:
                    names.add(check_name(name))
                except BadRequest as exc:
                    raise BadRequest(f"topic=: {exc.message}") from None
                if len(names) > max_topics:
                    raise BadRequest(
                        f"topic= names more than {max_topics} topics, the hub's limit for one "
                        "stream (stream_max_topics, RSHUB_STREAM_MAX_TOPICS): follow a "
                        "topic_prefix=, or open several streams",
                        limit="stream_max_topics",
                    )
        if len(prefixes) > MAX_PREFIXES:
            raise BadRequest(f"at most {MAX_PREFIXES} topic_prefix= values")
        for prefix in prefixes:
            if not NAME_PREFIX.fullmatch(prefix):
                raise BadRequest(
                    f"topic_prefix={prefix[:140]!r} is not the start of a topic name "
                    f"({TOPIC_NAME_RULE}): a letter or digit, then letters, digits, '.', '_' "
                    "or '-'"
                )
        if not names and not prefixes:
            raise BadRequest(
                "name the topics to follow: topic=NAME (repeatable, or NAME,NAME) and/or "
                "topic_prefix=PREFIX"
            )
        return cls(frozenset(names), tuple(sorted(set(prefixes))))

    def __bool__(self) -> bool:
        return bool(self.names or self.prefixes)

    def matches(self, topic: str) -> bool:
        return topic in self.names or (bool(self.prefixes) and topic.startswith(self.prefixes))

    def covers_prefix(self, prefix: str) -> bool:
        """Every topic starting with ``prefix`` matches (a grant of ``repo-*`` covers
        ``repo-a``'s prefix ``repo-a``, not ``re``)."""
        return any(prefix.startswith(own) for own in self.prefixes)

    def shown(self, most: int = 10) -> str:
        """The patterns as a message names them."""
        items = sorted(self.names) + [f"{p}*" for p in self.prefixes]
        text = ", ".join(repr(i) for i in items[:most])
        return text + (f" and {len(items) - most} more" if len(items) > most else "")
