"""Retention: finished orders leave after their period, a removal marker remembers each (docs/retention.md)."""
