"""The ``rshub`` command: one entry point for the hub, publisher and subscriber."""
