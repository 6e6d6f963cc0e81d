"""The outbound policy: where the gateway may connect, and how (the guard, its resolver, timeout, TLS).

Every outbound call goes through it: webhooks (the dispatcher's `Sender`) and saga service calls (the
executors), both over `outbound.http1.Http1Client`.

* The guard, on every new connection: a name is resolved here (the event loop's ``getaddrinfo``), every
  address it resolves to is asked `urlguard.forbidden`, and the connection goes to a checked address, so a
  name that resolves (or rebinds) to loopback, a private network, link-local or metadata addresses is
  refused before a byte is sent. An address literal is checked itself (`check_literal`; the `Sender` also
  checks it once per URL, before building the request). Non-canonical IPv4 forms such as ``2130706433``
  are not literals to the client: they go through ``getaddrinfo``, and what they resolve to is checked.
* Trusted targets: the (host, port) of URLs an operator configured are configuration, not input, and are
  not checked: `NEXUS_WEBHOOK_URL` for webhooks, the service URLs (`NEXUS_SERVICE_<NAME>_URL`,
  `NEXUS_SERVICE_URLS`) for saga calls. Each policy trusts only its own kind: a subscription aimed at a
  service's address is checked like any other.
* One deadline (`timeout_s`) per request covers resolving, connecting, sending and the whole answer:
  `NEXUS_WEBHOOK_TIMEOUT_S` (capped at half the lease) for webhooks, `NEXUS_SAGA_CALL_TIMEOUT_S` for services.
* TLS with the system's trust store and certificate and host name verification (Python's defaults);
  keep-alive connections pooled per (scheme, host, port); redirects are never followed (a 3xx is an answer).

A refusal raises `UnsafeUrlError`: the dispatcher records the delivery as unsendable (dead at once, not
retried); the executor records the call as refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import socket
import ssl
from collections.abc import Iterable
from urllib.parse import urlsplit

from nexus.auth.urlguard import IPAddress, PrivateAllowance, forbidden
from nexus.errors import UnsafeUrlError
from nexus.settings import Settings, parse_service_urls


def trusted_targets(urls: Iterable[str | None]) -> frozenset[tuple[str, int]]:
    """(host, port) of the URLs an operator configured: trusted as configuration, not checked."""
    targets = set()
    for url in urls:
        if url:
            parts = urlsplit(url)
            if parts.hostname:
                targets.add((parts.hostname.lower(), parts.port or (443 if parts.scheme == "https" else 80)))
    return frozenset(targets)


@dataclasses.dataclass(frozen=True, slots=True)
class OutboundPolicy:
    """The guard (what is inside, what is trusted), the request deadline and TLS of one kind of call."""

    allowance: PrivateAllowance
    trusted: frozenset[tuple[str, int]]
    timeout_s: float
    ssl_context: ssl.SSLContext | None = None
    """None: the system's trust store, made on the first https connection."""

    @classmethod
    def for_webhooks(cls, settings: Settings, timeout_s: float) -> OutboundPolicy:
        """Webhook deliveries: `NEXUS_WEBHOOK_URL` is trusted; `timeout_s` is the dispatcher's (below the lease)."""
        allowance = PrivateAllowance.parse(settings.allow_private_urls)
        return cls(allowance, trusted_targets([settings.webhook_url]), timeout_s)

    @classmethod
    def for_services(cls, settings: Settings) -> OutboundPolicy:
        """Saga service calls: the configured service URLs are trusted; `NEXUS_SAGA_CALL_TIMEOUT_S`."""
        allowance = PrivateAllowance.parse(settings.allow_private_urls)
        trusted = trusted_targets(parse_service_urls(settings.service_urls).values())
        return cls(allowance, trusted, settings.saga_call_timeout_s)

    def is_trusted(self, host: str, port: int) -> bool:
        return (host.lower(), port) in self.trusted

    def check_literal(self, host: str, port: int) -> None:
        """Refuse an address literal the guard forbids (names are `addresses`' business)."""
        try:
            address: IPAddress = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            return
        if not self.is_trusted(host, port) and forbidden(address, self.allowance):
            raise UnsafeUrlError(f"outbound guard: {host} is an internal address ({address})")

    async def addresses(self, host: str, port: int) -> list[tuple[str, int]]:
        """The checked addresses to connect to for `host`:`port` (a literal is itself); `UnsafeUrlError` if
        any address the name resolves to is inside, `OSError` if it resolves to nothing."""
        bare = host.strip("[]")
        if _is_literal(bare):
            self.check_literal(bare, port)
            return [(bare, port)]
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_ADDRCONFIG)
        found = list(dict.fromkeys((str(info[4][0]), int(info[4][1])) for info in infos))
        if self.is_trusted(host, port):
            return found
        checked = [ipaddress.ip_address(a.split("%", 1)[0]) for a, _ in found]
        refused = [a for a in checked if forbidden(a, self.allowance)]
        if refused or not found:
            where = refused[0] if refused else "nothing"
            raise UnsafeUrlError(f"outbound guard: {host} resolves to an internal address ({where})")
        return found

    def tls(self) -> ssl.SSLContext:
        return self.ssl_context or _default_tls()


_tls: list[ssl.SSLContext] = []


def _default_tls() -> ssl.SSLContext:
    # One context per process: loading the trust store is the costly part, and the context is immutable here.
    if not _tls:
        _tls.append(ssl.create_default_context())
    return _tls[0]


def _is_literal(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        return False
    return True
