"""The outbound guard for the dispatcher's HTTP client (issue 17), as `transport.py` is for httpx.

The dispatcher's client (`delivery/http1.py`, aiohttp before it) connects to the addresses this resolver
returns, so a resolver that refuses a name resolving (or rebinding) to loopback, a private network,
link-local or metadata addresses stops the connection before a byte is sent, on every new connection.
Address literals are never resolved: `check_literal` is called on the URL's host before its first request
instead (non-canonical IPv4 forms such as ``2130706433`` are not literals to the client: they go through
the resolver, which refuses what they resolve to). Targets an operator configured (`NEXUS_WEBHOOK_URL`)
are trusted without the check. A refusal raises `UnsafeUrlError`.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from nexus.auth.transport import trusted_targets
from nexus.auth.urlguard import PrivateAllowance, forbidden
from nexus.errors import UnsafeUrlError
from nexus.settings import Settings


class GuardedResolver(AbstractResolver):
    """Resolves like aiohttp's default resolver, then refuses any answer the guard forbids."""

    def __init__(self, allowance: PrivateAllowance, trusted: frozenset[tuple[str, int]]) -> None:
        self.allowance = allowance
        self.trusted = trusted
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answers: list[ResolveResult] = await self._inner.resolve(host, port, family)
        if (host.lower(), port) in self.trusted:
            return answers
        addresses = [ipaddress.ip_address(str(a["host"]).split("%", 1)[0]) for a in answers]
        refused = [a for a in addresses if forbidden(a, self.allowance)]
        if refused or not addresses:
            where = refused[0] if refused else "nothing"
            raise UnsafeUrlError(f"outbound guard: {host} resolves to an internal address ({where})")
        return answers

    async def close(self) -> None:
        await self._inner.close()


class OutboundGuard:
    """The guard's two halves for one dispatcher: its resolver, and the check of address literals."""

    def __init__(self, settings: Settings) -> None:
        self.allowance = PrivateAllowance.parse(settings.allow_private_urls)
        self.trusted = frozenset((h.lower(), p) for h, p in trusted_targets(settings))

    def resolver(self) -> GuardedResolver:
        return GuardedResolver(self.allowance, self.trusted)

    def check_literal(self, host: str, port: int) -> None:
        """Refuse an address literal the guard forbids (names are the resolver's business)."""
        try:
            address: Any = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            return
        if (host.lower(), port) not in self.trusted and forbidden(address, self.allowance):
            raise UnsafeUrlError(f"outbound guard: {host} is an internal address ({address})")
