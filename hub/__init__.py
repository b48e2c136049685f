"""The rshub hub: ingest, store, deliver, stream and materialize ResourceSync changes."""

__version__ = "0.1.0"
