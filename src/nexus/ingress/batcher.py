"""Group commit: concurrent requests share transactions, each answered with its own outcomes.

Orders are partitioned by hash across a few workers, so two shared transactions never wait on each
other's advisory locks. A worker takes what is queued for its partition (up to `max_events`, optionally
waiting `window_ms` for more), submits it as one batch and splits the outcomes back.

Fair between tenants: a worker keeps one queue per tenant and fills a transaction by going once round the
tenants with work waiting, taking at most a share of `tenant_events` items from each (the next transaction
starting after the last tenant served), and a request larger than a share is cut into slices of that size that
go into successive transactions, in order. A transaction therefore holds at most `tenant_events` items of any one
tenant, even when that tenant alone is waiting: one tenant's 1,000-envelope batches delay another tenant's single
step by the transaction in flight when it arrives and its own (each at most one share of the busy tenant), not by
every batch queued before it nor by transactions of `max_events` of the busy tenant's items. A share counts
items by their weight (`weight_of`: one, plus one per 16 elements of their lists), so a transaction holds at
most one of a tenant's 1,000-line steps, not 64, and another tenant's step shares its fold with one. A request's slices
keep its items' order (one tenant's queue is FIFO, and a worker runs its transactions one after another); a
request whose slices span transactions is answered once all of them are decided, and fails if one of them fails
(a transient failure is retried whole by its caller, its already-decided steps answered DUPLICATE).

A smaller share while shared: while two or more tenants submitted within the last second (`RecentTenants`), the
share is `contended_events` (`NEXUS_BATCH_TENANT_EVENTS_CONTENDED`, 16) instead of `tenant_events`, for the
slices of a large request and for what a transaction takes of each tenant. Another tenant's commit then waits for
the WAL of at most that much of the busy tenant's work, and the busy tenant's folds hold the interpreter in shorter
pieces (measured: C's p99 under A's 1,000-envelope batches 3.8x -> 2.2x of its baseline, benchmarks/RESULTS.md
"Round 20"); a tenant alone keeps the larger share and its throughput.

Heavy requests in lanes of their own: with `heavy_weight` > 0 (`NEXUS_FOLD_THREAD_WEIGHT`), a request weighing at
least that much (a slice of a large batch, a 1,000-line step) goes to a second set of workers, partitioned alike,
whose transactions are folded on the fold thread (`nexus.fold_thread`). Light requests (single steps) never share
a transaction with a heavy one nor wait for a heavy transaction in flight: their own transactions go on in the
event loop while the heavy fold runs on the thread. All of one request's slices take the same lane, so its
items keep their order. Two lanes may hold the same order at once: its advisory lock serializes them (both
lock in key order, so they never deadlock), and the fold orders its steps by sequence whatever arrives first.
A heavy lane's transactions take their connections from the heavy pool (`nexus.store.lanes`,
`NEXUS_HEAVY_DB_CONNECTIONS`): at most that many heavy transactions are open in PostgreSQL at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import zlib
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from nexus import metrics
from nexus.auth.slots import give_back_slot
from nexus.core.decide.answers import Outcome
from nexus.core.decide.items import Incoming
from nexus.core.decide.plan_start import PlanStart
from nexus.errors import ErrorCode
from nexus.fold_thread import weight_of
from nexus.gateway import Gateway
from nexus.store.lanes import HEAVY_LANE
from nexus.store.recent import RecentTenants

MAX_PAUSE_S = 1.0
"""The longest pause of the heavy lanes after one transaction while contended."""


@dataclasses.dataclass(slots=True)
class _Request:
    items: list[Any]
    """Incoming items (a step's, a batch's slice), or one PlanStart."""
    future: asyncio.Future[list[Any]]
    weight: int = 0

    def __post_init__(self) -> None:
        items = self.items
        if not self.weight:
            self.weight = weight_of(items[0]) if len(items) == 1 else sum(weight_of(item) for item in items)


def tenant_of(item: Incoming) -> str:
    return item.envelope.tenant_id if item.envelope is not None else item.tenant_id


_Decide = Callable[[list[Any]], Awaitable[list[Any]]]
"""What a lane runs over a transaction's items: `Gateway.submit` (steps) or `Gateway.start_plans`."""


