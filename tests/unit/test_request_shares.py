"""RequestShares' tickets (issue 34, item 1): a request counted in a share at its head moves to its key's
tenant only if that share has room, is counted out exactly once, and every count adds up to the total the
request cap bounds."""

from __future__ import annotations

from nexus.auth.roles import ALL_TENANTS
from nexus.auth.shares import RequestShares


def test_a_ticket_moves_to_its_tenant_only_with_room_and_is_released_once() -> None:
    """An unauthenticated ticket moves to acme (room), a second cannot move to the full acme and stays counted
    where it was; releasing twice counts out once; a key spanning every tenant is ALL_TENANTS's share."""
    shares = RequestShares(per_tenant=1, unauthenticated=2)
    first, second = shares.take(None), shares.take(None)
    assert first is not None and second is not None and shares.take(None) is None
    assert first.move("acme") and shares.in_flight("acme") == 1 and shares.unchecked == 1
    assert not second.move("acme") and second.share is None and shares.unchecked == 1
    assert shares.total == 2
    first.release()
    first.release()
    assert shares.in_flight("acme") == 0 and shares.total == 1
    assert second.move(None) and second.share == ALL_TENANTS and shares.in_flight(None) == 1
    second.release()
    assert shares.total == 0 and shares.unchecked == 0 and shares.in_flight(None) == 0


def test_the_middlewares_own_counts_add_to_the_total() -> None:
    """enter/leave and enter_unauthenticated/leave_unauthenticated (the app served without the protocol)
    count in the same total as tickets, and a full share refuses without counting."""
    shares = RequestShares(per_tenant=1, unauthenticated=1)
    assert shares.enter("acme") and not shares.enter("acme")
    assert shares.enter_unauthenticated() and not shares.enter_unauthenticated()
    assert shares.total == 2 and shares.take("acme") is None
    shares.leave("acme")
    shares.leave_unauthenticated()
    assert shares.total == 0
