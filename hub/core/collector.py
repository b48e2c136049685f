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


def pause() -> None:
    """No cyclic collection until :func:`tune` (or :func:`resume`): ``rshub serve`` calls
    this before it imports what serving needs.

    Those imports make some 70,000 objects, all long-lived but ~2,000 (some 0.3 MB of
    garbage in cycles, frozen with the rest by :func:`tune`); the collector, run ~160 times
    over them while they were made, was ~90 ms of CPU, an eighth of a restart's time to
    its first answer."""
    gc.disable()


def resume() -> None:
    """Undo :func:`pause` (a no-op once :func:`tune` ran)."""
    gc.enable()


def tune(young_threshold: int) -> None:
    """Freeze what start-up allocated (long-lived anyway) and collect young objects only
    every ``young_threshold`` allocations (0: leave the interpreter's defaults); then turn
    the collector (back) on.

    No collection first: the imports leave next to no garbage, and a full collection of
    their heap was a twentieth of a restarted hub's time to its first answer."""
    if young_threshold:
        gc.freeze()
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(young_threshold, older, oldest)
    gc.enable()


def freeze_startup_heap() -> None:
    """Collect the reference cycles start-up left behind, once, and move what survives out
    of the collector's way.

    Creating the app leaves some 21,500 objects in cycles; the first full collection found
    them in the middle of a fan-out and held the loop 20-80 ms (``gc.callbacks`` in the hub
    during bench/hub.py), the WebSocket p99 outliers.
    """
    gc.collect()
    gc.freeze()
