"""The hub's exception family.

::

    HubError
    ├── EmbeddedRedisError          the embedded redis-server would not start
    │   ├── DataDirLocked           another live process owns the data directory
    │   └── DataDirUnusable         the data directory cannot be created or written
    ├── ConfigurationError          settings that cannot work (e.g. open bind without tokens)
    ├── RedisUnavailable            an external Redis did not answer during start-up
    ├── CallbackFailed              a callback (or a pinged URL) could not be reached in time
    ├── DamagedData                 Redis holds what the hub did not write (500, said once)
    └── RequestError                the peer was wrong; carries ``http_status``
        ├── BadRequest              400
        │   └── UnknownHubName      a hub topic URL on a host the hub does not know
        ├── Unauthorized            401
        ├── Forbidden               403
        │   └── TokenRevoked        a token the operator revoked (admin API)
        ├── NotFound                404
        ├── RequestTimeout          408  (a request body too slow to arrive)
        ├── Conflict                409
        ├── Gone                    410  (e.g. a resume id older than retention)
        ├── PayloadTooLarge         413
        ├── UnsupportedMediaType    415
        ├── ExpectationFailed       417  (an ``Expect`` other than 100-continue)
        ├── TooManyRequests         429  (with Retry-After: e.g. publish pings too fast)
        ├── BadGateway              502  (a fetched topic URL failed)
        └── ServiceUnavailable      503  (e.g. a parser worker died)
            └── SnapshotPending     no Resource List built yet (with Retry-After)

``hub.web.app`` maps these to HTTP responses in one place, together with document errors
from :mod:`resourcesync` (``DocumentError`` and subclasses, by their own ``http_status``)
and the store layer's :data:`hub.store.redis_connection.StoreError` (503).
"""

from __future__ import annotations

import math


class HubError(Exception):
    """Root of every error the hub raises on purpose."""


class EmbeddedRedisError(HubError):
    """The embedded redis-server could not be started."""


class DataDirLocked(EmbeddedRedisError):
    """Another live process holds the data directory's lock: two servers must never share
    one AOF. ``pid`` and ``port`` are the owner's, as it recorded them (``None`` if unknown)."""

    def __init__(self, data_dir: str, pid: int | None, port: int | None) -> None:
        owner = f"pid {pid}" if pid is not None else "another process"
        where = f", its Redis on 127.0.0.1:{port}" if port is not None else ""
        super().__init__(
            f"data directory {data_dir} is in use by a running hub ({owner}{where}); "
            "stop it or choose another data directory"
        )
        self.data_dir = data_dir
        self.pid = pid
        self.port = port


class DataDirUnusable(EmbeddedRedisError):
    """The data directory cannot hold Redis data; the message says what is wrong with it."""

    def __init__(self, data_dir: str, problem: str) -> None:
        super().__init__(f"data directory {data_dir} is unusable: {problem}")
        self.data_dir = data_dir
        self.problem = problem


class ConfigurationError(HubError):
    """Settings that cannot work together."""


class RedisUnavailable(HubError):
    """The Redis the hub was pointed at never answered while the hub started."""


class CallbackFailed(HubError):
    """A request to a callback or a pinged URL failed before any HTTP answer."""


class DamagedData(HubError):
    """What Redis holds is not what the hub wrote: a record another program wrote or
    edited, or a restored backup of another shape. It concerns one topic or record, never
    the hub: requests that need it answer 500 naming it, hub-wide jobs go on without it.
    ``entry_id``: the stream entry at fault, when it is one (a reader may go on past it)."""

    def __init__(self, message: str, *, entry_id: str | None = None) -> None:
        super().__init__(message)
        self.entry_id = entry_id


class RequestError(HubError):
    """A request the hub refuses; ``http_status`` says how."""

    http_status = 400

    def __init__(self, message: str, **detail: object) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class BadRequest(RequestError):
    http_status = 400


class UnknownHubName(BadRequest):
    """``/topics/{name}`` on a host and port that are none of the hub's names: refused
    outright (a subscribe too, not denied later), since a client meant this hub."""


class Unauthorized(RequestError):
    http_status = 401


class Forbidden(RequestError):
    http_status = 403


class TokenRevoked(Forbidden):
    """The token was revoked (``POST /admin/revocations``): for every topic, or for the
    one asked about. The message names the token by its fingerprint, never itself."""


class NotFound(RequestError):
    http_status = 404


class RequestTimeout(RequestError):
    http_status = 408


class Conflict(RequestError):
    http_status = 409


class Gone(RequestError):
    http_status = 410


class PayloadTooLarge(RequestError):
    http_status = 413


class UnsupportedMediaType(RequestError):
    http_status = 415


class ExpectationFailed(RequestError):
    http_status = 417


class TooManyRequests(RequestError):
    """Over a rate limit; ``retry_after``: whole seconds until a retry can succeed."""

    http_status = 429

    def __init__(self, message: str, retry_after: float) -> None:
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(message, retry_after=self.retry_after)


class BadGateway(RequestError):
    http_status = 502


class ServiceUnavailable(RequestError):
    http_status = 503


class SnapshotPending(ServiceUnavailable):
    """A document built from the whole fold (a Resource List or its index) that has no
    version to serve yet: the first is being built. ``retry_after``: whole seconds."""

    def __init__(self, message: str, retry_after: float) -> None:
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(message, retry_after=self.retry_after)
