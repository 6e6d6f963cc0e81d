"""The base of the gateway's pure ASGI middlewares: they act on HTTP requests, every other scope passes.

A middleware subclasses `HttpMiddleware`, sets `app` and writes `handle`; lifespan (and any scope that is not
HTTP) goes to the app untouched.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class HttpMiddleware:
    """Pure ASGI middleware that handles HTTP requests and hands every other scope straight to `app`."""

    app: ASGIApp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One HTTP request."""
        raise NotImplementedError
