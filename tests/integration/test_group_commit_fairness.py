"""The group commit is fair between tenants: one tenant's largest legal batches, queued first, delay another
tenant's single step by about one transaction (counted in transactions, not timed)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

from nexus.core.decide.answers import Outcome
from nexus.core.decide.items import Incoming, IngressKind
from nexus.core.decide.plan_start import PlanStart
from nexus.errors import ErrorCode
from nexus.gateway import Gateway
from nexus.ingress.batcher import GroupCommitter
from nexus.store.database import Database
from nexus_wire.codes import Decision
from tests.factories import step_json


class CountingGateway(Gateway):
    """A real gateway that remembers the tenants of each transaction it ran, in order."""

    transactions: list[list[str]]

    async def submit(self, items: Sequence[Incoming], *, source: IngressKind | str = IngressKind.HTTP) -> list[Outcome]:
        self.transactions.append([i.envelope.tenant_id for i in items if i.envelope is not None])
        return await super().submit(items, source=source)


def _batch(tenant: str, prefix: str, n: int) -> list[Incoming]:
    return [Incoming.parse(step_json(f"{prefix}-{i}", f"p-{prefix}-{i}", 1, tenant_id=tenant)) for i in range(n)]


async def test_a_single_step_waits_one_transaction_behind_another_tenants_big_batches(db: Database) -> None:
    """Four 1,000-envelope batches of acme queued before initech's one step: the step is decided in the first or
    second transaction (it was in the fifth before the fair queue), acme's batches are decided whole and in order,
    and no transaction holds more than `max_events` items."""
    gateway = CountingGateway(db)
    gateway.transactions = []
    committer = GroupCommitter(gateway, workers=1, max_events=500, tenant_events=250)
    committer.start()
    try:
        big = [asyncio.create_task(committer.submit(_batch("acme", f"a{b}", 1000))) for b in range(4)]
        await asyncio.sleep(0)  # every batch queued first
        [light] = await committer.submit(_batch("initech", "c", 1))
        assert light.decision is Decision.APPLY
        first = next(i for i, tenants in enumerate(gateway.transactions) if "initech" in tenants)
        assert first <= 1, [len(t) for t in gateway.transactions]
        answers = await asyncio.gather(*big)
    finally:
        await committer.stop()
    assert all(len(a) == 1000 and {o.decision for o in a} == {Decision.APPLY} for a in answers)
    assert max(len(t) for t in gateway.transactions) <= 500
    assert sum(len(t) for t in gateway.transactions) == 4001


async def test_an_empty_request_is_answered_with_no_outcome(db: Database) -> None:
    """`{"events": []}` reaches the group commit as no items: answered with none, not an error."""
    committer = GroupCommitter(Gateway(db), workers=1)
    committer.start()
    try:
        assert await committer.submit([]) == []
    finally:
        await committer.stop()


async def test_a_transaction_holds_at_most_one_share_of_a_busy_tenants_items(db: Database) -> None:
    """With acme's batches queued, every transaction holds at most `tenant_events` of acme's items, so
    initech's single step waits behind one share of acme's work in flight and is decided in the next transaction
    with at most one more share (on the batcher before shares it shared a transaction with 75 of acme's items,
    the one before it held 100)."""
    gateway = CountingGateway(db)
    gateway.transactions = []
    committer = GroupCommitter(gateway, workers=1, max_events=100, tenant_events=16)
    committer.start()
    try:
        big = [asyncio.create_task(committer.submit(_batch("acme", f"a{b}", 64))) for b in range(2)]
        await asyncio.sleep(0)  # every batch queued first
        [light] = await committer.submit(_batch("initech", "c", 1))
        assert light.decision is Decision.APPLY
        answers = await asyncio.gather(*big)
    finally:
        await committer.stop()
    first = next(i for i, tenants in enumerate(gateway.transactions) if "initech" in tenants)
    assert first <= 1, [len(t) for t in gateway.transactions]
    assert max(t.count("acme") for t in gateway.transactions) <= 16, [t.count("acme") for t in gateway.transactions]
    assert all(len(a) == 64 and {o.decision for o in a} == {Decision.APPLY} for a in answers)
    assert sum(len(t) for t in gateway.transactions) == 129


async def test_one_tenants_single_step_requests_still_share_a_transaction(db: Database) -> None:
    """The share bounds a tenant's items, not its requests: 40 one-step requests of one tenant queued together
    are decided in one transaction (the group commit of many small requests is kept)."""
    gateway = CountingGateway(db)
    gateway.transactions = []
    committer = GroupCommitter(gateway, workers=1, max_events=500, tenant_events=64)
    committer.start()
    try:
        answers = await asyncio.gather(*(committer.submit(_batch("acme", f"s{i}", 1)) for i in range(40)))
    finally:
        await committer.stop()
    assert all(a[0].decision is Decision.APPLY for a in answers)
    assert [len(t) for t in gateway.transactions] == [40]


def _heavy(tenant: str, prefix: str, n: int, lines: int) -> list[Incoming]:
    """`n` single-step requests of `tenant`, each an OrderCreated of `lines` order lines (its total wrong: the
    process rejects it after checking every line)."""
    items = [{"product_id": f"p{i}", "quantity": 1, "unit_price": 1} for i in range(lines)]
    data = {"user_id": "u1", "items": items, "total_amount": 1, "currency": "USD"}
    return [
        Incoming.parse(step_json(f"{prefix}-{i}", f"p-{prefix}-{i}", 1, tenant_id=tenant, data=data)) for i in range(n)
    ]


async def test_a_share_counts_an_items_weight_not_only_its_count(db: Database) -> None:
    """Eight of acme's 1,000-line steps queued before initech's one step (a share of 64): each transaction holds
    one of them (each weighs 63), so initech's step shares its transaction with at most one (on the batcher
    counting items, all eight and initech's step shared one transaction)."""
    gateway = CountingGateway(db)
    gateway.transactions = []
    committer = GroupCommitter(gateway, workers=1, max_events=500, tenant_events=64)
    committer.start()
    try:
        heavy = [asyncio.create_task(committer.submit(_heavy("acme", f"h{i}", 1, 1000))) for i in range(8)]
        await asyncio.sleep(0)  # every heavy step queued first
        [light] = await committer.submit(_batch("initech", "c", 1))
        assert light.decision is Decision.APPLY
        await asyncio.gather(*heavy)
    finally:
        await committer.stop()
    assert max(t.count("acme") for t in gateway.transactions) == 1, gateway.transactions
    assert next(t for t in gateway.transactions if "initech" in t).count("acme") <= 1


