"""The hub's web layer."""
