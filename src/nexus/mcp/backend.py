"""The port the MCP tools call: the REST API's operations, answering its JSON bodies.

Two adapters: in the gateway's process (nexus.ingress.mcp_api), the same functions the REST routes call,
for the caller of `/mcp`; in `nexus mcp --stdio`, HTTP calls of the REST API through the client SDK. A
refusal (any 4xx or 5xx that is not a step's decision) is a `BackendError` with the API's status and code;
arguments that fail their schema are one too (`invalid_arguments`), whichever layer finds them.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import ValidationError

# pydantic's messages for these types are the validator's own words, which may quote the input
_OPAQUE_ERRORS = frozenset({"value_error", "assertion_error"})


class BackendError(Exception):
    """The API refused the call: its HTTP status, stable code and message."""

    def __init__(self, status: int, code: str, message: str, quota: str | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.quota = quota
        """QUOTA_EXCEEDED: the quota's name, carried into the result's structuredContent."""


def invalid_arguments(exc: ValidationError) -> BackendError:
    """A call's arguments that fail their schema, as the API's 422 INVALID_REQUEST: each argument named with
    what is wrong with it (`deadline_s: Input should be less than or equal to 315360000`), never its value."""
    parts = []
    for err in exc.errors(include_url=False, include_input=False)[:5]:
        name = ".".join(str(part) for part in err["loc"]) or "arguments"
        parts.append(f"{name}: {'invalid value' if err['type'] in _OPAQUE_ERRORS else err['msg']}")
    return BackendError(422, "INVALID_REQUEST", "invalid arguments: " + "; ".join(parts))


class Backend(Protocol):
    """The REST API as the MCP tools use it. Step calls answer `(http_status, result object)`."""

    async def list_processes(self) -> dict[str, Any]: ...

    async def describe_process(self, name: str) -> dict[str, Any]: ...

    async def start_plan(self, process: str, order_id: str | None, deadline_s: float | None) -> dict[str, Any]: ...

    async def propose_step(
        self, order_id: str, step: str, data: dict[str, Any], idempotency_key: str | None
    ) -> tuple[int, dict[str, Any]]: ...

    async def get_order(self, order_id: str) -> dict[str, Any]: ...

    async def order_history(self, order_id: str) -> dict[str, Any]: ...

    async def end_plan(self, order_id: str, reason: str, *, replan: bool) -> tuple[int, dict[str, Any]]: ...

    async def wait_for_order(self, order_id: str, after_seq: int | None, timeout_s: float) -> dict[str, Any]: ...

    async def list_approvals(self, limit: int) -> dict[str, Any]: ...

    async def answer_approval(
        self, approval_id: str, *, approve: bool, expect: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]: ...

    async def list_dead_letters(self, limit: int) -> dict[str, Any]: ...

    async def redrive_dead_letter(self, dead_letter_id: int) -> dict[str, Any]: ...
