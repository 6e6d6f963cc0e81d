"""OAuth 2.1 beside API keys, end to end: a real authorization server (nexus_lab.oauth_issuer, in a thread of
this process) and `nexus serve` with NEXUS_PUBLIC_URL set. The official MCP client's OAuth support takes the
authorization code with PKCE and completes a plan; the same token calls the REST API; tokens of another
audience, expired, of an unknown issuer or key, without a tenant or without a scope are refused."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.oauth_issuer import Issuer, serve
from nexus_lab.procs import free_port
from tests.e2e.test_mcp import CREATED, run_order

CALLBACK = "http://127.0.0.1:9/callback"  # never reached: the redirect handler reads the code from the Location
USERS: dict[str, dict[str, Any]] = {
    "alice": {"tenant": "acme", "roles": ["agent"]},
    "olga": {"tenant": "acme", "roles": ["agent", "operator"]},
    "nobody": {"roles": ["agent"]},
}


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    """A running authorization server with the test users."""
    with serve(Issuer(USERS)) as running:
        yield running


@pytest.fixture
def oauth_gateway(start_gateway, settings: Settings, issuer: Issuer) -> str:  # type: ignore[no-untyped-def]
    """`nexus serve` trusting `issuer`, its public URL its own address; returns that URL."""
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    oauth = settings.replace(public_url=public, oauth_issuers=issuer.url, oauth_jwks_refetch_s=0)
    _, base = start_gateway("--no-dispatcher", settings_=oauth, port=port)
    return str(base)


class _Memory:
    """The MCP client's token storage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@contextlib.asynccontextmanager
async def oauth_mcp_client(base: str, storage: _Memory) -> AsyncIterator[Client]:
    """The official client of `{base}/mcp` authorizing itself: the redirect handler follows the authorize URL
    with httpx (the user consents at once) and hands the code in the Location to the callback handler."""
    answers: list[AuthorizationCodeResult] = []

    async def redirect(url: str) -> None:
        async with httpx.AsyncClient() as browser:
            went = await browser.get(url)
        assert went.status_code == 302, went.text
        query = parse_qs(urlsplit(went.headers["location"]).query)
        answers.append(AuthorizationCodeResult(code=query["code"][0], state=query["state"][0]))

    async def callback() -> AuthorizationCodeResult:
        return answers.pop()

    metadata = OAuthClientMetadata(
        redirect_uris=[CALLBACK],  # type: ignore[list-item]
        token_endpoint_auth_method="none",  # noqa: S106 (a public client: no secret)
        grant_types=["authorization_code"],
        response_types=["code"],
        client_name="nexus tests",
    )
    auth = OAuthClientProvider(f"{base}/mcp", metadata, storage, redirect, callback)
    async with (
        httpx2.AsyncClient(auth=auth, timeout=30) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        yield client


def token_for(issuer: Issuer, resource: str, user: str = "alice", scope: str = "nexus:agent") -> str:
    """An access token by the authorization code grant with PKCE, as any client gets one (plain HTTP)."""
    public_client = {"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none"}
    registered = httpx.post(f"{issuer.url}/register", json=public_client)
    client_id = registered.json()["client_id"]
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    asked = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": CALLBACK,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "s",
        "scope": scope,
        "resource": resource,
        "login_hint": user,
    }
    went = httpx.get(f"{issuer.url}/authorize", params=asked)
    code = parse_qs(urlsplit(went.headers["location"]).query)["code"][0]
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": CALLBACK, "client_id": client_id}
    answer = httpx.post(f"{issuer.url}/token", data=form | {"code_verifier": verifier, "resource": resource})
    assert answer.status_code == 200, answer.text
    token: str = answer.json()["access_token"]
    return token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_mcp_client_authorizes_with_pkce_and_completes_a_plan(
    oauth_gateway: str, issuer: Issuer, settings: Settings
) -> None:
    """The official MCP client, refused at first (401 pointing at the resource metadata), discovers the
    issuer, registers itself, takes a code with PKCE for this gateway's audience and runs a plan to
    completion; the decision log names `oauth:alice@<issuer host>` as every step's actor."""
    storage = _Memory()
    async with oauth_mcp_client(oauth_gateway, storage) as session:
        tools = {t.name for t in (await session.list_tools()).tools}
        assert "propose_step" in tools and "approve" not in tools
        await run_order(session, "oauth-mcp-1")
    assert storage.tokens is not None and set((storage.tokens.scope or "").split()) >= {"nexus:agent"}
    db = await Database(settings).open(migrate=False)
    try:
        actors = await db.fetch("SELECT DISTINCT actor FROM decision_log WHERE order_id = 'oauth-mcp-1'")
    finally:
        await db.close()
    host = urlsplit(issuer.url).netloc
    assert {r["actor"] for r in actors} == {f"oauth:alice@{host}"}


