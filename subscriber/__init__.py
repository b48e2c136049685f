"""Subscriber: receive a topic's changes and keep a local mirror in sync."""
