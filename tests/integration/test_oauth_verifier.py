"""The access-token verifier against a real issuer (nexus_lab.oauth_issuer): its JWKS is cached, and an unknown
`kid` fetches it again at most once per NEXUS_OAUTH_JWKS_REFETCH_S."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from nexus.auth.oauth import OAuthVerifier, TokenRefusal
from nexus.auth.roles import Principal, Role
from nexus.settings import Settings
from nexus_lab.oauth_issuer import Issuer, serve

AUDIENCE = "https://gateway.example"


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    """A running authorization server with one user of acme."""
    with serve(Issuer({"alice": {"tenant": "acme", "roles": ["agent"]}})) as running:
        yield running


async def test_unknown_kids_refetch_the_jwks_at_most_once_per_interval(issuer: Issuer) -> None:
    """With a 60 s interval, a flood of tokens of unseen kids costs one JWKS fetch: the first finds a key
    rotated in, the ones after are refused without asking the issuer again."""
    settings = Settings(public_url=AUDIENCE, oauth_issuers=issuer.url, oauth_jwks_refetch_s=60)
    verifier = OAuthVerifier(settings)
    try:
        first = await verifier.check(issuer.issue("alice", "nexus:agent", AUDIENCE, "c"))
        assert isinstance(first, Principal) and first.roles == {Role.AGENT} and first.tenant_id == "acme"
        assert issuer.jwks_served == 1
        issuer.rotate()
        rotated = issuer.issue("alice", "nexus:agent", AUDIENCE, "c")
        cached = verifier.issuers[issuer.url]
        cached._fetched_at = 0.0  # pretend the last fetch is an interval old
        cached.ttl_s = 1e12
        assert isinstance(await verifier.check(rotated), Principal)
        assert issuer.jwks_served == 2
        for _ in range(20):
            issuer.rotate(keep_previous=False)
            refused = await verifier.check(issuer.issue("alice", "nexus:agent", AUDIENCE, "c"))
            assert refused is TokenRefusal.UNKNOWN_KEY
        assert issuer.jwks_served == 2
    finally:
        await verifier.aclose()


async def test_a_token_names_the_audience_it_was_asked_for(issuer: Issuer) -> None:
    """A token whose `aud` is another resource is refused AUDIENCE; one without `aud` (no resource asked) too."""
    verifier = OAuthVerifier(Settings(public_url=AUDIENCE, oauth_issuers=issuer.url))
    try:
        assert (
            await verifier.check(issuer.issue("alice", "nexus:agent", "https://x.example", "c"))
            is TokenRefusal.AUDIENCE
        )
        assert await verifier.check(issuer.issue("alice", "nexus:agent", None, "c")) is TokenRefusal.AUDIENCE
        assert isinstance(await verifier.check(issuer.issue("alice", "nexus:agent", AUDIENCE + "/", "c")), Principal)
    finally:
        await verifier.aclose()


async def test_a_token_accepted_once_is_refused_once_it_expires(issuer: Issuer) -> None:
    """A token answered from memory after its first check (`remembered`, so it counts as a known credential
    in the shares) is still refused EXPIRED once its `exp` passes."""
    verifier = OAuthVerifier(Settings(public_url=AUDIENCE, oauth_issuers=issuer.url))
    issuer.token_ttl_s = 2
    try:
        token = issuer.issue("alice", "nexus:agent", AUDIENCE, "c")
        assert not verifier.remembered(token)
        assert isinstance(await verifier.check(token), Principal)
        assert verifier.remembered(token) and isinstance(await verifier.check(token), Principal)
        await asyncio.sleep(3.1)
        assert not verifier.remembered(token)
        assert await verifier.check(token) is TokenRefusal.EXPIRED
    finally:
        await verifier.aclose()
