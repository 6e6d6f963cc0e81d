"""OAuth's pure parts: roles need their claim and their scope, a token's holder id and actor, and the `oauth:`
prefix reserved in key names."""

from __future__ import annotations

import pytest

from nexus.auth.oauth import TokenRefusal, granted_roles, looks_like_jwt, token_holder_id
from nexus.auth.roles import InvalidKeyNameError, Principal, Role, check_key_name
from nexus.core.actors import oauth_actor


def test_a_role_needs_both_its_claim_and_its_scope() -> None:
    """A role counts only when claimed and granted as `nexus:<role>`; lists and space-separated strings both read."""
    assert granted_roles(["agent", "approver"], "nexus:agent nexus:operator") == {Role.AGENT}
    assert granted_roles("agent operator", ["nexus:operator", "nexus:agent"]) == {Role.AGENT, Role.OPERATOR}
    assert granted_roles(["admin"], "admin nexus:agent") == frozenset()
    assert granted_roles(None, "nexus:agent") == frozenset() and granted_roles(["agent"], None) == frozenset()
    assert granted_roles(["agent", 7], 7) == frozenset()


def test_a_tokens_holder_is_below_every_key_and_one_per_issuer_and_subject() -> None:
    """The holder id of (issuer, subject) is negative, stable, and differs for another subject or issuer."""
    a = token_holder_id("https://id.example", "alice")
    assert a < 0 and a == token_holder_id("https://id.example", "alice")
    assert a != token_holder_id("https://id.example", "bob") and a != token_holder_id("https://other.example", "alice")


def test_a_tokens_principal_is_logged_as_oauth_subject_at_issuer_host() -> None:
    """A token's principal's actor is `oauth:<sub>@<issuer host>`; a key's stays `key:<id>`."""
    token = Principal(-5, "acme", frozenset({Role.AGENT}), issuer="https://id.example:8443/realms/x", subject="alice")
    assert token.actor == "oauth:alice@id.example:8443" == oauth_actor("alice", "https://id.example:8443/realms/x")
    assert Principal(12, "acme", frozenset({Role.AGENT})).actor == "key:12"


@pytest.mark.parametrize("name", ["oauth:alice@id.example", "OAuth:x", " oauth:"])
def test_a_key_name_may_not_take_the_oauth_prefix(name: str) -> None:
    """A key named like a token's actor would read as one in the decision log: refused."""
    with pytest.raises(InvalidKeyNameError, match="oauth:"):
        check_key_name(name)


def test_only_the_jwt_form_is_read_as_a_token() -> None:
    """Three base64url parts starting `ey` are a token; a key (`nxk_...`) or anything else is not; every
    refusal has a message."""
    assert looks_like_jwt("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln")
    assert not looks_like_jwt("nxk_abc.def.ghi") and not looks_like_jwt("eyJ.a")
    assert all(reason.message for reason in TokenRefusal)
