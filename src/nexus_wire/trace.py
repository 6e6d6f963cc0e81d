"""W3C trace context values (no OpenTelemetry needed)."""

from __future__ import annotations

import secrets


def new_traceparent() -> str:
    """A W3C traceparent starting a new trace (sampled)."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
