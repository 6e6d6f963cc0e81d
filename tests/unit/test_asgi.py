"""The gateway's pure ASGI middlewares act on HTTP only: every other scope reaches the app as it came."""

from __future__ import annotations

from typing import Any

import pytest

from nexus.asgi import HttpMiddleware
from nexus.auth.keys import KeyCache
from nexus.auth.middleware import AuthMiddleware, Gatekeeper
from nexus.ingress.http_errors import RequestContext
from nexus.ingress.request_guard import RequestGuard
from nexus.settings import Settings
from nexus.store.database import Database

SETTINGS = Settings(database_url="postgresql://unused.invalid/none")


class _App:
    """The inner ASGI app: records each call's scope, receive and send as it got them."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls.append((scope, receive, send))


def _middlewares(app: _App) -> list[HttpMiddleware]:
    gate = Gatekeeper(KeyCache(Database(SETTINGS)))
    return [RequestContext(app), AuthMiddleware(app, gate), RequestGuard(app, SETTINGS)]


async def _receive() -> dict[str, Any]:
    return {"type": "lifespan.startup"}


async def _send(message: Any) -> None:
    raise AssertionError(f"a middleware answered a non-HTTP scope: {message}")


@pytest.mark.parametrize("index", range(3), ids=["RequestContext", "AuthMiddleware", "RequestGuard"])
async def test_a_lifespan_scope_passes_every_middleware_untouched(index: int) -> None:
    """A lifespan scope reaches the app with the same scope, receive and send, nothing added or answered."""
    app = _App()
    middleware = _middlewares(app)[index]
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}}
    await middleware(scope, _receive, _send)
    assert app.calls == [(scope, _receive, _send)]
    assert scope == {"type": "lifespan", "asgi": {"version": "3.0"}}


async def test_an_http_scope_goes_to_handle() -> None:
    """An HTTP scope is given to the subclass's `handle`, not straight to the app."""
    handled: list[Any] = []

    class Recording(HttpMiddleware):
        def __init__(self, app: _App) -> None:
            self.app = app

        async def handle(self, scope: Any, receive: Any, send: Any) -> None:
            handled.append(scope)

    app = _App()
    scope = {"type": "http", "method": "GET", "path": "/"}
    await Recording(app)(scope, _receive, _send)
    assert handled == [scope]
    assert app.calls == []
