"""MCP over streamable HTTP as an ASGI endpoint: stateless, JSON responses (no session, no SSE stream), so
any process of `--workers N` answers any request.

The SDK's session manager serves every protocol revision it knows: a request whose `MCP-Protocol-Version`
names 2026-07-28 takes its single-exchange path (`server/discover`, no handshake, the `Mcp-Method` and
`Mcp-Name` headers checked against the body, the client's version and capabilities in `_meta`); a client of
2025-11-25 or 2025-06-18 initializes as before, each request answered on its own (stateless).

Before the SDK sees a request, a present `Origin` header must be one of the allowed origins
(`NEXUS_MCP_ALLOWED_ORIGINS`, none by default): else 403 FORBIDDEN in the API's error shape, so a page a
browser was tricked into loading (DNS rebinding) cannot reach the tools. The Host header is not checked (the
gateway is reached under any name a deployment gives it), hence the SDK's own check stays off.

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

from nexus.error_shape import error_response
from nexus.errors import ErrorCode

_ORIGIN = b"origin"


def allowed_origins(setting: str) -> frozenset[str]:
    """`NEXUS_MCP_ALLOWED_ORIGINS` as the set an `Origin` header is compared with (case-insensitively)."""
    return frozenset(o.strip().rstrip("/").lower() for o in setting.split(",") if o.strip())


class McpEndpoint:
    """The `/mcp` route's ASGI app (it runs behind the API's authentication middleware)."""

    def __init__(self, server: MCPServer[Any], origins: frozenset[str] = frozenset()) -> None:
        server.streamable_http_app(  # builds the server's session manager
            stateless_http=True,
            json_response=True,
            # Origin is checked here, in the API's error shape; Host is not (see the module's docstring).
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.manager: StreamableHTTPSessionManager = server.session_manager
        self.origins = origins
        self._runner: asyncio.Task[None] | None = None
        self._started = asyncio.Event()
        self._lock = asyncio.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        origin = next((v for k, v in scope.get("headers") or () if k == _ORIGIN), None)
        if origin is not None and origin.decode("latin-1").lower() not in self.origins:
            refusal = error_response(403, ErrorCode.FORBIDDEN, "requests from this Origin may not call /mcp")
            await refusal(scope, receive, send)
            return
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
