"""Quotas on what a tenant stores: what a request could add, and whether that goes beyond a quota.

A request is refused as a whole (429 QUOTA_EXCEEDED, nothing written) when, for some quota with a limit
(0: none), it could add at least one row and `used + worth > limit`. Its worth is an upper bound known
before anything is decided:

| quota           | a request's worth                                                                  |
|-----------------|------------------------------------------------------------------------------------|
| live_orders     | orders it names with a numbered step that the tenant does not store yet            |
| unstarted_plans | 1 for a plan started (`POST /v1/plans`, MCP `start_plan`)                           |
| buffered_steps  | its steps beyond a gap: above `last_seq + 1` once its own steps fill what they can  |
| dead_letters    | its items already known bad (a dead letter each), and at least 1 for any step       |
| active_keys     | 1 for a key bound to one tenant                                                    |

So a tenant at its buffered quota can still send the missing step (it adds nothing to the buffer, and
drains it), and a tenant at its dead-letter quota is refused every step until some are removed.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping


@dataclasses.dataclass(frozen=True, slots=True)
class StepRef:
    """What a request's item says of its order: its id, and its seq_id (None: ABORT_PLAN, REPLAN, or a step
    the server numbers)."""

    order_id: str
    seq_id: int | None


class Quota(enum.StrEnum):
    """The quotas, by their public names (the error body's `quota`, the gauges' label)."""

    LIVE_ORDERS = "live_orders"
    UNSTARTED_PLANS = "unstarted_plans"
    BUFFERED_STEPS = "buffered_steps"
    DEAD_LETTERS = "dead_letters"
    ACTIVE_KEYS = "active_keys"


def steps_worth(steps: Iterable[StepRef], last_seqs: Mapping[str, int], bad_items: int) -> dict[Quota, int]:
    """The worth of a batch of steps: `last_seqs` holds the last applied seq of each named order the tenant
    stores (absent: none stored); `bad_items` counts its items that are dead letters already."""
    seqs: dict[str, set[int]] = {}
    any_item = bad_items > 0
    for step in steps:
        any_item = True
        if step.seq_id is not None:
            seqs.setdefault(step.order_id, set()).add(step.seq_id)
    buffered = new_orders = 0
    for order_id, numbers in seqs.items():
        last = last_seqs.get(order_id)
        new_orders += last is None
        following = (last or 0) + 1
        for seq in sorted(numbers) if len(numbers) > 1 else numbers:
            if seq == following:
                following += 1
            elif seq > following:
                buffered += 1
    return {
        Quota.LIVE_ORDERS: new_orders,
        Quota.BUFFERED_STEPS: buffered,
        Quota.DEAD_LETTERS: max(bad_items, 1) if any_item else 0,
    }


def numbered_step_worth(order_stored: bool) -> dict[Quota, int]:
    """A step the server numbers: never buffered; a new order when the plan has no order row yet."""
    return {Quota.LIVE_ORDERS: 0 if order_stored else 1, Quota.DEAD_LETTERS: 1}


def beyond(used: Mapping[Quota, int], limits: Mapping[Quota, int], worth: Mapping[Quota, int]) -> Quota | None:
    """The first quota (in `Quota`'s order) the request would exceed, or None."""
    for quota in Quota:
        adds = worth.get(quota, 0)
        limit = limits.get(quota, 0)
        if adds > 0 and limit > 0 and used.get(quota, 0) + adds > limit:
            return quota
    return None


def refusal_message(quota: Quota, used: int, limit: int) -> str:
    """The QUOTA_EXCEEDED message: which quota, how much is stored and what the limit is."""
    return (
        f"tenant quota {quota.value} reached ({used} stored, limit {limit}): nothing was written; "
        "remove or finish some first, or ask an admin for a higher quota (nexus tenants set-limit)"
    )
