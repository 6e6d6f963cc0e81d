"""Typed errors of the client SDK::

    ClientError
     +-- ApiError              the gateway answered an error body {code, message, request_id}
     |    +-- NotFound         404 (no such order or plan)
     |    +-- Unavailable      503 after every retry (the database is down; retryable)
     +-- GatewayUnreachable    no answer at all (connection refused, timeout) after every retry
     +-- WaitTimeout           `wait` saw no change before its timeout

`ApiError.code` is the gateway's stable `ErrorCode` value (a string, so codes added later still parse).
"""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """A request to the gateway did not succeed."""


class ApiError(ClientError):
    """The gateway answered with an error body."""

    def __init__(self, status: int, code: str, message: str, body: Any = None, request_id: str | None = None) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        self.request_id = request_id


class NotFound(ApiError):
    """No such order or plan (404)."""


class Unavailable(ApiError):
    """The gateway cannot serve now (503, or a load balancer's 502/504) and said so after every retry."""


class GatewayUnreachable(ClientError):
    """The gateway did not answer (connection refused, reset or timed out) after every retry."""


class WaitTimeout(ClientError):
    """The order did not change before the wait's timeout."""
