"""Processing slots (issue 34: C's p99 under A's load): at most N requests worked on at once, the waiting
granted by deficit round robin over their tenants, a slot given back when its request starts to wait."""

from __future__ import annotations

import asyncio

import pytest

from nexus.auth.slots import COST_BYTES, ProcessingSlots, cost_of, give_back_slot, processing


async def queued(slots: ProcessingSlots, requests: list[tuple[str, int]], order: list[str]) -> list[asyncio.Task[None]]:
    """Tasks each waiting for a slot for (tenant, cost) in turn, appending its tenant to `order` when granted
    and holding the slot until cancelled or done; returned once every one waits."""

    async def one(tenant: str, cost: int) -> None:
        async with processing(slots, tenant, cost):
            order.append(tenant)
            await asyncio.sleep(0)

    tasks = []
    for tenant, cost in requests:
        tasks.append(asyncio.create_task(one(tenant, cost)))
        await asyncio.sleep(0)  # queued in this order
    return tasks


async def test_a_slot_is_granted_at_once_while_one_is_free() -> None:
    """With a slot free and nobody waiting a request holds one at once; at the cap the next one waits."""
    slots = ProcessingSlots(2)
    first, second = await slots.acquire("acme"), await slots.acquire("acme")
    assert slots.free == 0
    third = asyncio.create_task(slots.acquire("acme"))
    await asyncio.sleep(0)
    assert not third.done() and slots.waiting("acme") == 1
    first.release()
    first.release()  # a second release frees nothing more
    assert (await third).held and slots.free == 0
    second.release()
    assert slots.free == 1


async def test_another_tenants_request_takes_the_next_slot_before_a_backlog() -> None:
    """acme's four queued requests and then globex's one, one slot: globex's is granted second, not fifth."""
    slots = ProcessingSlots(1)
    held = await slots.acquire("acme")
    order: list[str] = []
    tasks = await queued(slots, [("acme", 1)] * 4 + [("globex", 1)], order)
    held.release()
    await asyncio.gather(*tasks)
    assert order == ["acme", "globex", "acme", "acme", "acme"]


async def test_the_turns_are_weighted_by_cost() -> None:
    """acme's requests costing 4 units against globex's costing 1: globex gets about four grants per acme's."""
    slots = ProcessingSlots(1)
    held = await slots.acquire("acme")
    order: list[str] = []
    tasks = await queued(slots, [("acme", 4)] * 2 + [("globex", 1)] * 8, order)
    held.release()
    await asyncio.gather(*tasks)
    assert order[:6] == ["globex"] * 3 + ["acme"] + ["globex"] * 2, order
    assert order.count("acme") == 2 and order.count("globex") == 8


async def test_a_waiter_cancelled_leaves_the_queue_and_no_slot_is_lost() -> None:
    """A request cancelled while waiting (its client gone) leaves the queue; the slot still goes to the next."""
    slots = ProcessingSlots(1)
    held = await slots.acquire("acme")
    gone = asyncio.create_task(slots.acquire("acme"))
    after = asyncio.create_task(slots.acquire("globex"))
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert slots.waiting() == 1
    held.release()
    (await after).release()
    assert slots.free == 1 and slots.waiting() == 0


async def test_giving_the_slot_back_lets_the_next_request_in_while_the_block_goes_on() -> None:
    """`give_back_slot` inside `processing` frees the slot at once (the request now waits, not works); the block's
    end frees nothing more."""
    slots = ProcessingSlots(1)
    order: list[str] = []
    waiting = asyncio.Event()

    async def long_poll() -> None:
        async with processing(slots, "acme"):
            give_back_slot()
            waiting.set()
            await asyncio.sleep(0.05)
            order.append("poll answered")

    poll = asyncio.create_task(long_poll())
    await waiting.wait()
    async with processing(slots, "globex"):
        order.append("globex served")
    await poll
    assert order == ["globex served", "poll answered"] and slots.free == 1


async def test_no_slots_means_every_request_runs_at_once() -> None:
    """`NEXUS_PROCESSING_SLOTS=0` (or no slots object): `processing` holds nothing and never waits."""
    for slots in (ProcessingSlots(0), None):
        async with processing(slots, "acme"), processing(slots, "acme"):
            give_back_slot()


def test_a_requests_cost_grows_with_its_body() -> None:
    """One unit, plus one per COST_BYTES of body."""
    assert [cost_of(0), cost_of(COST_BYTES - 1), cost_of(COST_BYTES), cost_of(10 * COST_BYTES)] == [1, 1, 2, 11]


async def test_at_once_grants_only_a_free_slot_nobody_waits_for() -> None:
    """`at_once` holds a free slot while nobody waits, and gives None (taking nothing) at the cap or while
    another request waits, even once a slot is free again: the waiting one is served first."""
    slots = ProcessingSlots(1)
    held = slots.at_once("acme")
    assert held is not None and held.held and slots.free == 0
    assert slots.at_once("acme") is None
    waiter = asyncio.create_task(slots.acquire("other"))
    await asyncio.sleep(0)
    slots._free += 1  # a slot free while "other" still waits (as between a release and its dispatch)
    assert slots.at_once("acme") is None and slots.free == 1
    slots._free -= 1
    held.release()
    assert (await waiter).held and slots.free == 0
