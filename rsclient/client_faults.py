"""aiohttp servers' logging of client faults: one rule for the hub and the clients' servers.

aiohttp logs some client faults as ERROR with a traceback before any application code runs
(a ``Content-Encoding`` it cannot decode, an over-long request line, a peer gone mid-write);
each is answered (400) or moot. Anyone who can reach a server can cause them, so as ERROR
they would read as the server's own failures: the hub's listener and the subscriber's
WebSub callback server both install :class:`ClientFaultFilter`.
"""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

__all__ = ["ClientFaultFilter", "install_client_fault_filter"]


class ClientFaultFilter(logging.Filter):
    """Turns each client fault aiohttp logs (see the module docstring) into one DEBUG line."""

    FAULTS = (HttpProcessingError, RequestPayloadError, ConnectionError)

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, self.FAULTS):
            return True
        record.msg = f"{record.getMessage()}: client fault: {exc!r}"[:500]
        record.args = None
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def install_client_fault_filter() -> None:
    """Once per process (idempotent): the filter sits on aiohttp's server logger."""
    logger = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, ClientFaultFilter) for f in logger.filters):
        logger.addFilter(ClientFaultFilter())
