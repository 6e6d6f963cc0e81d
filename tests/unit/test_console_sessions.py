"""Console sessions and the route policy that sends /console through them (pure parts)."""

from __future__ import annotations

import time

from nexus.auth.roles import PUBLIC, Role, required_roles, uses_session
from nexus.auth.sessions import SessionStore, cookie_of, same_token


def test_console_routes_use_the_session_and_need_an_operator() -> None:
    """/console pages authenticate by cookie and need the operator role; the sign-in form is open; the API is not
    touched."""
    assert uses_session("/console") and uses_session("/console/orders/default/o-1")
    assert not uses_session("/v1/events") and not uses_session("/consoles")
    assert required_roles("GET", "/console/orders") == frozenset({Role.OPERATOR})
    assert required_roles("POST", "/console/login") == PUBLIC


def test_sessions_expire_and_are_dropped() -> None:
    """A session is found by its id until its TTL passes or it is dropped; each has its own CSRF token."""
    store = SessionStore(ttl_s=0.2)
    sid, session = store.create("nxk_a")
    other, second = store.create("nxk_a")
    assert sid != other and session.csrf != second.csrf
    assert store.get(sid) == session and store.get("nope") is None and store.get(None) is None
    store.drop(other)
    assert store.get(other) is None
    time.sleep(0.25)
    assert store.get(sid) is None


def test_the_store_is_bounded() -> None:
    """Past max_sessions the oldest session goes, so signing in in a loop cannot grow memory without bound."""
    store = SessionStore(ttl_s=60, max_sessions=3)
    ids = [store.create(f"k{i}")[0] for i in range(5)]
    assert [store.get(i) is not None for i in ids] == [False, False, True, True, True]


def test_cookie_and_token_helpers() -> None:
    """The cookie is read from raw headers; a CSRF token matches only itself, and never when absent."""
    headers = [(b"cookie", b"a=1; nexus_console=xyz; b=2")]
    assert cookie_of(headers, "nexus_console") == "xyz" and cookie_of(headers, "c") is None
    assert same_token("t", "t") and not same_token("t", "u") and not same_token("", "") and not same_token(None, "t")
