"""MCP over streamable HTTP as an ASGI endpoint: stateless, JSON responses (no session, no SSE stream), so
any process of `--workers N` answers any request.

The SDK's session manager needs a running task group; the endpoint starts it with the first request in a
task of its own (the gateway's app has no lifespan hook to host it) and stops it with `aclose`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager


class McpEndpoint:
    """The `/mcp` route's ASGI app (it runs behind the API's authentication middleware)."""

    def __init__(self, server: FastMCP) -> None:
        server.streamable_http_app()  # builds the server's session manager from its settings
        self.manager: StreamableHTTPSessionManager = server.session_manager
        # A stateless request builds the server's initialization options again, and with them reads the
        # SDK's version from its package metadata on disk: 13 % of the gateway's CPU under wrk. They are the
        # same for every request: built once.
        lowlevel = self.manager.app
        options = lowlevel.create_initialization_options()
        lowlevel.create_initialization_options = lambda *args, **kwargs: (  # type: ignore[method-assign]  # the cached options replace the SDK's per-request builder
            options
            if not args and not kwargs
            else type(lowlevel).create_initialization_options(lowlevel, *args, **kwargs)
        )
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
