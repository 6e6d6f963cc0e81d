"""Console sessions and the route policy that sends /console through them (pure parts; the store itself is
tested on PostgreSQL in tests/integration/test_console_sessions.py)."""

from __future__ import annotations

from nexus.auth.roles import PUBLIC, Role, required_roles, uses_session
from nexus.auth.sessions import cookie_of, same_token


def test_console_routes_use_the_session_and_need_an_operator() -> None:
    """/console pages authenticate by cookie and need the operator role; the sign-in form is open; the API is not
    touched."""
    assert uses_session("/console") and uses_session("/console/orders/default/o-1")
    assert not uses_session("/v1/events") and not uses_session("/consoles")
    assert required_roles("GET", "/console/orders") == frozenset({Role.OPERATOR})
    assert required_roles("POST", "/console/login") == PUBLIC


def test_cookie_and_token_helpers() -> None:
    """The cookie is read from raw headers; a CSRF token matches only itself, and never when absent."""
    headers = [(b"cookie", b"a=1; nexus_console=xyz; b=2")]
    assert cookie_of(headers, "nexus_console") == "xyz" and cookie_of(headers, "c") is None
    assert same_token("t", "t") and not same_token("t", "u") and not same_token("", "") and not same_token(None, "t")
