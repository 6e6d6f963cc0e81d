"""Quotas on what a tenant stores, checked at every door before anything is written.

Counted in PostgreSQL (signed deltas appended to `tenant_usage`: by the group commit's own statement for the
orders it writes, migration 0045, and by statement-level triggers for every other table, migration 0023), so
every gateway process reads one count. Each door reads its tenant's usage, quotas and the orders it
names in one query, and refuses the whole request (`QuotaExceededError`: 429 QUOTA_EXCEEDED with `quota`)
when its worth (nexus.core.quotas) would take the tenant beyond one. The Kafka ingress admits record by
record instead (`admit_items`): a record over a quota goes to the DLQ topic and the stream goes on.

Snapshots: the doors of the hot path (`check_items`, `check_numbered_step`, `check_plan`) keep, per process,
each tenant's usage and quotas as last read (`QuotaSnapshots`), read again at most every
NEXUS_QUOTA_REFRESH_S. A request whose worth (an upper bound without the orders' last_seq) leaves it at least
its own worth away from every limit by the snapshot is admitted by an in-memory comparison and its worth is
added to the snapshot; only a request within its own worth of a limit runs the exact query. So a process
can admit at most one refresh interval's work past a limit that other processes filled, and a lowered
quota takes effect within the interval.

Races: the check and the write are separate transactions, so requests of one tenant checked at the same
moment (by any processes) each see the usage before the others' writes; the count can overshoot its limit
by what those concurrent requests add (at most one request's worth each), never more, and the next request
sees it and is refused. Nothing is counted twice or lost: what was written is counted by the statement that
wrote it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from nexus import metrics
from nexus.core.decide.items import Incoming
from nexus.core.quotas import Quota, StepRef, beyond, numbered_step_worth, refusal_message, steps_worth
from nexus.errors import NexusError, QuotaExceededError
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query

# A tenant with more delta rows than this has them folded into one per quota when next checked.
_COMPACT_ROWS = 64


@dataclasses.dataclass(frozen=True, slots=True)
class TenantQuotas:
    """One tenant's usage, quotas (0: none) and the last applied seq of the orders asked about."""

    tenant: str
    used: Mapping[Quota, int]
    limits: Mapping[Quota, int]
    last_seqs: Mapping[str, int]

    def refuse_beyond(self, worth: Mapping[Quota, int]) -> None:
        """Raise QuotaExceededError if `worth` would take the tenant beyond a quota."""
        quota = beyond(self.used, self.limits, worth)
        if quota is not None:
            raise QuotaExceededError(quota.value, refusal_message(quota, self.used.get(quota, 0), self.limits[quota]))


def default_limits(settings: Settings) -> dict[Quota, int]:
    return {
        Quota.LIVE_ORDERS: settings.quota_live_orders,
        Quota.UNSTARTED_PLANS: settings.quota_unstarted_plans,
        Quota.BUFFERED_STEPS: settings.quota_buffered_steps,
        Quota.DEAD_LETTERS: settings.quota_dead_letters,
        Quota.ACTIVE_KEYS: settings.quota_active_keys,
    }


async def read_tenant(db: Database, tenant: str, order_ids: Sequence[str] = ()) -> TenantQuotas:
    """The tenant's usage and quotas (folding its delta rows when they have piled up)."""
    rows = await db.fetch(query("quotas.sql", "quota_state"), tenant, list(order_ids))
    used: dict[Quota, int] = {}
    limits = default_limits(db.settings)
    last_seqs: dict[str, int] = {}
    delta_rows = 0
    for row in rows:
        if row["kind"] == "used":
            used[Quota(row["name"])] = row["n"]
            delta_rows += row["rows"]
        elif row["kind"] == "limit":
            limits[Quota(row["name"])] = row["n"]
        else:
            last_seqs[row["name"]] = row["n"]
    if delta_rows > _COMPACT_ROWS:
        await db.execute(query("quotas.sql", "compact_usage"), tenant)
    return TenantQuotas(tenant, used, limits, last_seqs)


