"""HTTP ``Link`` headers (RFC 8288), the little WebSub discovery needs."""

from __future__ import annotations

import re
from collections.abc import Iterable

_LINK = re.compile(r"<([^>]*)>\s*((?:;\s*[^;,]+)*)")
_PARAM = re.compile(r';\s*([A-Za-z0-9_*-]+)\s*=\s*(?:"([^"]*)"|([^;,\s]+))')


def parse_link_header(values: Iterable[str]) -> dict[str, str]:
    """Map each ``rel`` value to its first target URL."""
    out: dict[str, str] = {}
    for value in values:
        for match in _LINK.finditer(value):
            url, params = match.group(1), match.group(2)
            for pmatch in _PARAM.finditer(params):
                if pmatch.group(1).lower() == "rel":
                    rels = pmatch.group(2) if pmatch.group(2) is not None else pmatch.group(3)
                    for rel in rels.split():
                        out.setdefault(rel.lower(), url.strip())
    return out


def format_links(hub_url: str, topic_url: str) -> str:
    return f'<{hub_url}>; rel="hub", <{topic_url}>; rel="self"'
