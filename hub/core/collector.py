"""The hub's garbage-collector settings, in one place (the library never touches the GC).

The hub allocates many short-lived objects per request and keeps a large ring of live
events; what it builds holds no reference cycles, so garbage is freed at once by reference
counting and the cyclic collector mostly walks live objects. Collecting young objects less
often was worth ~20% of WebSocket fan-out (bench/hub.py), and the same thresholds in the
parse pool's worker processes recover most of what ``resourcesync`` lost when it stopped
pausing the GC per parse (bench/documents.py: 0.34 -> 0.38 of bare lxml on a 1,000-entry
document). Every process of the hub calls :func:`tune` once, at its start.
"""

from __future__ import annotations

import gc


def tune(young_threshold: int) -> None:
    """Freeze what start-up allocated (long-lived anyway) and collect young objects only
    every ``young_threshold`` allocations (0: leave the interpreter's defaults).

    No collection first: the imports leave next to no garbage, and a full collection of
    their heap was a twentieth of a restarted hub's time to its first answer."""
    if young_threshold:
        gc.freeze()
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(young_threshold, older, oldest)


def freeze_startup_heap() -> None:
    """Collect the reference cycles start-up left behind, once, and move what survives out
    of the collector's way.

    Creating the app leaves some 21,500 objects in cycles; the first full collection found
    them in the middle of a fan-out and held the loop 20-80 ms (``gc.callbacks`` in the hub
    during bench/hub.py), the WebSocket p99 outliers.
    """
    gc.collect()
    gc.freeze()