class _TenantQueues:
    """One worker's queue: FIFO per tenant, served round robin; `wait` wakes when anything arrives."""

    def __init__(self) -> None:
        self._by_tenant: dict[str, collections.deque[_Request]] = {}
        self._ring: collections.deque[str] = collections.deque()
        self._arrived = asyncio.Event()

    def put(self, tenant: str, request: _Request) -> None:
        queue = self._by_tenant.get(tenant)
        if queue is None:
            queue = self._by_tenant[tenant] = collections.deque()
            self._ring.append(tenant)
        queue.append(request)
        self._arrived.set()

    def __bool__(self) -> bool:
        return bool(self._ring)

    def take(self, room: int, share: int, taken: dict[str, int]) -> list[_Request]:
        """Requests for a transaction with `room` items left: once round the tenants waiting, in turn, each
        adding requests while the weight of its items in the transaction (`taken`, updated; `weight_of`) stays
        within `share` (its first request always, if the transaction is empty). Tenants served go to the back of
        the turn; a tenant not reached (the transaction full) keeps its place for the next."""
        batch: list[_Request] = []
        count = 0
        for _ in range(len(self._ring)):
            tenant = self._ring[0]
            queue = self._by_tenant[tenant]
            mine = taken.get(tenant, 0)
            if count + len(queue[0].items) > room and (batch or taken):
                break
            self._ring.popleft()
            while queue and (not mine or mine + queue[0].weight <= share):
                if count + len(queue[0].items) > room and (batch or taken):
                    break
                request = queue.popleft()
                batch.append(request)
                count += len(request.items)
                mine += request.weight
            taken[tenant] = mine
            if queue:
                self._ring.append(tenant)
            else:
                del self._by_tenant[tenant]
        if not self._ring:
            self._arrived.clear()
        return batch

    async def wait(self) -> None:
        await self._arrived.wait()