@dataclasses.dataclass(slots=True)
class _Snapshot:
    used: dict[Quota, int]
    limits: dict[Quota, int]
    read_at: float


class QuotaSnapshots:
    """One process's view of each tenant's usage and quotas, read again when older than `refresh_s`."""

    def __init__(self, refresh_s: float) -> None:
        self.refresh_s = refresh_s
        self._tenants: dict[str, _Snapshot] = {}
        self._reads: dict[str, asyncio.Future[None]] = {}

    def remember(self, state: TenantQuotas) -> None:
        """A fresh read of the tenant (by the exact check or a refresh)."""
        self._tenants[state.tenant] = _Snapshot(dict(state.used), dict(state.limits), time.monotonic())

    def _fresh(self, tenant: str) -> _Snapshot | None:
        snap = self._tenants.get(tenant)
        return snap if snap is not None and time.monotonic() - snap.read_at < self.refresh_s else None

    async def admits(self, db: Database, tenant: str, worth: Mapping[Quota, int]) -> bool:
        """Whether the snapshot admits `worth` in memory (it is then counted); False: run the exact check."""
        admitted = self.admits_now(tenant, worth)
        if admitted is None:
            admitted = self._admit(await self._refresh(db, tenant), worth)
        return admitted

    def admits_now(self, tenant: str, worth: Mapping[Quota, int]) -> bool | None:
        """`admits` without waiting: None when the tenant's snapshot is missing or stale (a read is due)."""
        snap = self._tenants.get(tenant)
        if snap is None or time.monotonic() - snap.read_at >= self.refresh_s:
            return None
        return self._admit(snap, worth)

    @staticmethod
    def _admit(snap: _Snapshot, worth: Mapping[Quota, int]) -> bool:
        used, limits = snap.used, snap.limits
        for quota, adds in worth.items():
            if adds > 0 and (limit := limits.get(quota, 0)) > 0 and used.get(quota, 0) + 2 * adds > limit:
                return False
        for quota, adds in worth.items():
            if adds:
                used[quota] = used.get(quota, 0) + adds
        return True

    def count(self, tenant: str, worth: Mapping[Quota, int]) -> None:
        """What this process admitted, added to the tenant's snapshot until it is read again."""
        snap = self._tenants.get(tenant)
        if snap is not None:
            for quota, adds in worth.items():
                snap.used[quota] = snap.used.get(quota, 0) + adds

    async def _refresh(self, db: Database, tenant: str) -> _Snapshot:
        """One read per tenant at a time: concurrent requests wait for the read in flight (and read
        themselves if it failed)."""
        pending = self._reads.get(tenant)
        if pending is not None:
            await asyncio.shield(pending)
            snap = self._fresh(tenant)
            if snap is not None:
                return snap
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reads.setdefault(tenant, future)
        try:
            self.remember(await read_tenant(db, tenant))
        finally:
            if self._reads.get(tenant) is future:
                del self._reads[tenant]
            future.set_result(None)
        return self._tenants[tenant]


_SNAPSHOTS: weakref.WeakKeyDictionary[Database, QuotaSnapshots] = weakref.WeakKeyDictionary()
_LAST: list[tuple[weakref.ref[Database], QuotaSnapshots]] = []
"""The database last asked about and its snapshots (one process serves one database: no look-up by key)."""


def snapshots(db: Database) -> QuotaSnapshots | None:
    """This process's snapshots for `db` (None with NEXUS_QUOTA_REFRESH_S=0: every check is exact)."""
    if db.settings.quota_refresh_s <= 0:
        return None
    if _LAST and _LAST[0][0]() is db and _LAST[0][1].refresh_s == db.settings.quota_refresh_s:
        return _LAST[0][1]
    found = _SNAPSHOTS.get(db)
    if found is None or found.refresh_s != db.settings.quota_refresh_s:
        found = _SNAPSHOTS[db] = QuotaSnapshots(db.settings.quota_refresh_s)
    _LAST[:] = [(weakref.ref(db), found)]
    return found


