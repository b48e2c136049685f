"""What a topic name may be, checked by the hub and by the client commands alike.

A topic name is one path segment of the hub's URLs and part of Redis key names. The hub
refuses any other name with a 400; a client command checks the same rule before it sends
anything, so ``--topic a/b`` is a usage error naming the rule rather than the 404 of a URL
the hub has no route for. One implementation, so the two can never disagree.
"""

from __future__ import annotations

import re

#: The rule, as shown to people.
TOPIC_NAME_RULE = "[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
#: What a topic name may be.
TOPIC_NAME = re.compile(TOPIC_NAME_RULE)


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a topic name (``None``: it can)."""
    if TOPIC_NAME.fullmatch(name):
        return None
    return (
        f"invalid topic name {name[:140]!r}: must match {TOPIC_NAME_RULE} "
        "(a letter or digit, then up to 127 letters, digits, '.', '_' or '-'; no '/')"
    )