async def test_a_busy_tenants_share_shrinks_while_another_tenant_submits(db: Database) -> None:
    """A share of 64, 16 while contended: acme's 64-envelope batch alone is one transaction of 64; the same batch
    a moment after initech's one step is cut into transactions of at most 16 of acme's items (with one share
    throughout, as before, it was one transaction of 64 again)."""
    gateway = CountingGateway(db)
    gateway.transactions = []
    committer = GroupCommitter(gateway, workers=1, max_events=500, tenant_events=64, contended_events=16)
    committer.start()
    try:
        alone = await committer.submit(_batch("acme", "alone", 64))
        assert [t.count("acme") for t in gateway.transactions] == [64]
        gateway.transactions.clear()
        await committer.submit(_batch("initech", "c", 1))
        shared = await committer.submit(_batch("acme", "shared", 64))
    finally:
        await committer.stop()
    assert all(o.decision is Decision.APPLY for o in [*alone, *shared])
    assert [t.count("acme") for t in gateway.transactions if "acme" in t] == [16, 16, 16, 16], gateway.transactions


class CountingStarts(Gateway):
    """A real gateway that remembers the tenants of each plan-start transaction it ran, in order."""

    starts: list[list[str]]

    async def start_plans(self, starts: Sequence[PlanStart]) -> list[ErrorCode | None]:
        self.starts.append([s.tenant_id for s in starts])
        return await super().start_plans(starts)


