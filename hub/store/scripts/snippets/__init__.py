"""Lua snippets that several of :mod:`hub.store.scripts` include (``--#include NAME``).

A package only so that its ``.lua`` files are installed with the hub, as the scripts are.
"""
