"""The rshub hub: ingest, store, deliver, stream and materialize ResourceSync changes.

This package holds nothing but its version: each name lives in the layer package that
defines it (``hub.web.app.create_app``, ``hub.core.settings.Settings``, ...), imported from
there. A façade here that re-exported them would hide imports from the layer contracts
(a lower layer could reach ``hub.web`` through it unseen), and an eager one would make
``import hub.core.events`` load aiohttp and redis. The layers may not import this root at
all (an import-linter contract), so nothing can be routed through it.
"""

from hub.core.version import __version__

__all__ = ["__version__"]