def _start(tenant: str, order_id: str) -> PlanStart:
    return PlanStart(tenant, order_id, f"plan-{order_id}", "order", None, None)


async def test_concurrent_plan_starts_share_transactions_fairly(db: Database) -> None:
    """Plan starts have a group commit of their own: 40 concurrent starts of one tenant take a few transactions,
    not 40 (one each before); the same order started twice at once is started once (the second ORDER_EXISTS, as
    in two transactions); with initech starting plans too, a transaction holds at most 16 of acme's."""
    gateway = CountingStarts(db)
    gateway.starts = []
    committer = GroupCommitter(gateway, workers=1, max_events=500, tenant_events=64, contended_events=16)
    committer.start()
    try:
        alone = await asyncio.gather(*(committer.start_plan(_start("acme", f"s{i}")) for i in range(40)))
        assert alone == [None] * 40
        assert len(gateway.starts) <= 3, [len(t) for t in gateway.starts]
        twice = await asyncio.gather(*(committer.start_plan(_start("acme", "same")) for _ in range(2)))
        assert len(twice) == 2 and set(twice) == {None, ErrorCode.ORDER_EXISTS}, twice
        gateway.starts.clear()
        both = [committer.start_plan(_start("acme", f"b{i}")) for i in range(48)]
        both += [committer.start_plan(_start("initech", f"c{i}")) for i in range(4)]
        assert await asyncio.gather(*both) == [None] * 52
    finally:
        await committer.stop()
    assert max(t.count("acme") for t in gateway.starts) <= 16, gateway.starts
    assert db.pool is not None
    assert await db.pool.fetchval("SELECT count(*) FROM plans WHERE order_id = 'same'") == 1


class TimingGateway(Gateway):
    """A real gateway that remembers when each transaction it ran started and ended, and whose tenants."""

    spans: list[tuple[float, float, list[str]]]

    async def submit(self, items: Sequence[Incoming], *, source: IngressKind | str = IngressKind.HTTP) -> list[Outcome]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            return await super().submit(items, source=source)
        finally:
            self.spans.append((started, loop.time(), [i.envelope.tenant_id for i in items if i.envelope is not None]))


def _gaps(spans: list[tuple[float, float, list[str]]]) -> list[tuple[float, float]]:
    """(the transaction's time, the pause after it before the next) for consecutive transactions."""
    return [(end - start, after - end) for (start, end, _), (after, _, _) in itertools.pairwise(spans)]


async def test_heavy_lanes_pause_while_contended_and_not_alone(db: Database) -> None:
    """Heavy lanes at a duty of 0.5: acme's 24-envelope batch alone (heavy: weight >= 2, slices of 4) runs its six
    transactions back to back; the same batch while initech submits too pauses after each heavy transaction at least
    about as long as it took (without the duty, as before, the pauses were as short as alone)."""
    gateway = TimingGateway(db)
    gateway.spans = []
    committer = GroupCommitter(
        gateway, workers=1, max_events=500, tenant_events=4, contended_events=4, heavy_weight=2, heavy_duty=0.5
    )
    committer.start()
    try:
        await committer.submit(_batch("acme", "alone", 24))
        alone = _gaps(gateway.spans)
        gateway.spans.clear()
        await committer.submit(_batch("initech", "c", 1))
        gateway.spans.clear()
        await committer.submit(_batch("acme", "shared", 24))
        shared = _gaps(gateway.spans)
    finally:
        await committer.stop()
    assert len(alone) == len(shared) == 5
    assert all(pause >= 0.8 * took for took, pause in shared), shared
    assert sum(p for _, p in alone) < sum(p for _, p in shared), (alone, shared)
