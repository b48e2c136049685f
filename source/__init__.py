"""The Source side: ``rshub source DIR`` makes a directory a ResourceSync Source.

A Source serves its resources and the documents that describe them (Z39.99: Source
Description, Capability List, Resource List, Change Lists) and, given a hub, pushes a
change notification for every change it sees. The modules, from the bottom:

- :mod:`source.tree`: which files of the directory are resources, and their paths and
  URL paths; reading and hashing them off the event loop.
- :mod:`source.inventory`: the resources known, the change history, and how far it was
  pushed, kept in a state file that survives restarts.
- :mod:`source.documents`: the ResourceSync documents built from an inventory (no I/O).
- :mod:`source.pusher`: the change history pushed to a hub through
  :class:`publisher.client.Publisher`, exactly once across restarts.
- :mod:`source.runtime`: what runs: the directory watched (``watchfiles``) and scanned
  into the inventory, the state saved, the pusher started and stopped.
- :mod:`source.app`: the aiohttp application serving documents and files.
- :mod:`source.cli`: ``rshub source``.
- :mod:`source.exceptions`: the Source's errors.

The package root re-exports nothing.
"""
