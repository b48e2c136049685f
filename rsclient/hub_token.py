"""The ``--token`` of a client command: sent with every request to the hub, to no one else,
and never shown.

A private topic needs the token on every read (its documents, its streams, a WebSub
subscription), so the clients send it with each request whose URL is on the hub's origin
(scheme, host and port of ``--hub``, compared as RFC 6454 does). A Source elsewhere, the
resources a Resource List names, a link in a document to another host: none of them gets
it. (aiohttp drops ``Authorization`` on a redirect to another origin, and websockets does
too, so a redirect cannot carry it away either.)

What the commands say (errors, logs) passes through :meth:`HubToken.mask`: a hub, a proxy
or a server mistaken for the hub may quote the token back in its error, and ``-v`` logs
what they answered.
"""

from __future__ import annotations

import json
import logging
import re
from urllib.parse import quote, urlsplit

__all__ = ["HubToken", "TokenMask", "token_problem"]

#: What stands for the token in what is shown. A token with a ``*`` gets one of characters
#: no token has (non-ASCII): a stand-in that shares none of its characters cannot, next to
#: the text around it, spell the token again.
_MASK, _OTHER_MASK = "***", "\u2022\u2022\u2022"


def token_problem(value: str) -> str | None:
    """Why ``value`` cannot be a bearer token, or ``None``.

    RFC 6750's ``b64token`` is visible ASCII; a space, a control character (a newline would
    end the header) or a non-ASCII character cannot travel in ``Authorization``.
    """
    if not value:
        return "empty"
    for ch in value:
        if not "!" <= ch <= "~":
            return f"only visible ASCII characters (RFC 6750), not {_named(ch)}"
    return None


def _named(ch: str) -> str:
    return "a space" if ch == " " else f"U+{ord(ch):04X}"


def _origin(url: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an http(s) URL, default ports made explicit."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is no number, or out of range
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


class HubToken:
    """A bearer token and the one origin it is sent to: the hub's."""

    __slots__ = ("_forms", "_mask", "_origin", "_value", "hub")

    def __init__(self, hub: str, value: str) -> None:
        problem = token_problem(value)
        if problem is not None:
            raise ValueError(f"the token: {problem}")
        origin = _origin(hub)
        if origin is None:
            raise ValueError(f"{hub!r} has no http(s) origin to send the token to")
        self.hub = hub
        self._origin = origin
        self._value = value
        # As it may come back: raw, percent-encoded (a URL), escaped in JSON or by repr().
        forms = {value, quote(value, safe=""), json.dumps(value)[1:-1], repr(value)[1:-1]}
        longest_first = sorted(forms, key=len, reverse=True)
        self._forms = re.compile("|".join(re.escape(f) for f in longest_first))
        self._mask = _MASK if "*" not in value else _OTHER_MASK

    @classmethod
    def of(cls, hub: str | None, value: str | None) -> HubToken | None:
        """The token for ``hub``; ``None`` without one (an empty ``RSHUB_TOKEN`` too) or
        without a hub to send it to (no http(s) URL: nothing is sent there).

        Raises:
            ValueError: ``value`` cannot be a bearer token (:func:`token_problem`).
        """
        if not value or hub is None or _origin(hub) is None:
            return None
        return cls(hub, value)

    def __repr__(self) -> str:
        return f"HubToken(hub={self.hub!r}, value={self._mask!r})"

    def goes_to(self, url: str) -> bool:
        """Whether a request to ``url`` carries the token: it is on the hub's origin."""
        return _origin(url) == self._origin

    def headers(self, url: str) -> dict[str, str]:
        """``Authorization`` for a request to ``url`` if it goes to the hub, else none."""
        return {"Authorization": f"Bearer {self._value}"} if self.goes_to(url) else {}

    @property
    def authorization(self) -> dict[str, str]:
        """``Authorization`` for a request known to go to the hub (its streams)."""
        return {"Authorization": f"Bearer {self._value}"}

    def mask(self, text: str) -> str:
        """``text`` with every form of the token replaced."""
        return self._forms.sub(self._mask, text)

    def not_sent(self, url: str) -> str:
        """Why a refusal (401/403) of ``url`` may have nothing to do with the token."""
        if self.goes_to(url):
            return ""
        scheme, host, port = self._origin
        return f" (the token goes only to the hub, {scheme}://{host}:{port})"


class TokenMask(logging.Filter):
    """Masks a token in every record a handler emits (message, arguments and traceback).

    Put on handlers, not loggers: a logger's filters do not see its children's records.
    """

    def __init__(self, token: HubToken) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = self.token.mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.token.mask(record.exc_text)
        return True

    def install(self) -> None:
        """On every handler of the root logger (after ``logging.basicConfig``)."""
        for handler in logging.getLogger().handlers:
            handler.addFilter(self)

    def uninstall(self) -> None:
        for handler in logging.getLogger().handlers:
            handler.removeFilter(self)
