"""The official `mcp` SDK's client on the gateway's `/mcp`, as the lab's MCP agents and the MCP tests use it.

`mcp.Client` in its default mode probes `server/discover` and, the gateway answering it, speaks protocol
revision 2026-07-28: no handshake, every request self-contained with its `Mcp-Method` and `Mcp-Name`
headers. The key rides every request as a Bearer header of the SDK's HTTP client (httpx2).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx2
from mcp import Client
from mcp.client.extension import ClientExtension
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult


@contextlib.asynccontextmanager
async def mcp_client(
    base: str, key: str, *, timeout_s: float = 30.0, extensions: Sequence[ClientExtension] = ()
) -> AsyncIterator[Client]:
    """A connected client of `{base}/mcp` with `key` as its Bearer key (and `extensions`, e.g. the tasks
    extension of nexus_lab.mcp_tasks)."""
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout_s) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http), extensions=list(extensions)) as client,
    ):
        yield client


def answer_of(result: CallToolResult) -> tuple[dict[str, Any], str, bool]:
    """A tool call's structuredContent, first text and isError."""
    first = result.content[0] if result.content else None
    text = first.text if first is not None and first.type == "text" else ""
    structured = result.structured_content if isinstance(result.structured_content, dict) else {}
    return structured, text, result.is_error
