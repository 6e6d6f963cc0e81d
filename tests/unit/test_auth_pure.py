"""The pure parts of identity: route policy, role checks, key scope, rate limits, outbound URL guard."""

from __future__ import annotations

import ipaddress

import pytest

from nexus.auth.ratelimit import RateLimiter, RateLimits, retry_after_header
from nexus.auth.roles import ANY_ROLE, Principal, Role, allowed, check_key_scope, parse_roles, required_roles
from nexus.auth.urlguard import PrivateAllowance, check_url, forbidden, host_address, parse_ipv4_any, redact
from nexus.errors import UnsafeUrlError


@pytest.mark.parametrize(
    ("method", "path", "roles"),
    [
        ("GET", "/healthz", set()),
        ("GET", "/readyz", set()),
        ("POST", "/v1/events", {Role.AGENT}),
        ("GET", "/v1/orders/o-1", {Role.AGENT, Role.OPERATOR}),
        ("GET", "/v1/orders/o-1/history", {Role.AGENT, Role.OPERATOR}),
        ("GET", "/v1/plans/p-1", {Role.AGENT, Role.OPERATOR}),
        ("GET", "/v1/dead-letters", {Role.OPERATOR}),
        ("POST", "/v1/dead-letters/3/redrive", {Role.OPERATOR}),
        ("POST", "/v1/subscriptions", {Role.OPERATOR}),
        ("GET", "/v1/deliveries/dead", {Role.OPERATOR}),
        ("GET", "/metrics", {Role.OPERATOR}),
        ("POST", "/v1/keys", {Role.ADMIN}),
        ("POST", "/v1/approvals/1/approve", {Role.APPROVER, Role.OPERATOR}),
        ("GET", "/docs", set(ANY_ROLE)),
        ("GET", "/openapi.json", set(ANY_ROLE)),
        ("GET", "/nowhere", set(ANY_ROLE)),
        ("POST", "/healthz", set(ANY_ROLE)),
    ],
)
def test_route_policy(method: str, path: str, roles: set[Role]) -> None:
    """Each route needs the roles of the contract; only GET /healthz and /readyz need no key at all."""
    assert set(required_roles(method, path)) == roles


def test_a_principal_needs_one_of_the_roles_and_admin_is_not_a_superuser() -> None:
    """Holding one role of the set suffices; admin alone cannot submit steps or read dead letters."""
    admin = Principal(1, None, frozenset({Role.ADMIN}))
    both = Principal(2, "acme", frozenset({Role.AGENT, Role.OPERATOR}))
    assert not allowed(admin, frozenset({Role.AGENT}))
    assert not allowed(admin, frozenset({Role.OPERATOR}))
    assert allowed(admin, frozenset({Role.ADMIN}))
    assert allowed(both, frozenset({Role.OPERATOR}))
    assert allowed(both, frozenset())
    assert both.can_see("acme") and not both.can_see("globex") and admin.can_see("globex")


def test_roles_parse_repeated_and_comma_separated() -> None:
    """`--role agent --role operator,approver` is three roles; an unknown or empty role is refused."""
    assert parse_roles(["agent", "operator,approver"]) == {Role.AGENT, Role.OPERATOR, Role.APPROVER}
    with pytest.raises(ValueError, match="unknown role"):
        parse_roles(["root"])
    with pytest.raises(ValueError, match="at least one"):
        parse_roles([" , "])


def test_only_operators_and_admins_may_span_every_tenant() -> None:
    """`--tenant '*'` is stored as NULL for operator/admin keys and refused for an agent-only key."""
    assert check_key_scope("*", frozenset({Role.OPERATOR})) is None
    assert check_key_scope("*", frozenset({Role.ADMIN})) is None
    assert check_key_scope("acme", frozenset({Role.AGENT})) == "acme"
    with pytest.raises(ValueError, match="span"):
        check_key_scope("*", frozenset({Role.AGENT}))


