"""The quota snapshots' look-ups without waiting: each database keeps its own snapshots however the calls
alternate, and a tenant's in-memory admission is answered at once when its snapshot is fresh (None when a read
is due)."""

from __future__ import annotations

from nexus.auth.quotas import QuotaSnapshots, TenantQuotas, snapshots
from nexus.core.quotas import Quota
from nexus.settings import Settings
from nexus.store.database import Database


def test_each_database_keeps_its_own_snapshots() -> None:
    """Asked in turns, two databases each get their own snapshots every time; a changed refresh interval a new one."""
    first, second = Database(Settings(quota_refresh_s=1.0)), Database(Settings(quota_refresh_s=1.0))
    mine, theirs = snapshots(first), snapshots(second)
    assert mine is not None and theirs is not None and mine is not theirs
    assert [snapshots(first), snapshots(second), snapshots(first)] == [mine, theirs, mine]
    first.settings = Settings(quota_refresh_s=2.0)
    renewed = snapshots(first)
    assert renewed is not mine and renewed is not None and renewed.refresh_s == 2.0


def test_admits_now_answers_only_from_a_fresh_snapshot() -> None:
    """No snapshot or a stale one: None (nothing counted); a fresh one admits far from the limit (and counts it)
    and refuses within twice the worth of it."""
    snaps = QuotaSnapshots(60.0)
    worth = {Quota.LIVE_ORDERS: 1}
    assert snaps.admits_now("acme", worth) is None
    snaps.remember(TenantQuotas("acme", {Quota.LIVE_ORDERS: 8}, {Quota.LIVE_ORDERS: 10}, {}))
    assert snaps.admits_now("acme", worth) is True
    assert snaps.admits_now("acme", worth) is False  # 9 + 2 > 10: the exact check decides
    stale = QuotaSnapshots(0.0)
    stale.remember(TenantQuotas("acme", {}, {}, {}))
    assert stale.admits_now("acme", worth) is None
