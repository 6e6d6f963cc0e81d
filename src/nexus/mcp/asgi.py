"""MCP over streamable HTTP as an ASGI endpoint: stateless, JSON responses (no session, no SSE stream), so
any process of `--workers N` answers any request.

The SDK's session manager serves every protocol revision it knows: a request whose `MCP-Protocol-Version`
names 2026-07-28 takes its single-exchange path (`server/discover`, no handshake, the `Mcp-Method` and
`Mcp-Name` headers checked against the body, the client's version and capabilities in `_meta`); a client of
2025-11-25 or 2025-06-18 initializes as before, each request answered on its own (stateless).

The SDK's session manager needs a running task group; the endpoint starts it with the first request in a
task of its own (the gateway's app has no lifespan hook to host it) and stops it with `aclose`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings


class McpEndpoint:
    """The `/mcp` route's ASGI app (it runs behind the API's authentication middleware)."""

    def __init__(self, server: MCPServer[Any]) -> None:
        server.streamable_http_app(  # builds the server's session manager
            stateless_http=True,
            json_response=True,
            # The API's Bearer keys authenticate every call; a DNS-rebinding page cannot send one (no ambient
            # credential), and the gateway is reached under any host name a deployment gives it.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.manager: StreamableHTTPSessionManager = server.session_manager
        self._runner: asyncio.Task[None] | None = None
        self._started = asyncio.Event()
        self._lock = asyncio.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not self._started.is_set():
            await self._start()
        await self.manager.handle_request(scope, receive, send)

    async def _start(self) -> None:
        async with self._lock:
            if self._runner is None:
                self._runner = asyncio.create_task(self._run(), name="mcp-session-manager")
        await self._started.wait()

    async def _run(self) -> None:
        async with self.manager.run():
            self._started.set()
            await asyncio.Event().wait()  # until cancelled by aclose (or the loop's end)

    async def aclose(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
