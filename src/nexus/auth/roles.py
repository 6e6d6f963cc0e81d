"""Who may call what: roles, principals and the route policy. Pure (no I/O).

A principal is what an API key stands for: an id, one tenant (or every tenant, `tenant_id is None`) and
one or more roles. Each route needs one of a set of roles; `admin` manages keys and is not a superuser
(a key that should do everything holds every role). Only `/healthz`, `/readyz` and the OAuth protected
resource metadata need no key.
"""

from __future__ import annotations

import dataclasses
import enum
import re

from nexus.core.actors import key_actor, oauth_actor, reserved_name
from nexus_wire.envelope import is_safe_identifier

ALL_TENANTS = "*"
"""Every tenant: the tenant of a key or subscription spanning them all (operators, the bootstrap admin), and the
one name such keys share in per-tenant counts (request shares, processing slots, the tenant rate limit)."""
TENANT_PATTERN = r"^(\*|[A-Za-z0-9][A-Za-z0-9._:@-]{0,199})$"
"""A tenant as a key or subscription names it: an identifier (the envelope's rule), or `*` for every tenant."""


class InvalidTenantError(ValueError):
    """A tenant that is neither an identifier nor `*` (422 INVALID_IDENTIFIER)."""


class InvalidKeyNameError(ValueError):
    """A key name that reads as a decision-log actor (core/actors.py; 422 INVALID_IDENTIFIER)."""


def check_key_name(name: str | None) -> None:
    """InvalidKeyNameError if a new key's name takes an actor's form (`system:*`, `kafka:*`, `key:*`,
    `oauth:*`) or a system actor's word (`expiry`, `deadline`, `max_rejections`, `saga`)."""
    if name is not None and reserved_name(name):
        raise InvalidKeyNameError(
            "a key's name may not take a decision-log actor's form (system:, kafka:, key:, oauth:) "
            "or a system actor's name (expiry, deadline, max_rejections, saga)"
        )


class Role(enum.StrEnum):
    AGENT = "agent"  # submit steps; read and wait on its tenant's orders and plans
    OPERATOR = "operator"  # dead letters, deliveries, subscriptions, metrics, the console; reads orders too
    APPROVER = "approver"  # approve or deny held steps
    ADMIN = "admin"  # API keys


@dataclasses.dataclass(frozen=True, slots=True)
class Principal:
    """The caller behind an API key or an OAuth access token (nexus.auth.oauth): one identity model.

    A token's principal has `issuer` and `subject`, and a `key_id` below zero derived from the two
    (`token_holder_id`), so every count kept per key (rates, waits) is kept per (issuer, subject), and
    `expires_at`, its `exp`: a wait it holds ends then (nexus.lifecycle.waiting)."""

    key_id: int
    tenant_id: str | None  # None: every tenant
    roles: frozenset[Role]
    name: str | None = None
    issuer: str | None = None
    subject: str | None = None
    expires_at: float | None = None  # seconds since the epoch when the credential stops being valid; None: a key

    @property
    def actor(self) -> str:
        """The decision log's actor: `key:<id>`, or `oauth:<sub>@<issuer host>` for a token."""
        if self.issuer is not None and self.subject is not None:
            return oauth_actor(self.subject, self.issuer)
        return key_actor(self.key_id)

    @property
    def all_tenants(self) -> bool:
        return self.tenant_id is None

    def can_see(self, tenant_id: str | None) -> bool:
        """Whether an object of `tenant_id` is visible to this principal (another tenant's answers 404)."""
        return self.tenant_id is None or self.tenant_id == tenant_id


def read_tenant(principal: Principal, asked: str | None) -> str:
    """The tenant whose object is read: the key's; a key spanning every tenant names it (`?tenant=`)."""
    if principal.tenant_id is not None:
        return principal.tenant_id
    return asked or "default"


PUBLIC = frozenset[Role]()
ANY_ROLE = frozenset(Role)
_READERS = frozenset({Role.AGENT, Role.OPERATOR})
_OPERATOR = frozenset({Role.OPERATOR})

# (method or "*", path pattern, roles any of which suffices). First match wins; anything unmatched needs
# a valid key of any role (so an unknown path answers 404 only to someone authenticated).
_POLICY: tuple[tuple[str, re.Pattern[str], frozenset[Role]], ...] = tuple(
    (method, re.compile(pattern), roles)
    for method, pattern, roles in (
        ("GET", r"/healthz|/readyz", PUBLIC),
        ("GET", r"/\.well-known/oauth-protected-resource(/mcp)?", PUBLIC),  # RFC 9728 (nexus.auth.oauth)
        ("POST", r"/v1/events", frozenset({Role.AGENT})),
        ("POST", r"/v1/plans|/v1/orders/[^/]+/(steps|abort|replan)", frozenset({Role.AGENT})),
        ("GET", r"/v1/(orders|plans)/[^/]+(/.*)?", _READERS),
        ("*", r"/v1/(dead-letters|subscriptions|deliveries|blocked-actions|sagas)(/.*)?", _OPERATOR),
        ("GET", r"/metrics", _OPERATOR),
        ("*", r"/console/login", PUBLIC),  # The sign-in form (CSRF-checked by the console itself)
        ("*", r"/console(/.*)?", _OPERATOR),
        ("*", r"/v1/approvals(/.*)?", frozenset({Role.APPROVER, Role.OPERATOR})),
        ("*", r"/v1/keys(/.*)?", frozenset({Role.ADMIN})),
    )
)


def required_roles(method: str, path: str) -> frozenset[Role]:
    """The roles of which a caller needs one for `method path`; empty means no key is needed."""
    for m, pattern, roles in _POLICY:
        if (m == "*" or m == method or (m == "GET" and method == "HEAD")) and pattern.fullmatch(path):
            return roles
    return ANY_ROLE


_SESSION_ROUTES = re.compile(r"/console(/.*)?")


def uses_session(path: str) -> bool:
    """Whether `path` authenticates by the console's session cookie rather than the Bearer header."""
    return _SESSION_ROUTES.fullmatch(path) is not None


def allowed(principal: Principal, roles: frozenset[Role]) -> bool:
    """Whether `principal` holds one of `roles` (an empty set is open to everyone)."""
    return not roles or not principal.roles.isdisjoint(roles)


def parse_roles(values: list[str] | tuple[str, ...]) -> frozenset[Role]:
    """Roles from CLI/API values, each possibly comma-separated: `["agent,operator", "admin"]`."""
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    try:
        roles = frozenset(Role(n) for n in names)
    except ValueError as exc:
        raise ValueError(f"unknown role in {names}; roles are {', '.join(r.value for r in Role)}") from exc
    if not roles:
        raise ValueError("a key needs at least one role")
    return roles


def check_key_scope(tenant: str, roles: frozenset[Role]) -> str | None:
    """The stored tenant of a new key (None = every tenant); only operators and admins may span tenants."""
    if tenant != ALL_TENANTS:
        if not is_safe_identifier(tenant):
            raise InvalidTenantError(
                "a key's tenant is 1-200 characters of A-Za-z0-9._:@- starting with a letter or digit, or '*'"
            )
        return tenant
    if roles & {Role.AGENT, Role.APPROVER} and not roles & {Role.OPERATOR, Role.ADMIN}:
        raise ValueError("only operator or admin keys may span every tenant ('*')")
    return None