async def test_a_token_calls_the_rest_api_as_a_key_of_its_tenant_and_roles(oauth_gateway: str, issuer: Issuer) -> None:
    """A token of acme's agent starts a plan and reads its order over REST; /v1/identity shows the token's
    tenant, roles and actor; the metadata document names this gateway and its issuer; a request without any
    credential is answered 401 with `WWW-Authenticate: Bearer resource_metadata=...`."""
    token = token_for(issuer, oauth_gateway + "/")
    plan = {"process": "order", "order_id": "oauth-rest-1"}
    started = httpx.post(f"{oauth_gateway}/v1/plans", json=plan, headers=bearer(token))
    assert started.status_code == 201, started.text
    step = {"step": "OrderCreated", "data": CREATED}
    stepped = httpx.post(f"{oauth_gateway}/v1/orders/oauth-rest-1/steps", json=step, headers=bearer(token))
    assert stepped.json()["decision"] == "APPLY", stepped.text
    read = httpx.get(f"{oauth_gateway}/v1/orders/oauth-rest-1", headers=bearer(token))
    assert read.status_code == 200, read.text
    me = httpx.get(f"{oauth_gateway}/v1/identity", headers=bearer(token)).json()
    host = urlsplit(issuer.url).netloc
    assert me == {"key_id": None, "name": None, "tenant": "acme", "roles": ["agent"], "actor": f"oauth:alice@{host}"}
    document = httpx.get(f"{oauth_gateway}/.well-known/oauth-protected-resource")
    assert document.status_code == 200
    assert document.json()["resource"] == oauth_gateway and document.json()["authorization_servers"] == [issuer.url]
    assert httpx.get(f"{oauth_gateway}/.well-known/oauth-protected-resource/mcp").json() == document.json()
    bare = httpx.post(f"{oauth_gateway}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert bare.status_code == 401 and bare.json()["code"] == "UNAUTHENTICATED"
    expected = f'Bearer resource_metadata="{oauth_gateway}/.well-known/oauth-protected-resource"'
    assert bare.headers["www-authenticate"] == expected


async def test_tokens_that_do_not_hold_are_refused(oauth_gateway: str, issuer: Issuer) -> None:
    """Refused 401 invalid_token (the one error shape): another audience, expired, an unknown issuer, a key
    the issuer no longer publishes (after one refetch), no tenant claim; a role claim without its scope is
    403 FORBIDDEN with `error="insufficient_scope"`."""
    audience = oauth_gateway + "/"
    refused = {
        "another audience": token_for(issuer, "https://elsewhere.example/"),
        "no tenant": token_for(issuer, audience, "nobody"),
    }
    with serve(Issuer(USERS)) as stranger:
        refused["unknown issuer"] = token_for(stranger, audience)
    issuer.token_ttl_s = -120
    refused["expired"] = token_for(issuer, audience)
    issuer.token_ttl_s = 300
    assert httpx.get(f"{oauth_gateway}/v1/identity", headers=bearer(token_for(issuer, audience))).status_code == 200
    issuer.rotate(keep_previous=False)
    refused["unknown key"] = token_for(issuer, audience)  # signed by a key the gateway never saw...
    issuer.rotate(keep_previous=False)  # ...and the issuer no longer publishes
    served = issuer.jwks_served
    for why, token in refused.items():
        answer = httpx.get(f"{oauth_gateway}/v1/orders/x", headers=bearer(token))
        assert answer.status_code == 401, (why, answer.text)
        assert set(answer.json()) == {"code", "message", "request_id"} and answer.json()["code"] == "UNAUTHENTICATED"
        assert 'error="invalid_token"' in answer.headers["www-authenticate"], why
        assert "resource_metadata=" in answer.headers["www-authenticate"], why
    assert issuer.jwks_served == served + 1  # the unknown kid fetched the set again, once, before it was refused
    unscoped = token_for(issuer, audience, "alice", scope="nexus:operator")
    answer = httpx.post(f"{oauth_gateway}/v1/plans", json={"process": "order"}, headers=bearer(unscoped))
    assert answer.status_code == 403 and answer.json()["code"] == "FORBIDDEN", answer.text
    assert answer.headers["www-authenticate"].startswith('Bearer error="insufficient_scope"')


async def test_a_rotated_key_is_accepted_and_the_old_one_while_published(oauth_gateway: str, issuer: Issuer) -> None:
    """After the issuer rotates its signing key, a token of the new key (a kid the gateway has not seen) is
    accepted at once, and a token of the previous key still is while the issuer publishes it."""
    old = token_for(issuer, oauth_gateway + "/")
    assert httpx.get(f"{oauth_gateway}/v1/identity", headers=bearer(old)).status_code == 200
    issuer.rotate()
    new = token_for(issuer, oauth_gateway + "/", "olga", "nexus:agent nexus:operator")
    answer = httpx.get(f"{oauth_gateway}/v1/identity", headers=bearer(new))
    assert answer.status_code == 200, answer.text
    assert answer.json()["roles"] == ["agent", "operator"]
    assert httpx.get(f"{oauth_gateway}/v1/identity", headers=bearer(old)).status_code == 200


async def test_oauth_is_off_without_a_public_url(start_gateway, issuer: Issuer) -> None:  # type: ignore[no-untyped-def]
    """Without NEXUS_PUBLIC_URL a token is an unknown key (401 with a bare `Bearer` challenge) and there is no
    metadata document (404)."""
    _, base = start_gateway("--no-dispatcher")
    token = token_for(issuer, base + "/")
    answer = httpx.get(f"{base}/v1/identity", headers=bearer(token))
    assert (answer.status_code, answer.headers["www-authenticate"]) == (401, "Bearer")
    assert httpx.get(f"{base}/.well-known/oauth-protected-resource").status_code == 404
