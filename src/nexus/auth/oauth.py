"""OAuth 2.1 access tokens beside API keys: the gateway as a protected resource (RFC 9728), MCP's and the
REST API's alike. On only while `NEXUS_PUBLIC_URL` is set; keys work as before either way.

A Bearer credential of the JWT form (`ey...`.`...`.`...`) is an access token; anything else is a key. A token
is accepted when all of these hold, else 401 `UNAUTHENTICATED` (`WWW-Authenticate: Bearer error=
"invalid_token"` and the metadata's address):

1. its `iss` is one of `NEXUS_OAUTH_ISSUERS` (compared without a trailing slash);
2. it is signed (an asymmetric algorithm only) by a key of that issuer's JWKS, found through the issuer's
   discovery document (OpenID, else RFC 8414) and cached `NEXUS_OAUTH_JWKS_TTL_S`; a `kid` not in the cached
   set fetches the set again, at most once per `NEXUS_OAUTH_JWKS_REFETCH_S` (a key rotated in is found at
   once, a flood of made-up kids costs one fetch per interval);
3. its `aud` names `NEXUS_PUBLIC_URL` (RFC 8707: a token meant for another resource is refused), it has
   `sub` and `exp`, and it has not expired;
4. its `NEXUS_OAUTH_TENANT_CLAIM` (default `tenant`) is an identifier (a token never spans tenants).

Its roles are those of `NEXUS_OAUTH_ROLES_CLAIM` (default `roles`) whose scope `nexus:<role>` the token was
granted too (`scope`, space separated, or `scp`, a list). A token without the role a route needs is
answered 403 `FORBIDDEN` with `WWW-Authenticate: Bearer error="insufficient_scope"` (nexus.auth.middleware).

The principal is the one a key produces (`nexus.auth.roles.Principal`) with `issuer` and `subject`: the
decision log's actor is `oauth:<sub>@<issuer host>` and rates, shares and waits are kept per (issuer,
subject). Its `expires_at` is the token's `exp`: a wait the token holds (a stream, a long poll, an MCP wait) ends
within a second of it, as a key's waits end on its revocation (nexus.lifecycle.waiting). The token itself goes
no further than this module: nothing downstream sees it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import enum
import hashlib
import json
import re
import time
from typing import Any

import httpx
import jwt

from nexus.auth.roles import Principal, Role
from nexus.errors import ErrorCode, NexusError
from nexus.settings import Settings
from nexus_wire.envelope import is_safe_identifier

SCOPES: dict[Role, str] = {role: f"nexus:{role.value}" for role in Role}
"""The scope that must accompany each role claim: `nexus:agent`, `nexus:operator`, `nexus:approver`,
`nexus:admin`."""

METADATA_PATH = "/.well-known/oauth-protected-resource"

_JWT_FORM = re.compile(r"ey[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_MAX_SEEN = 10_000  # tokens answered from memory at once (beyond: the expired go, then all)
_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class IssuerUnavailableError(NexusError):
    """An issuer's discovery document or JWKS cannot be fetched now (503, retryable)."""

    code = ErrorCode.SERVER_BUSY
    transient = True


class TokenRefusal(enum.StrEnum):
    """Why an access token was not accepted (logged; `nexus_auth_failures_total{reason="invalid_token"}`)."""

    UNKNOWN_ISSUER = "unknown_issuer"
    UNKNOWN_KEY = "unknown_key"
    EXPIRED = "expired"
    AUDIENCE = "audience"
    NO_TENANT = "no_tenant"
    INVALID = "invalid"

    @property
    def message(self) -> str:
        return _MESSAGES[self]


_MESSAGES = {
    TokenRefusal.UNKNOWN_ISSUER: "the access token's issuer is not trusted here",
    TokenRefusal.UNKNOWN_KEY: "the access token is signed by a key its issuer does not publish",
    TokenRefusal.EXPIRED: "the access token has expired",
    TokenRefusal.AUDIENCE: "the access token is meant for another resource (audience)",
    TokenRefusal.NO_TENANT: "the access token names no tenant",
    TokenRefusal.INVALID: "the access token is not valid",
}


def looks_like_jwt(credential: str) -> bool:
    """Whether a Bearer credential has a JWT's form (an API key never does: `nxk_...`)."""
    return _JWT_FORM.fullmatch(credential) is not None


