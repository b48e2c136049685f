"""The hub's core layer."""
