"""Why a live stream ended early, whatever its transport (WebSocket or SSE).

Each reason is also the start of what its client is told (a close reason, an SSE ``data:``
line), so that a client learns why in words and where to resume from. Plain strings: the
feed, the drivers and the tests compare them.
"""

from __future__ import annotations

#: The client was too slow: its queue of live events filled (``client_buffer_events``).
TOO_SLOW = "too slow"
#: The operator deleted the topic.
DELETED = "topic deleted"
#: The process is shutting down (SIGTERM): the client reconnects, to another process.
SHUTDOWN = "shutdown"
#: The signed read token the stream was opened with expired.
EXPIRED = "token expired; renew the token"
#: The operator revoked the token the stream reads with.
REVOKED = "token revoked; use another token"
#: A stream of several topics: its prefixes came to match more than ``stream_max_topics``.
TOO_MANY_TOPICS = "too many topics"
#: A stream of several topics: its resume id would exceed ``stream_max_id_bytes`` even
#: after asking Redis where the topics are.
ID_FULL = "resume id full"
