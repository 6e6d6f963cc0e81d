"""A real OAuth 2.1 authorization server for the gateway's tests and demos: OpenID/RFC 8414 discovery, dynamic
client registration (RFC 7591), the authorization code grant with PKCE (S256 required), resource indicators
(RFC 8707: the token's `aud` is the `resource` asked for) and JWT access tokens (RFC 9068) signed RS256 by a
key of its JWKS, which `rotate` replaces.

Built on maintained libraries: PyJWT signs the tokens and writes the JWKs, `cryptography` makes the keys,
Starlette and uvicorn serve it. No maintained provider on PyPI issues JWT access tokens bound to a resource
with a rotatable key and starts in a test (oidc-provider-mock's tokens are opaque), hence this one.

Its users are given when it is made (`sub` -> extra claims such as `tenant` and `roles`); the user is picked
by `login_hint` (else the first) and consents at once: `/authorize` redirects straight to the client with
a code, so a client's redirect handler can follow the URL with any HTTP client. Scopes granted are those
asked for. Not for production: no sign-in, state in memory.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from nexus_lab.procs import free_port

SCOPES = ("nexus:agent", "nexus:operator", "nexus:approver", "nexus:admin")


@dataclasses.dataclass(frozen=True, slots=True)
class _Grant:
    client_id: str
    redirect_uri: str
    challenge: str
    sub: str
    scope: str
    resource: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class _Key:
    kid: str
    private: rsa.RSAPrivateKey

    @classmethod
    def new(cls) -> _Key:
        return cls(uuid.uuid4().hex[:16], rsa.generate_private_key(public_exponent=65537, key_size=2048))

    def jwk(self) -> dict[str, Any]:
        public: dict[str, Any] = RSAAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        return public | {"kid": self.kid, "use": "sig", "alg": "RS256"}


class Issuer:
    """The authorization server's state and its ASGI app (`app`); `url` once served (`serve`)."""

    def __init__(self, users: dict[str, dict[str, Any]], *, token_ttl_s: float = 300.0) -> None:
        self.users = users
        self.token_ttl_s = token_ttl_s
        self.url = ""
        self.keys = [_Key.new()]
        self.clients: dict[str, dict[str, Any]] = {}
        self.jwks_served = 0
        self._codes: dict[str, _Grant] = {}
        self.app = Starlette(
            routes=[
                Route("/.well-known/openid-configuration", self._discovery),
                Route("/.well-known/oauth-authorization-server", self._discovery),
                Route("/jwks", self._jwks),
                Route("/register", self._register, methods=["POST"]),
                Route("/authorize", self._authorize),
                Route("/token", self._token, methods=["POST"]),
            ]
        )

    def rotate(self, *, keep_previous: bool = True) -> None:
        """A new signing key; the previous one stays published (tokens it signed still verify) or is dropped."""
        self.keys = [_Key.new(), *self.keys[:1]] if keep_previous else [_Key.new()]

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "registration_endpoint": f"{self.url}/register",
            "jwks_uri": f"{self.url}/jwks",
            "scopes_supported": list(SCOPES),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        }

    def issue(self, sub: str, scope: str, resource: str | None, client_id: str) -> str:
        """An access token for user `sub` (its claims), signed by the current key."""
        now = int(time.time())
        claims: dict[str, Any] = {
            **self.users[sub],
            "iss": self.url,
            "sub": sub,
            "aud": resource or client_id,
            "client_id": client_id,
            "scope": scope,
            "iat": now,
            "exp": now + int(self.token_ttl_s),
            "jti": uuid.uuid4().hex,
        }
        key = self.keys[0]
        return jwt.encode(claims, key.private, algorithm="RS256", headers={"kid": key.kid, "typ": "at+jwt"})

    async def _discovery(self, _: Request) -> Response:
        return JSONResponse(self.metadata())

    async def _jwks(self, _: Request) -> Response:
        self.jwks_served += 1
        return JSONResponse({"keys": [k.jwk() for k in self.keys]})

    async def _register(self, request: Request) -> Response:
        body = await request.json()
        uris = body.get("redirect_uris")
        if not isinstance(uris, list) or not uris:
            return _error(400, "invalid_redirect_uri", "redirect_uris is required")
        method = body.get("token_endpoint_auth_method", "client_secret_basic")
        client = {**body, "client_id": uuid.uuid4().hex, "client_id_issued_at": int(time.time())}
        client["token_endpoint_auth_method"] = method
        if method != "none":
            client["client_secret"] = secrets.token_urlsafe(24)
            client["client_secret_expires_at"] = 0
        self.clients[client["client_id"]] = client
        return JSONResponse(client, status_code=201)

    async def _authorize(self, request: Request) -> Response:
        q = request.query_params
        client = self.clients.get(q.get("client_id", ""))
        if client is None or q.get("redirect_uri") not in client["redirect_uris"]:
            return _error(400, "invalid_request", "unknown client or redirect_uri")
        redirect = q["redirect_uri"]
        if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return _redirect(redirect, error="invalid_request", state=q.get("state"))
        sub = q.get("login_hint") or next(iter(self.users))
        if sub not in self.users:
            return _redirect(redirect, error="access_denied", state=q.get("state"))
        code = secrets.token_urlsafe(24)
        scope = q.get("scope", "")
        self._codes[code] = _Grant(client["client_id"], redirect, q["code_challenge"], sub, scope, q.get("resource"))
        return _redirect(redirect, code=code, state=q.get("state"))

    async def _token(self, request: Request) -> Response:
        form = await request.form()
        client_id, secret = _client_credentials(request, {k: str(v) for k, v in form.items()})
        client = self.clients.get(client_id)
        if client is None or client.get("client_secret", secret) != secret:
            return _error(401, "invalid_client", "unknown client or wrong secret")
        if form.get("grant_type") != "authorization_code":
            return _error(400, "unsupported_grant_type", "only authorization_code")
        grant = self._codes.pop(str(form.get("code", "")), None)
        if grant is None or grant.client_id != client_id or grant.redirect_uri != form.get("redirect_uri"):
            return _error(400, "invalid_grant", "unknown, used or mismatched code")
        if _s256(str(form.get("code_verifier", ""))) != grant.challenge:
            return _error(400, "invalid_grant", "PKCE verification failed")
        resource = str(form.get("resource") or grant.resource or "") or None
        if grant.resource is not None and resource != grant.resource:
            return _error(400, "invalid_target", "resource differs from the authorization request's")
        token = self.issue(grant.sub, grant.scope, resource, client_id)
        answer = {"access_token": token, "token_type": "Bearer", "expires_in": int(self.token_ttl_s)}
        return JSONResponse(answer | {"scope": grant.scope}, headers={"cache-control": "no-store"})