class GroupCommitter:
    """Shares `Gateway.submit` transactions between concurrent callers."""

    def __init__(
        self,
        gateway: Gateway,
        *,
        workers: int = 4,
        max_events: int = 500,
        window_ms: float = 0.0,
        tenant_events: int = 64,
        contended_events: int = 16,
        heavy_weight: int = 0,
        heavy_duty: float = 1.0,
    ) -> None:
        self.gateway = gateway
        self.max_events = max_events
        self.window_s = window_ms / 1000.0
        self.slice = max(1, min(tenant_events, max_events))
        self.contended = max(1, min(contended_events, self.slice))
        self._seen = RecentTenants()  # the tenants that submitted: two or more within a second, contended
        self.heavy_weight = heavy_weight
        self.heavy_duty = min(1.0, max(0.05, heavy_duty))
        self._heavy_resume = 0.0  # the heavy lanes' next transaction starts no sooner (the loop's clock)
        self._queues: list[_TenantQueues] = [_TenantQueues() for _ in range(max(1, workers))]
        self._heavy: list[_TenantQueues] = [_TenantQueues() for _ in self._queues] if heavy_weight > 0 else []
        self._starts: list[_TenantQueues] = [_TenantQueues() for _ in self._queues]
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        submit: _Decide = self.gateway.submit
        starts: _Decide = self.gateway.start_plans
        lanes = [(f"group-commit-{i}", q, False, submit) for i, q in enumerate(self._queues)]
        lanes += [(f"group-commit-heavy-{i}", q, True, submit) for i, q in enumerate(self._heavy)]
        lanes += [(f"group-commit-plans-{i}", q, False, starts) for i, q in enumerate(self._starts)]
        self._tasks = [asyncio.create_task(self._work(q, heavy, run), name=name) for name, q, heavy, run in lanes]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def _partition(self, item: Incoming) -> int:
        return self._partition_of(item.envelope.order_id if item.envelope is not None else "")

    def _partition_of(self, order_id: str) -> int:
        """The worker (of each set of lanes) an order's work goes to: two transactions never share an order."""
        return zlib.crc32(order_id.encode()) % len(self._queues)

    async def submit(self, items: Sequence[Incoming]) -> list[Outcome]:
        """Decide `items` in shared transactions; outcomes in the items' order."""
        if not items:
            return []
        if not self._tasks:
            return await self.gateway.submit(items)
        loop = asyncio.get_running_loop()
        tenant = tenant_of(items[0])
        self._seen.saw(tenant)
        if len(items) == 1:  # one event per request, the usual case: one partition, no gather
            give_back_slot()  # the request waits for its transaction now: its processing slot serves another
            return await self._put_one(loop, tenant, self._partition(items[0]), list(items))
        parts: dict[int, list[int]] = defaultdict(list)
        for i, item in enumerate(items):
            parts[self._partition(item)].append(i)
        give_back_slot()
        share = self._share()
        if len(parts) == 1 and len(items) <= share:  # one order's events, within one share: no gather
            (partition,) = parts
            return await self._put_one(loop, tenant, partition, list(items))
        requests: list[_Request] = []
        futures: list[tuple[list[int], asyncio.Future[list[Outcome]]]] = []
        for indexes in parts.values():
            for start in range(0, len(indexes), share):
                part = indexes[start : start + share]
                requests.append(_Request([items[i] for i in part], loop.create_future()))
                futures.append((part, requests[-1].future))
        heavy = self._heavy and sum(r.weight for r in requests) >= self.heavy_weight  # one lane for every slice
        for request in requests:
            (self._heavy if heavy else self._queues)[self._partition(request.items[0])].put(tenant, request)
        results: list[Outcome | None] = [None] * len(items)
        # Wait for every partition even if one fails, so no shared batch is left half-answered.
        done = await asyncio.gather(*(f for _, f in futures), return_exceptions=True)
        for (indexes, _), outcome in zip(futures, done, strict=True):
            if isinstance(outcome, BaseException):
                raise outcome
            for i, o in zip(indexes, outcome, strict=True):
                results[i] = o
        return [r for r in results if r is not None]

    async def start_plan(self, start: PlanStart) -> ErrorCode | None:
        """Start a plan in a shared transaction (`Gateway.start_plans`, the plan starts' lanes, fair between
        tenants as the steps' are): its refusal (ORDER_EXISTS), or None once started."""
        if not self._tasks:
            return await self.gateway.start_plan(start)
        loop = asyncio.get_running_loop()
        self._seen.saw(start.tenant_id)
        future: asyncio.Future[list[Any]] = loop.create_future()
        partition = self._partition_of(start.order_id)
        # The request keeps its processing slot while it waits (a step's gives it back): a plan start is cheap, so
        # the slots are what paces a tenant's flood of them (measured: RESULTS.md "Round 20").
        self._starts[partition].put(start.tenant_id, _Request([start], future, weight=1))
        refusal: ErrorCode | None = (await future)[0]
        return refusal

    def _share(self) -> int:
        """A tenant's share of a transaction now: `contended` while two or more tenants submitted within the last
        second, else `slice`."""
        return self.contended if self._seen.several() else self.slice

    def _put_one(
        self, loop: asyncio.AbstractEventLoop, tenant: str, partition: int, items: list[Incoming]
    ) -> asyncio.Future[list[Outcome]]:
        """Queue `items` (one partition's, within one share) as one request in its lane; its outcomes' future."""
        single: asyncio.Future[list[Outcome]] = loop.create_future()
        request = _Request(items, single)
        lanes = self._heavy if self._heavy and request.weight >= self.heavy_weight else self._queues
        lanes[partition].put(tenant, request)
        return single

    async def _work(self, queue: _TenantQueues, heavy: bool, run: _Decide) -> None:
        HEAVY_LANE.set(heavy)  # this task's transactions take the heavy pool's connections (nexus.store.lanes)
        loop = asyncio.get_running_loop()
        while True:
            await queue.wait()
            if heavy and self._heavy_resume > loop.time():  # paced while contended: the loop's turn first
                await asyncio.sleep(self._heavy_resume - loop.time())
            taken: dict[str, int] = {}
            share = self._share()
            batch = queue.take(self.max_events, share, taken)
            deadline = loop.time() + self.window_s
            while not queue and (events := sum(len(r.items) for r in batch)) < self.max_events:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    async with asyncio.timeout(remaining):
                        await queue.wait()
                except TimeoutError:
                    break
                batch += queue.take(self.max_events - events, share, taken)
            started = loop.time()
            await self._run(batch, run)
            if heavy and self.heavy_duty < 1.0 and self._seen.several():
                now = loop.time()
                pause = min(MAX_PAUSE_S, (now - started) * (1.0 - self.heavy_duty) / self.heavy_duty)
                self._heavy_resume = max(self._heavy_resume, now + pause)

    async def _run(self, batch: list[_Request], run: _Decide) -> None:
        """`run` (`Gateway.submit`, or `start_plans`) over the batch's items; each request answered its part."""
        items = [item for request in batch for item in request.items]
        metrics.HTTP_BATCH_SIZE.observe(len(items))
        try:
            outcomes = await run(items)
        except Exception as exc:  # noqa: BLE001 - every caller of the shared batch must hear of it
            for request in batch:
                if not request.future.done():
                    request.future.set_exception(exc)
            return
        start = 0
        for request in batch:
            end = start + len(request.items)
            if not request.future.done():
                request.future.set_result(outcomes[start:end])
            start = end
