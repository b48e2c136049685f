"""Which URL hosts a resolver can look up at all: one rule for the hub and the clients.

Python's resolver (``getaddrinfo`` given a ``str``) encodes a name with the ``idna`` codec
first, and a label over 63 characters, an empty label or a name over 253 characters fails
there with a ``UnicodeError``: not the ``OSError`` of a failed lookup that callers handle.
The hub answered such a callback or publish-ping URL with a 500, ``rshub subscribe`` died
with a traceback, and one such ``loc`` from a Source crashed every ``rshub sync`` following
it. Checked here, before any lookup, each is a message naming the rule.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import idna

#: RFC 1035 §2.3.4 (RFC 1123 §2.1): a name of at most 253 characters, 63 per label.
MAX_NAME, MAX_LABEL = 253, 63


def ascii_host(host: str) -> str:
    """``host`` as it is looked up and sent: IDNA2008 with UTS #46 mapping when it is not
    ASCII. Raises :class:`UnicodeError` (:class:`idna.IDNAError` is one)."""
    return host if host.isascii() else idna.encode(host, uts46=True).decode("ascii")


def host_problem(host: str) -> str | None:
    """Why a URL's ``host`` (a name or an address; an IPv6 one without its brackets) could
    never be looked up, or None."""
    if ":" in host:  # an IPv6 literal, whose brackets urlsplit checked
        return None
    try:
        name = ascii_host(host)
    except UnicodeError as exc:
        return f"not a valid internationalized domain name (IDNA2008, RFC 5891): {exc}"
    labels = name.split(".")
    if labels[-1] == "":  # the root's empty label of a fully qualified name
        labels.pop()
    if len(name) > MAX_NAME:
        return f"longer than {MAX_NAME} characters"
    if not labels or "" in labels:
        return "an empty label"
    if any(len(label) > MAX_LABEL for label in labels):
        return f"a label longer than {MAX_LABEL} characters"
    return None


def url_host_problem(url: str) -> str | None:
    """:func:`host_problem` of ``url``'s host, said as the reason a fetch of ``url`` failed
    (None: its host can be looked up, or it has none, which the HTTP client refuses)."""
    try:
        host = urlsplit(url).hostname
    except ValueError:  # an unbalanced bracket: the HTTP client says so itself
        return None
    problem = host_problem(host) if host else None
    return None if problem is None else f"its host is not a valid host name ({problem})"