def _s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def _client_credentials(request: Request, form: dict[str, str]) -> tuple[str, str | None]:
    """(client_id, secret) from HTTP Basic or the form (a public client sends its id alone)."""
    header = request.headers.get("authorization", "")
    if header.lower().startswith("basic "):
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        return user, password
    return form.get("client_id", ""), form.get("client_secret")


def _redirect(uri: str, **params: str | None) -> Response:
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return RedirectResponse(f"{uri}{'&' if '?' in uri else '?'}{query}", status_code=302)


def _error(status: int, error: str, description: str) -> Response:
    return JSONResponse({"error": error, "error_description": description}, status_code=status)


@contextlib.contextmanager
def serve(issuer: Issuer, port: int | None = None) -> Iterator[Issuer]:
    """Serve `issuer` on 127.0.0.1 in a thread of its own (its event loop apart from the caller's, which may
    block on a gateway that asks the issuer for its keys); `issuer.url` is set while it runs."""
    port = port or free_port()
    config = uvicorn.Config(issuer.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"oauth-issuer-{port}", daemon=True)
    issuer.url = f"http://127.0.0.1:{port}"
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the OAuth issuer did not start")
        time.sleep(0.01)
    try:
        yield issuer
    finally:
        server.should_exit = True
        thread.join(timeout=5)
