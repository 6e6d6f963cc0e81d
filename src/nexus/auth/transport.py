"""The dispatcher's HTTP transport with the outbound guard at connect time.

Every TCP connection resolves its host here, asks `urlguard.forbidden` about every address the name
resolves to, and connects to the checked address itself: a name that resolves (or later rebinds) to
loopback, a private network, link-local or metadata addresses is refused before a byte is sent. Only
targets an operator configured (`NEXUS_WEBHOOK_URL`) are trusted without the check. A refusal raises
`UnsafeUrlError`, which the dispatcher records as a rejection (dead at once, not retried).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from nexus.auth.urlguard import IPAddress, PrivateAllowance, forbidden
from nexus.errors import UnsafeUrlError
from nexus.settings import Settings


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that connects only to addresses the guard allows."""

    def __init__(self, allowance: PrivateAllowance, trusted: Iterable[tuple[str, int]] = ()) -> None:
        self.allowance = allowance
        self.trusted = frozenset((h.lower(), p) for h, p in trusted)
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if (host.lower(), port) in self.trusted:
            return await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        addresses = await self._resolve(host, port, timeout)
        refused = [a for a in addresses if forbidden(a, self.allowance)]
        if refused or not addresses:
            where = refused[0] if refused else "nothing"
            raise UnsafeUrlError(f"outbound guard: {host} resolves to an internal address ({where})")
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(str(address), port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                last = exc
        assert last is not None
        raise last

    @staticmethod
    async def _resolve(host: str, port: int, timeout_s: float | None) -> list[IPAddress]:
        try:  # a canonical address literal needs no resolver (and no thread hop per connection)
            return [ipaddress.ip_address(host.strip("[]"))]
        except ValueError:
            pass
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout_s)
        except (OSError, TimeoutError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos))

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise UnsafeUrlError("outbound guard: unix sockets are not webhook targets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a `GuardedBackend` (same pool settings, its own network backend)."""

    def __init__(self, backend: GuardedBackend, limits: httpx.Limits) -> None:
        super().__init__(limits=limits, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=backend,
        )


def trusted_targets(settings: Settings) -> list[tuple[str, int]]:
    """(host, port) of the URLs an operator configured: trusted as configuration, not checked."""
    targets = []
    for url in (settings.webhook_url,):
        if url:
            parts = urlsplit(url)
            if parts.hostname:
                targets.append((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)))
    return targets


def guarded_transport(settings: Settings, limits: int) -> GuardedTransport:
    backend = GuardedBackend(PrivateAllowance.parse(settings.allow_private_urls), trusted_targets(settings))
    return GuardedTransport(backend, httpx.Limits(max_connections=limits, max_keepalive_connections=limits))
