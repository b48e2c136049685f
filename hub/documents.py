"""Materialized ResourceSync documents (Change Lists, Resource List, discovery)."""

from __future__ import annotations

from aiohttp import web


def setup(app: web.Application) -> None:
    """Add the document routes (filled in by the materialization work)."""
