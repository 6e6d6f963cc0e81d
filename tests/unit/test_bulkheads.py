"""Bulkheads of the webhook workers: per-tenant and per-subscription caps, and fair turns across tenants."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nexus.delivery.bulkheads import BulkheadConfig, Bulkheads, in_turn, share, tenant_key
from nexus.settings import Settings


def test_defaults_are_half_the_workers_per_tenant_and_all_of_them_per_subscription() -> None:
    """16 workers: 8 per tenant, 16 per subscription; explicit values are kept, clipped to the workers."""
    assert BulkheadConfig.of(16, None, None) == BulkheadConfig(16, 8, 16)
    assert BulkheadConfig.of(1, None, None) == BulkheadConfig(1, 1, 1)
    assert BulkheadConfig.of(4, 10, 2) == BulkheadConfig(4, 4, 2)
    settings = Settings.from_env(
        {"NEXUS_DELIVERY_MAX_INFLIGHT_PER_TENANT": "3", "NEXUS_DELIVERY_MAX_INFLIGHT_PER_SUBSCRIPTION": "2"}
    )
    assert (settings.delivery_max_inflight_per_tenant, settings.delivery_max_inflight_per_subscription) == (3, 2)


def test_room_is_the_smaller_of_the_tenants_and_the_subscriptions() -> None:
    """A subscription's room shrinks with its own slots and with its tenant's; released slots come back."""
    heads = Bulkheads(BulkheadConfig(16, 4, 3))
    for _ in range(3):
        heads.take("acme", 1)
    assert heads.room("acme", 1) == 0 and heads.room("acme", 2) == 1 and heads.room("beta", 3) == 3
    heads.take("acme", 2)
    assert heads.tenant_room("acme") == 0 and heads.room("acme", 2) == 0
    heads.release("acme", 1)
    assert heads.room("acme", 2) == 1 and heads.held("acme") == 3


def test_a_lone_tenant_is_held_to_the_workers_only() -> None:
    """Not shared (one tenant has subscriptions): the tenant's cap is every worker."""
    heads = Bulkheads(BulkheadConfig(16, 8, 16))
    heads.shared = False
    assert heads.tenant_room("acme") == 16
    heads.shared = True
    assert heads.tenant_room("acme") == 8


def test_turns_rotate_tenants_and_their_subscriptions() -> None:
    """Every tenant, and every subscription within its tenant, goes first in its turn; `*` is a tenant."""
    subs = [(1, "a"), (2, "a"), (3, "b"), (4, tenant_key(None))]
    assert in_turn(subs, 0) == [("a", [1, 2]), ("b", [3]), ("*", [4])]
    assert in_turn(subs, 1) == [("b", [3]), ("*", [4]), ("a", [2, 1])]
    assert {in_turn(subs, t)[0][0] for t in range(3)} == {"a", "b", "*"}


@given(st.integers(0, 1000), st.integers(1, 50))
def test_shares_add_up_to_what_is_left(left: int, among: int) -> None:
    """Taking `share(left, n)` from what is left, n times, hands out everything and never more."""
    given_out = 0
    for i in range(among):
        given_out += share(left - given_out, among - i)
    assert given_out == left


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 6), st.booleans()), max_size=200))
def test_caps_hold_whatever_the_order_of_takes_and_releases(ops: list[tuple[str, int, bool]]) -> None:
    """Taking only where there is room, no tenant ever holds more than its cap nor a subscription more than its own."""
    heads = Bulkheads(BulkheadConfig(16, 5, 3))
    held: list[tuple[str, int]] = []
    for tenant, sub, take in ops:
        sub_id = ord(tenant) * 10 + sub
        if take and heads.room(tenant, sub_id) > 0:
            heads.take(tenant, sub_id)
            held.append((tenant, sub_id))
        elif not take and (tenant, sub_id) in held:
            held.remove((tenant, sub_id))
            heads.release(tenant, sub_id)
        assert all(heads.held(t) <= 5 for t in "abc")
        assert all(held.count((t, s)) <= 3 for t, s in held)
