"""The official `mcp` SDK's 1.x client, run by the MCP tests from a venv of the old line (`make mcp-old-clients`):
it cannot share a venv with the gateway's 2.x SDK. It imports nothing of the project.

    python official_client.py --url http://127.0.0.1:PORT/mcp --key KEY < calls.json
    python official_client.py --stdio PYTHON < calls.json   (starts `PYTHON -m nexus_cli mcp --stdio`)

Reads `{"calls": [[tool, arguments], ...], "resources": [uri, ...]}` on standard input, initializes one session,
makes the calls in order and prints one JSON object: the negotiated `protocol_version`, the listed `tools`,
each call's `[structuredContent, text, isError]`, and each resource's text (or `{"error": message}`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import McpError
from pydantic import AnyUrl

try:  # 1.24 and later take an httpx client; 1.22 (protocol 2025-06-18) has only the older name
    from mcp.client.streamable_http import streamable_http_client
except ImportError:
    streamable_http_client = None  # type: ignore[assignment]
from mcp.client.streamable_http import streamablehttp_client


@contextlib.asynccontextmanager
async def streams(args: argparse.Namespace) -> AsyncIterator[tuple[Any, Any]]:
    """The transport's read and write streams."""
    if args.stdio:
        server = StdioServerParameters(
            command=args.stdio, args=["-m", "nexus_cli", "mcp", "--stdio"], env=dict(os.environ)
        )
        async with stdio_client(server) as (read, write):
            yield read, write
        return
    headers = {"Authorization": f"Bearer {args.key}"}
    if streamable_http_client is not None:
        async with (
            httpx.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(args.url, http_client=http) as (read, write, _),
        ):
            yield read, write
        return
    async with streamablehttp_client(args.url, headers=headers, timeout=30) as (read, write, _):
        yield read, write


async def run(args: argparse.Namespace, plan: dict[str, Any]) -> dict[str, Any]:
    async with streams(args) as (read, write), ClientSession(read, write) as session:
        initialized = await session.initialize()
        tools = sorted(t.name for t in (await session.list_tools()).tools)
        answers = []
        for tool, arguments in plan.get("calls", []):
            result = await session.call_tool(tool, arguments)
            text = result.content[0].text if result.content else ""
            answers.append([result.structuredContent or {}, text, bool(result.isError)])
        resources: dict[str, Any] = {}
        for uri in plan.get("resources", []):
            try:
                resources[uri] = (await session.read_resource(AnyUrl(uri))).contents[0].text
            except McpError as exc:
                resources[uri] = {"error": exc.error.message}
    return {
        "protocol_version": initialized.protocolVersion,
        "tools": tools,
        "answers": answers,
        "resources": resources,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url")
    parser.add_argument("--key")
    parser.add_argument("--stdio", help="the python that runs `nexus mcp --stdio` (its env from this process)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args, json.load(sys.stdin)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
