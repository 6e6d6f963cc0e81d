"""The client's configuration: one frozen object, and the one place the SDK reads its environment.

`NEXUS_GATEWAY_URL` (default ``http://127.0.0.1:8080``) and `NEXUS_API_KEY` (sent as
``Authorization: Bearer <key>`` when set) are read by `ClientConfig.from_env` and nowhere else.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from nexus_wire.backoff import Jitter, RetryPolicy

DEFAULT_GATEWAY_URL = "http://127.0.0.1:8080"
DEFAULT_RETRY = RetryPolicy(base_ms=200.0, max_ms=5_000.0, max_attempts=5, jitter=Jitter.NONE)
DEFAULT_POLL = RetryPolicy(base_ms=50.0, max_ms=1_000.0, max_attempts=1_000_000, jitter=Jitter.EQUAL)


@dataclasses.dataclass(frozen=True, slots=True)
class ClientConfig:
    """Where the gateway is, how to authenticate, and how long to wait for it."""

    gateway_url: str = DEFAULT_GATEWAY_URL
    api_key: str | None = None
    timeout_s: float = 10.0
    """Per request (connect, read, write)."""
    retry: RetryPolicy = DEFAULT_RETRY
    """Submissions answered 503 (or a load balancer's 502, 504) or lost to a transport error are resent on this
    schedule: safe, since a resent step the gateway already applied is answered DUPLICATE."""
    poll: RetryPolicy = DEFAULT_POLL
    """`wait` polls the order on this schedule (growing, bounded intervals) until its timeout."""
    max_connections: int = 64

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> ClientConfig:
        """The configuration from `NEXUS_GATEWAY_URL` and `NEXUS_API_KEY`; keyword overrides win when not None."""
        source = os.environ if env is None else env
        values: dict[str, object] = {
            "gateway_url": source.get("NEXUS_GATEWAY_URL") or DEFAULT_GATEWAY_URL,
            "api_key": source.get("NEXUS_API_KEY") or None,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]  # the overrides are the fields' own types, checked by pydantic

    def headers(self) -> dict[str, str]:
        """Headers every request carries."""
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def url(self, path: str) -> str:
        return self.gateway_url.rstrip("/") + path