async def _exact(
    db: Database, tenant: str, worth_of: Callable[[TenantQuotas], Mapping[Quota, int]], order_ids: Sequence[str] = ()
) -> None:
    """Today's exact check (refusing beyond a quota), remembered by the snapshots with what it admitted;
    `worth_of` gives the request's worth from the fresh read (a batch's depends on its orders' last_seq)."""
    state = await read_tenant(db, tenant, order_ids)
    snaps = snapshots(db)
    if snaps is not None:
        snaps.remember(state)
    worth = worth_of(state)
    state.refuse_beyond(worth)
    if snaps is not None:
        snaps.count(tenant, worth)


def _refs(items: Sequence[Incoming]) -> tuple[list[StepRef], int]:
    refs = [StepRef(i.envelope.order_id, i.envelope.seq_id) for i in items if i.envelope is not None]
    return refs, len(items) - len(refs)


# The worth of one item if its order were new (`upper_worth`'s usual case): unparsed, unnumbered, seq 1, beyond 1.
_ONE_BAD = MappingProxyType(steps_worth([], {}, 1))
_ONE_UNNUMBERED = MappingProxyType(steps_worth([StepRef("", None)], {}, 0))
_ONE_FIRST = MappingProxyType(steps_worth([StepRef("", 1)], {}, 0))
_ONE_BEYOND = MappingProxyType(steps_worth([StepRef("", 2)], {}, 0))


def upper_worth(items: Sequence[Incoming]) -> Mapping[Quota, int]:
    """`steps_worth` of `items` as if every order they name were new (the snapshot's bound), one item's
    without building its refs."""
    if len(items) == 1:
        envelope = items[0].envelope
        if envelope is None:
            return _ONE_BAD
        seq = envelope.seq_id
        return _ONE_UNNUMBERED if seq is None else _ONE_BEYOND if seq > 1 else _ONE_FIRST
    refs, bad = _refs(items)
    return steps_worth(refs, {}, bad)


def admitted_now(db: Database, items: Sequence[Incoming]) -> bool:
    """`check_items` without waiting, for a request of one tenant: True when the tenant's fresh snapshot admits
    it (then counted, as `check_items` would); False, counting nothing, when `check_items` must decide."""
    snaps = snapshots(db)
    if snaps is None or not items:
        return False
    tenant = items[0].tenant_id
    if len(items) > 1 and any(item.tenant_id != tenant for item in items):
        return False
    return snaps.admits_now(tenant, upper_worth(items)) is True


async def check_items(db: Database, items: Sequence[Incoming]) -> None:
    """`POST /v1/events`: refuse the request if, for any of its tenants, it would go beyond a quota."""
    snaps = snapshots(db)
    for tenant, own in _by_tenant(items):
        if snaps is not None:
            worth = upper_worth(own)
            admitted = snaps.admits_now(tenant, worth)
            if admitted or (admitted is None and await snaps.admits(db, tenant, worth)):
                continue  # far from every limit even if every order it names were new
        refs, bad = _refs(own)
        orders = sorted({r.order_id for r in refs})
        await _exact(db, tenant, lambda state: steps_worth(refs, state.last_seqs, bad), orders)  # noqa: B023 - awaited in this iteration


def _by_tenant(items: Sequence[Incoming]) -> list[tuple[str, Sequence[Incoming]]]:
    """The items by tenant, in the tenants' order (a request's items are all its key's tenant's: the usual)."""
    if len(items) <= 1:
        return [(items[0].tenant_id, items)] if items else []
    first = items[0].tenant_id
    if all(item.tenant_id == first for item in items):
        return [(first, items)]
    by_tenant: dict[str, list[Incoming]] = {}
    for item in items:
        by_tenant.setdefault(item.tenant_id, []).append(item)
    return sorted(by_tenant.items())


