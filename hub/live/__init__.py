"""The hub's live layer."""
