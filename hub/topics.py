"""Topic names and topic URIs (DESIGN.md: ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``)."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlsplit

from .exceptions import BadRequest

TOPIC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_name(name: str) -> str:
    if not TOPIC_NAME.fullmatch(name):
        raise BadRequest(
            f"invalid topic name {name[:140]!r}: must match [A-Za-z0-9][A-Za-z0-9._-]{{0,127}}"
        )
    return name


def topic_url(base_url: str, name: str) -> str:
    return f"{base_url}/topics/{name}"


def name_from_url(base_url: str, url: str) -> str:
    """The topic name behind a topic URI.

    A URI under ``{base}/topics/`` names its topic directly; any other absolute http(s) URI
    (a Source's own topic URI) gets a stable derived name: its host plus a digest.
    """
    prefix = f"{base_url}/topics/"
    if url.startswith(prefix):
        return check_name(url[len(prefix) :])
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"topic must be an absolute http(s) URL, got {url[:200]!r}")
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    host = re.sub(r"[^A-Za-z0-9.-]", "-", parts.hostname)[:100].strip(".-") or "topic"
    return check_name(f"{host}-{digest}")
