"""`nexus mcp --stdio`: the gateway's MCP tools for a desktop MCP client, over standard input and output.

It decides nothing itself: every tool calls the gateway's REST API through the client SDK, with the key
in `NEXUS_API_KEY`, at `NEXUS_GATEWAY_URL`. Lives here because it joins the gateway's MCP server
(nexus.mcp) and the SDK (nexus_client), which know nothing of each other.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.parse
from typing import Any

from nexus.mcp.backend import BackendError
from nexus.mcp.server import build_server
from nexus_client import AsyncNexusClient, ClientConfig


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stdio", action="store_true", required=True, help="speak MCP on standard input and output (the only mode)"
    )


class SdkBackend:
    """The REST API over HTTP, through `AsyncNexusClient` (one per process)."""

    def __init__(self, client: AsyncNexusClient) -> None:
        self.client = client

    async def list_processes(self) -> dict[str, Any]:
        return await self._read("/v1/processes")

    async def describe_process(self, name: str) -> dict[str, Any]:
        return await self._read(f"/v1/processes/{_quote(name)}")

    async def start_plan(self, process: str, order_id: str | None, deadline_s: float | None) -> dict[str, Any]:
        body: dict[str, Any] = {"process": process}
        if order_id is not None:
            body["order_id"] = order_id
        if deadline_s is not None:
            body["deadline_s"] = deadline_s
        return _answer(*await self.client._post("/v1/plans", body))

    async def propose_step(
        self, order_id: str, step: str, data: dict[str, Any], idempotency_key: str | None
    ) -> tuple[int, dict[str, Any]]:
        body: dict[str, Any] = {"step": step, "data": data}
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        return _decision(*await self.client._post(f"/v1/orders/{_quote(order_id)}/steps", body))

    async def end_plan(self, order_id: str, reason: str, *, replan: bool) -> tuple[int, dict[str, Any]]:
        path = f"/v1/orders/{_quote(order_id)}/{'replan' if replan else 'abort'}"
        return _decision(*await self.client._post(path, {"reason": reason}))

    async def get_order(self, order_id: str) -> dict[str, Any]:
        return await self._order(f"/v1/orders/{_quote(order_id)}", order_id)

    async def order_history(self, order_id: str) -> dict[str, Any]:
        try:
            return await self._read(f"/v1/orders/{_quote(order_id)}/history")
        except BackendError as exc:
            if exc.status == 404:
                return {"order_id": order_id, "items": []}
            raise

    async def wait_for_order(self, order_id: str, after_seq: int | None, timeout_s: float) -> dict[str, Any]:
        query = f"?wait={timeout_s:g}" + (f"&after_seq={after_seq}" if after_seq is not None else "")
        return await self._order(f"/v1/orders/{_quote(order_id)}{query}", order_id)

    async def list_approvals(self, limit: int) -> dict[str, Any]:
        return await self._read(f"/v1/approvals?limit={limit}")

    async def answer_approval(
        self, approval_id: str, *, approve: bool, expect: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        path = f"/v1/approvals/{_quote(approval_id)}/{'approve' if approve else 'deny'}"
        body = _answer(*await self.client._post(path, {"expect": expect} if expect else {}))
        return 200, {**body.get("result", {}), "approval_id": approval_id}

    async def list_dead_letters(self, limit: int) -> dict[str, Any]:
        return await self._read(f"/v1/dead-letters?limit={limit}")

    async def redrive_dead_letter(self, dead_letter_id: int) -> dict[str, Any]:
        return _answer(*await self.client._post(f"/v1/dead-letters/{dead_letter_id}/redrive", {}))

    async def _order(self, path: str, order_id: str) -> dict[str, Any]:
        try:
            return await self._read(path)
        except BackendError as exc:
            if exc.status != 404:
                raise
        plan = await self._read(f"/v1/orders/{_quote(order_id)}/plan")  # started, no step yet
        return {**plan, "buffered": [], "notifications": 0}

    async def _read(self, path: str) -> dict[str, Any]:
        return _answer(*await self.client._get(path))


def _quote(part: str) -> str:
    """One path segment of a REST call: percent-encoded whole (a `/`, `?` or `#` in it stays inside it). An
    empty, `.` or `..` segment would change the path (`get_order("..")` is `GET /v1`): refused here as the
    gateway refuses such identifiers, before any call."""
    if part in ("", ".", ".."):
        raise BackendError(422, "INVALID_IDENTIFIER", "an identifier may not be empty, '.' or '..'")
    return urllib.parse.quote(part, safe="")


def _json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return None


def _answer(status: int, content: bytes) -> dict[str, Any]:
    body = _json(content)
    if status >= 400 or not isinstance(body, dict):
        fields = body if isinstance(body, dict) else {}
        message = str(fields.get("message") or content[:200].decode("utf-8", "replace"))
        quota = fields.get("quota")
        code = str(fields.get("code") or f"HTTP_{status}")
        raise BackendError(status, code, message, quota if isinstance(quota, str) else None)
    return body


def _decision(status: int, content: bytes) -> tuple[int, dict[str, Any]]:
    """A step's decision (even as a 4xx: REJECTED, HELD...), or the refusal as a BackendError."""
    body = _json(content)
    if status < 500 and isinstance(body, dict) and "decision" in body:
        return status, body
    return status, _answer(status, content)


def run(args: argparse.Namespace) -> int:
    config = ClientConfig.from_env()
    if not config.api_key:
        print("nexus mcp: set NEXUS_API_KEY to an agent key of one tenant", file=sys.stderr)
        return 2
    client = AsyncNexusClient(config)
    backend = SdkBackend(client)
    roles = asyncio.run(_roles(config))
    build_server(lambda _ctx: backend, roles_of=lambda _request: roles).run(transport="stdio")
    return 0


async def _roles(config: ClientConfig) -> frozenset[str] | None:
    """The key's roles (`GET /v1/identity`), so tools/list shows only what it may call; None if the gateway
    cannot say (unreachable now: every tool is listed, and the API refuses what the key may not do)."""
    client = AsyncNexusClient(config)
    try:
        status, content = await client._get("/v1/identity")
    except Exception:  # noqa: BLE001 - any failure to learn the roles falls back to listing every tool
        return None
    finally:
        await client.aclose()
    body = _json(content)
    if status != 200 or not isinstance(body, dict):
        return None
    return frozenset(str(role) for role in body.get("roles", []))