def token_holder_id(issuer: str, subject: str) -> int:
    """A token principal's `key_id`: below zero (no key has one), the same for one (issuer, subject)."""
    digest = hashlib.blake2b(f"{issuer}\0{subject}".encode(), digest_size=8).digest()
    return -1 - (int.from_bytes(digest, "big") >> 1)


def granted_roles(claimed: Any, scope: Any) -> frozenset[Role]:
    """The roles both claimed (a list, or a space-separated string) and granted as `nexus:<role>` scopes."""
    names = _words(claimed)
    scopes = _words(scope)
    return frozenset(role for role in Role if role.value in names and SCOPES[role] in scopes)


def _words(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(v for v in value if isinstance(v, str))
    return frozenset()


def _unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A JWT's header and claims, not yet verified (to find its issuer and key), or None if unreadable."""
    try:
        head, body, _ = token.split(".")
        header, claims = (json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))) for part in (head, body))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return None
    return header, claims


class IssuerKeys:
    """One issuer's signing keys: its discovery document's `jwks_uri`, fetched and cached."""

    def __init__(self, issuer: str, settings: Settings, http: httpx.AsyncClient) -> None:
        self.issuer = issuer
        self.ttl_s = settings.oauth_jwks_ttl_s
        self.refetch_s = settings.oauth_jwks_refetch_s
        self.http = http
        self.fetches = 0
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()

    async def key(self, kid: str) -> jwt.PyJWK | None:
        """The issuer's key `kid`; an unknown kid fetches the set again unless it was fetched too recently."""
        fetched = self._fetched_at
        age = float("inf") if fetched is None else time.monotonic() - fetched
        if age > self.ttl_s or (kid not in self._keys and age >= self.refetch_s):
            await self._fetch(fetched)
        return self._keys.get(kid)

    async def _fetch(self, seen: float | None) -> None:
        async with self._lock:
            if self._fetched_at != seen:  # another request fetched the set while this one waited
                return
            try:
                document = await self._discovery()
                jwks = await self._json(str(document["jwks_uri"]))
                found = {k.key_id: k for k in jwt.PyJWKSet.from_dict(jwks).keys if k.key_id}
            except (httpx.HTTPError, KeyError, TypeError, ValueError, jwt.PyJWTError) as exc:
                raise IssuerUnavailableError(f"cannot fetch the keys of issuer {self.issuer}") from exc
            self.fetches += 1
            self._keys = found
            self._fetched_at = time.monotonic()

    async def _discovery(self) -> dict[str, Any]:
        """The first discovery document that names this issuer: OpenID's, else RFC 8414's."""
        scheme, _, rest = self.issuer.partition("://")
        host, slash, path = rest.partition("/")
        candidates = (
            f"{self.issuer}/.well-known/openid-configuration",
            f"{scheme}://{host}/.well-known/oauth-authorization-server{slash}{path}",
        )
        for url in candidates:
            answer = await self.http.get(url)
            if answer.status_code == 200:
                document = answer.json()
                if isinstance(document, dict) and str(document.get("issuer", "")).rstrip("/") == self.issuer:
                    return document
        raise ValueError(f"no discovery document names issuer {self.issuer}")

    async def _json(self, url: str) -> dict[str, Any]:
        answer = await self.http.get(url)
        answer.raise_for_status()
        value = json.loads(answer.content)
        if not isinstance(value, dict):
            raise TypeError(f"{url} is not a JSON object")
        return value


@dataclasses.dataclass(frozen=True, slots=True)
class ProtectedResource:
    """This gateway as OAuth sees it: its URL, the issuers it trusts, the claims it reads."""

    url: str
    issuers: tuple[str, ...]
    tenant_claim: str = "tenant"
    roles_claim: str = "roles"

    def metadata(self) -> dict[str, Any]:
        """The Protected Resource Metadata document (RFC 9728)."""
        return {
            "resource": self.url,
            "authorization_servers": list(self.issuers),
            "scopes_supported": list(SCOPES.values()),
            "bearer_methods_supported": ["header"],
            "resource_name": "Nexus Event Gateway",
        }

    def challenge(self, error: str | None = None) -> str:
        """The `WWW-Authenticate` value of a 401: where the metadata is, and the error if a token was sent."""
        text = f'Bearer resource_metadata="{self.url}{METADATA_PATH}"'
        return f'{text}, error="{error}"' if error else text


