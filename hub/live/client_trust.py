"""System trust for TLS contexts made while ``rshub serve`` imports, loaded once it serves.

aiohttp's package ``__init__`` imports its client, whose connector makes two default client
contexts at import, each parsing the system CA bundle: ~50 ms of CPU on a restart's way to
serving, for a client the hub does not use (its callbacks have their own context,
:mod:`hub.live.callback_connections`). Inside :func:`deferred`, a context's
``set_default_verify_paths()`` (which ``ssl.create_default_context()`` calls) only notes the
context; :func:`load` makes that same call on each later (the runtime does it in a thread, a
second after the start). Until then such a context trusts no CA: a verifying connection made
with it fails its handshake (fail closed), none goes through unverified.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
from collections.abc import Iterator

_NAME = "set_default_verify_paths"

#: Contexts whose trust :func:`deferred` held back, until :func:`load`.
_pending: list[ssl.SSLContext] = []


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold back the system trust of the contexts this thread makes meanwhile (see above);
    other threads' contexts load theirs as usual."""
    own = _NAME in vars(ssl.SSLContext)
    real = getattr(ssl.SSLContext, _NAME)
    thread = threading.get_ident()

    def note(context: ssl.SSLContext) -> None:
        if threading.get_ident() != thread:
            real(context)
        else:
            _pending.append(context)

    setattr(ssl.SSLContext, _NAME, note)
    try:
        yield
    finally:
        if own:
            setattr(ssl.SSLContext, _NAME, real)
        else:
            delattr(ssl.SSLContext, _NAME)


def pending() -> int:
    """How many contexts still wait for their trust."""
    return len(_pending)


def load() -> None:
    """Load the system trust into every context :func:`deferred` held back. Blocking (it
    reads the CA files): call it in a thread."""
    while True:
        try:
            context = _pending.pop()
        except IndexError:
            return
        context.set_default_verify_paths()