def test_rate_limiter_refuses_past_the_burst_and_refills() -> None:
    """At 2/s a key gets 2 requests at once, the third waits ~0.5 s; divided by 2 processes it gets 1."""
    limits = RateLimits({Role.AGENT: 2.0, Role.OPERATOR: 0.0})
    limiter = RateLimiter(limits)
    agent = frozenset({Role.AGENT})
    assert limiter.take(1, agent, 100.0) == 0.0
    assert limiter.take(1, agent, 100.0) == 0.0
    wait = limiter.take(1, agent, 100.0)
    assert wait == pytest.approx(0.5)
    assert retry_after_header(wait) == "1"
    assert limiter.take(2, agent, 100.0) == 0.0  # another key has its own bucket
    assert limiter.take(1, agent, 100.6) == 0.0  # refilled
    assert limiter.take(3, frozenset({Role.OPERATOR}), 100.0) == 0.0  # 0 = unlimited
    divided = RateLimiter(RateLimits({Role.AGENT: 2.0}, processes=2))
    assert divided.take(1, agent, 0.0) == 0.0
    assert divided.take(1, agent, 0.0) > 0


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("169.254.169.254", "169.254.169.254"),
        ("10.1", "10.0.0.1"),
        ("example.com", None),
        ("1.2.3.4.5", None),
        ("256.1.1.1", None),
    ],
)
def test_ipv4_in_every_notation(text: str, address: str | None) -> None:
    """Decimal, octal, hex and short IPv4 are read as the resolver reads them."""
    parsed = parse_ipv4_any(text)
    assert (str(parsed) if parsed else None) == address


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://localhost:8080/hook",
        "http://sub.localhost/hook",
        "http://2130706433/hook",
        "http://0177.0.0.1/hook",
        "http://0x7f.1/hook",
        "http://0.0.0.0/hook",
        "http://0/hook",
        "http://[::1]/hook",
        "http://[::]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[::ffff:7f00:1]/hook",
        "http://[64:ff9b::a9fe:a9fe]/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.5/hook",
        "http://172.16.3.4/hook",
        "http://192.168.1.1/hook",
        "http://100.64.0.1/hook",
        "http://224.0.0.1/hook",
        "http://240.0.0.1/hook",
        "http://[fe80::1]/hook",
        "http://[fc00::1]/hook",
        "http://admin:pw@example.com/hook",
        "http://@example.com/hook",
        "ftp://example.com/hook",
        "file:///etc/passwd",
        "http:///hook",
        "http://exa mple.com/hook",
        "http://example.com/ho\nok",
        "http://example.com\\@127.0.0.1/",
        "http://example.com:0/",
        "http://example.com:99999/",
    ],
)
def test_unsafe_urls_are_refused(url: str) -> None:
    """Internal addresses in every notation, credentials, other schemes and malformed URLs are refused."""
    with pytest.raises(UnsafeUrlError):
        check_url(url)


@pytest.mark.parametrize(
    "url", ["https://hooks.example.com/nexus?token=abc", "http://93.184.216.34:8080/h", "http://[2606:4700::1]/h"]
)
def test_public_urls_are_accepted(url: str) -> None:
    """Public names and addresses pass the creation check (the connect-time check still applies)."""
    assert check_url(url) == url


def test_allow_private_opens_everything_or_some_networks() -> None:
    """`true` opens every address and localhost; a list of networks opens only those."""
    assert check_url("http://localhost:1/h", PrivateAllowance.parse("true"))
    some = PrivateAllowance.parse("127.0.0.0/8, 10.0.0.0/8")
    assert check_url("http://127.0.0.1:9/h", some)
    assert not forbidden(ipaddress.ip_address("10.2.3.4"), some)
    assert forbidden(ipaddress.ip_address("192.168.0.1"), some)
    assert forbidden(ipaddress.ip_address("::ffff:192.168.0.1"), some)
    with pytest.raises(UnsafeUrlError):
        PrivateAllowance.parse("not-a-network")


def test_host_address_reads_ipv6_and_ipv4_mapped() -> None:
    """Bracketed IPv6 hosts (with zone ids) and mapped IPv4 are addresses; names are not."""
    assert str(host_address("[::ffff:127.0.0.1]")) == "::ffff:7f00:1"
    assert str(host_address("fe80::1%eth0")) == "fe80::1"
    assert host_address("hooks.example.com") is None


def test_redact_hides_credentials_and_query_values() -> None:
    """Userinfo is dropped and query values replaced, so a URL can be logged or listed."""
    assert redact("http://admin:pw@host:81/c?token=s3cret&x=1") == "http://host:81/c?token=***&x=***"
    assert "s3cret" not in redact("https://h/c?token=s3cret")


def test_cloudevents_body_is_structured_and_native_is_unchanged() -> None:
    """`cloudevents` wraps the stored payload as CloudEvents 1.0 (application/cloudevents+json); `native`
    sends the stored bytes as they are."""
    import datetime as dt
    import json

    from nexus.delivery.formats import render_body

    stored = json.dumps({"notification_id": "n-1", "order_id": "o-1", "plan_id": "p-1", "tenant_id": "acme",
                         "position": 2, "event_type": "OrderShipped"})  # fmt: skip
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    body, content_type = render_body("cloudevents", stored, at)
    event = json.loads(body)
    assert content_type == "application/cloudevents+json"
    assert {k: event[k] for k in ("specversion", "id", "type", "subject", "time", "sequence")} == {
        "specversion": "1.0",
        "id": "n-1",
        "type": "nexus.order.OrderShipped",
        "subject": "o-1",
        "time": "2026-01-01T00:00:00Z",
        "sequence": "00000000000000000002",  # zero-padded: sorts as strings
    }
    assert event["source"] == "/nexus/tenants/acme/orders/o-1" and event["data"] == json.loads(stored)
    assert render_body("native", stored, at) == (stored.encode(), "application/json")