class OAuthVerifier:
    """Access tokens to principals (see the module's docstring for the rules)."""

    def __init__(self, settings: Settings, http: httpx.AsyncClient | None = None) -> None:
        if settings.public_url is None:
            raise ValueError("OAuth needs NEXUS_PUBLIC_URL")
        url = settings.public_url.rstrip("/")
        issuers = settings.issuer_urls()
        self.resource = ProtectedResource(url, issuers, settings.oauth_tenant_claim, settings.oauth_roles_claim)
        self.http = http or httpx.AsyncClient(timeout=settings.oauth_fetch_timeout_s, follow_redirects=False)
        self.issuers = {issuer: IssuerKeys(issuer, settings, self.http) for issuer in issuers}
        self._audiences = [url, url + "/"]
        self.ttl_s = settings.oauth_jwks_ttl_s
        self._seen: dict[bytes, tuple[float, Principal]] = {}

    @classmethod
    def of(cls, settings: Settings) -> OAuthVerifier | None:
        """The verifier when OAuth is on (`NEXUS_PUBLIC_URL` set), else None."""
        return cls(settings) if settings.public_url is not None else None

    async def check(self, token: str) -> Principal | TokenRefusal:
        """The token's principal, or why it is refused (IssuerUnavailableError if its keys cannot be had). A
        token accepted once is answered from memory until it expires, or `NEXUS_OAUTH_JWKS_TTL_S` has passed
        (no longer than its key is trusted without asking the issuer)."""
        digest = hashlib.sha256(token.encode()).digest()
        now = time.time()
        hit = self._seen.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        principal = await self._verify(token)
        if isinstance(principal, TokenRefusal):
            return principal
        if len(self._seen) >= _MAX_SEEN:
            self._seen = {d: e for d, e in self._seen.items() if e[0] > now}
            if len(self._seen) >= _MAX_SEEN:
                self._seen.clear()
        self._seen[digest] = (min(principal.expires_at or now, now + self.ttl_s), principal)
        return principal

    def remembered(self, token: str) -> bool:
        """Whether `token` was accepted and has not expired (no verification, no fetch to answer it)."""
        return self.remembered_principal(token) is not None

    def remembered_principal(self, token: str) -> Principal | None:
        """The principal of `token` if it was accepted and has not expired (no verification, no fetch)."""
        hit = self._seen.get(hashlib.sha256(token.encode()).digest())
        return hit[1] if hit is not None and hit[0] > time.time() else None

    async def _verify(self, token: str) -> Principal | TokenRefusal:
        """The rules of the module's docstring, in order: the principal (its `expires_at` the token's `exp`), or
        a refusal."""
        parts = _unverified(token)
        if parts is None:
            return TokenRefusal.INVALID
        header, unverified = parts
        issuer = str(unverified.get("iss", "")).rstrip("/")
        keys = self.issuers.get(issuer)
        if keys is None:
            return TokenRefusal.UNKNOWN_ISSUER
        key = await keys.key(str(header.get("kid", "")))
        if key is None:
            return TokenRefusal.UNKNOWN_KEY
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=list(_ALGORITHMS),
                audience=self._audiences,
                options={"require": ["exp", "sub", "aud", "iss"]},
            )
        except jwt.ExpiredSignatureError:
            return TokenRefusal.EXPIRED
        except (jwt.InvalidAudienceError, jwt.MissingRequiredClaimError) as exc:
            missing_aud = isinstance(exc, jwt.MissingRequiredClaimError) and exc.claim != "aud"
            return TokenRefusal.INVALID if missing_aud else TokenRefusal.AUDIENCE
        except jwt.PyJWTError:
            return TokenRefusal.INVALID
        return self._principal(issuer, claims)

    def _principal(self, issuer: str, claims: dict[str, Any]) -> Principal | TokenRefusal:
        tenant = claims.get(self.resource.tenant_claim)
        if not isinstance(tenant, str) or not is_safe_identifier(tenant):
            return TokenRefusal.NO_TENANT
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            return TokenRefusal.INVALID
        roles = granted_roles(claims.get(self.resource.roles_claim), claims.get("scope", claims.get("scp")))
        holder = token_holder_id(issuer, subject)
        return Principal(holder, tenant, roles, None, issuer=issuer, subject=subject, expires_at=float(claims["exp"]))

    async def aclose(self) -> None:
        await self.http.aclose()
