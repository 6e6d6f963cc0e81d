"""Nexus Event Gateway: decide, apply once and in order, and notify once and in order, the steps agents propose."""

__version__ = "0.1.0"
