"""The pure quota arithmetic (nexus.core.quotas): a request's worth and the first quota it would exceed."""

from __future__ import annotations

from nexus.auth.quotas import _refs, upper_worth
from nexus.core.decide.items import Incoming
from nexus.core.quotas import Quota, StepRef, beyond, numbered_step_worth, steps_worth
from tests.factories import abort, step


def test_new_orders_count_once_and_stored_ones_not_at_all() -> None:
    """Every order named with a numbered step and not stored is one live order, however many steps it has."""
    refs = [StepRef("a", 1), StepRef("a", 2), StepRef("b", 1), StepRef("c", 2), StepRef("d", None)]
    assert steps_worth(refs, {"c": 1, "d": 3}, 0)[Quota.LIVE_ORDERS] == 2


def test_steps_filling_the_gap_are_not_buffered() -> None:
    """The missing step, and steps it makes consecutive, add nothing to the buffer; steps beyond a gap do."""
    assert steps_worth([StepRef("a", 2)], {"a": 1}, 0)[Quota.BUFFERED_STEPS] == 0
    assert steps_worth([StepRef("a", 3), StepRef("a", 2)], {"a": 1}, 0)[Quota.BUFFERED_STEPS] == 0
    assert steps_worth([StepRef("a", 4), StepRef("a", 2)], {"a": 1}, 0)[Quota.BUFFERED_STEPS] == 1
    assert steps_worth([StepRef("a", 1)], {"a": 5}, 0)[Quota.BUFFERED_STEPS] == 0  # a duplicate


def test_dead_letters_worth_is_the_bad_items_and_at_least_one() -> None:
    """Items known bad count one dead letter each; any request with a step could write one."""
    assert steps_worth([StepRef("a", 1)], {}, 0)[Quota.DEAD_LETTERS] == 1
    assert steps_worth([StepRef("a", 1)], {}, 3)[Quota.DEAD_LETTERS] == 3
    assert steps_worth([], {}, 0)[Quota.DEAD_LETTERS] == 0


def test_beyond_needs_worth_a_limit_and_an_excess() -> None:
    """A quota is exceeded only by a request adding to it, with a limit (0: none), past the limit."""
    limits = {Quota.LIVE_ORDERS: 2, Quota.BUFFERED_STEPS: 0}
    assert beyond({Quota.LIVE_ORDERS: 1}, limits, {Quota.LIVE_ORDERS: 1}) is None
    assert beyond({Quota.LIVE_ORDERS: 2}, limits, {Quota.LIVE_ORDERS: 1}) is Quota.LIVE_ORDERS
    assert beyond({Quota.LIVE_ORDERS: 5}, limits, {Quota.LIVE_ORDERS: 0}) is None
    assert beyond({Quota.BUFFERED_STEPS: 10**9}, limits, {Quota.BUFFERED_STEPS: 1}) is None


def test_a_numbered_step_is_a_new_order_only_without_an_order_row() -> None:
    """The first numbered step of a started plan creates the order; later ones do not."""
    assert numbered_step_worth(False)[Quota.LIVE_ORDERS] == 1
    assert numbered_step_worth(True)[Quota.LIVE_ORDERS] == 0


def test_quota_gauges_keep_a_bounded_tenant_label_set() -> None:
    """Past `max_series` tenants the rest share the series `other` (their sums), and a tenant no longer
    listed reads 0, so whoever creates tenants cannot grow the label set."""
    from nexus import metrics

    def used(tenant: str) -> float | None:
        return metrics.REGISTRY.get_sample_value("nexus_tenant_quota_used", {"tenant": tenant, "quota": "live_orders"})

    def reading(n: int) -> tuple[dict[str, int], dict[str, int]]:
        return {"live_orders": n}, {"live_orders": 10}

    metrics.set_tenant_quotas({"t-a": reading(5), "t-b": reading(3), "t-c": reading(2)}, 1)
    assert (used("t-a"), used("t-b"), used("other")) == (5, None, 5)
    limit = metrics.REGISTRY.get_sample_value("nexus_tenant_quota_limit", {"tenant": "other", "quota": "live_orders"})
    assert limit == 20
    metrics.set_tenant_quotas({"t-b": reading(1)}, 1)
    assert (used("t-a"), used("t-b"), used("other")) == (0, 1, 0)


def test_one_items_snapshot_worth_is_steps_worth_of_a_new_order() -> None:
    """The snapshot's bound of a one-item request (precomputed) equals `steps_worth` as if its order were new."""
    envelopes = [step("o", "p", seq) for seq in (1, 2, 3, 5)] + [abort("o", "p")]
    for items in [[Incoming({}, envelope=e)] for e in envelopes] + [[Incoming("{")]]:
        refs, bad = _refs(items)
        assert dict(upper_worth(items)) == steps_worth(refs, {}, bad)