async def _check(db: Database, tenant: str, worth: Mapping[Quota, int]) -> None:
    snaps = snapshots(db)
    if snaps is not None and await snaps.admits(db, tenant, worth):
        return
    await _exact(db, tenant, lambda _state: worth)


async def check_numbered_step(db: Database, tenant: str, order_stored: bool) -> None:
    """A step the server numbers (steps API, MCP `propose_step`) of an order stored or only planned."""
    await _check(db, tenant, numbered_step_worth(order_stored))


async def check_plan(db: Database, tenant: str) -> None:
    """A plan started (`POST /v1/plans`, MCP `start_plan`)."""
    await _check(db, tenant, {Quota.UNSTARTED_PLANS: 1})


async def check_key(db: Database, tenant: str | None) -> None:
    """A key created (`POST /v1/keys`, `nexus keys create`); a key spanning every tenant is not counted."""
    if tenant is not None:
        state = await read_tenant(db, tenant)
        state.refuse_beyond({Quota.ACTIVE_KEYS: 1})


async def admit_items(db: Database, items: Sequence[Incoming]) -> list[QuotaExceededError | None]:
    """The Kafka ingress: per item in order, None (admitted) or the quota error it is refused with; each
    admitted item counts against the quotas of the items after it."""
    states: dict[str, TenantQuotas] = {}
    for tenant in sorted({i.tenant_id for i in items}):
        orders = sorted({i.envelope.order_id for i in items if i.tenant_id == tenant and i.envelope is not None})
        states[tenant] = await read_tenant(db, tenant, orders)
    used = {tenant: dict(state.used) for tenant, state in states.items()}
    last = {tenant: dict(state.last_seqs) for tenant, state in states.items()}
    verdicts: list[QuotaExceededError | None] = []
    for item in items:
        state = states[item.tenant_id]
        refs, bad = _refs([item])
        worth = steps_worth(refs, last[item.tenant_id], bad)
        try:
            dataclasses.replace(state, used=used[item.tenant_id]).refuse_beyond(worth)
        except QuotaExceededError as exc:
            verdicts.append(exc)
            continue
        verdicts.append(None)
        _count_admitted(used[item.tenant_id], last[item.tenant_id], refs, worth, bad)
    return verdicts


def _count_admitted(
    used: dict[Quota, int], last: dict[str, int], refs: list[StepRef], worth: Mapping[Quota, int], bad: int
) -> None:
    """An admitted item's rows, added to the running usage (a dead letter only when it is one already)."""
    for quota in (Quota.LIVE_ORDERS, Quota.BUFFERED_STEPS):
        used[quota] = used.get(quota, 0) + worth.get(quota, 0)
    used[Quota.DEAD_LETTERS] = used.get(Quota.DEAD_LETTERS, 0) + bad
    for ref in refs:
        if ref.seq_id is not None and ref.seq_id == last.get(ref.order_id, 0) + 1:
            last[ref.order_id] = ref.seq_id
        elif ref.order_id not in last:
            last[ref.order_id] = 0


async def refresh_gauges(db: Database) -> None:
    """`nexus_tenant_quota_used` and `nexus_tenant_quota_limit`, read at scrape from the usage table."""
    try:
        rows = await db.fetch(query("quotas.sql", "quota_gauges"))
    except NexusError:
        return
    defaults = default_limits(db.settings)
    tenants: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    for row in rows:
        used, limits = tenants.setdefault(row["tenant_id"], ({}, {}))
        quota = Quota(row["quota"])
        used[quota.value] = row["used"]
        limits[quota.value] = defaults[quota] if row["own_limit"] is None else row["own_limit"]
    metrics.set_tenant_quotas(tenants, db.settings.metrics_max_tenants)
