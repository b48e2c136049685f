"""The hub's serve layer."""
