"""The hub's store layer."""
