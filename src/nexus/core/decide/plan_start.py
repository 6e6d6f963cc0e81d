"""A plan's start as a command (`POST /v1/plans`, MCP `start_plan`): decided under the order's lock from what
the tenant already knows of the order.

| what the tenant knows of the order (read under its lock)   | decision                               |
|------------------------------------------------------------|----------------------------------------|
| nothing: no order row, no buffered step, no started plan,  | started: the plan row is written       |
| no removal marker                                          |                                        |
| an order row (applied, tombstoned), a buffered step, a     | refused ORDER_EXISTS (409), nothing    |
| started plan (one started earlier in the same batch too),  | written                                |
| or a removal marker (`decide/removed.py`)                  |                                        |

A removed order's marker (kept NEXUS_REMOVED_ORDER_MEMORY_S after its removal) answers as the order did:
a plan started under its id would have no step the marker lets apply (its steps are DUPLICATE or DISCARD
ORDER_REMOVED), so the start is refused as for an existing order. Once the marker is gone the id is free.

`plan_batch` folds a batch's starts (`starts`) in their order with `fold_starts`.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence

from nexus.errors import ErrorCode


@dataclasses.dataclass(frozen=True, slots=True)
class PlanStart:
    """The command: start plan `plan_id` of `process` for a new order of `tenant_id`."""

    tenant_id: str
    order_id: str
    plan_id: str
    process: str
    deadline_at: dt.datetime | None
    actor: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class OrderKnown:
    """What the tenant knows of the order, read under its lock (by default: nothing)."""

    order: bool = False
    buffered: bool = False
    plan: bool = False
    removed: bool = False
    """A removal marker of the order (`decide/removed.py`): it was removed after its retention period."""


def start_refusal(known: OrderKnown) -> ErrorCode | None:
    """ORDER_EXISTS when the tenant knows the order in any way (the table above); None: start it."""
    if known.order or known.buffered or known.plan or known.removed:
        return ErrorCode.ORDER_EXISTS
    return None


def fold_starts(
    starts: Sequence[PlanStart], known: Mapping[tuple[str, str], OrderKnown]
) -> tuple[tuple[PlanStart, ...], tuple[ErrorCode | None, ...]]:
    """A batch's plan starts in their order: the plans to write, and each start's refusal (None: started);
    a started plan is known to the starts after it."""
    knowing = dict(known)
    started: list[PlanStart] = []
    refusals: list[ErrorCode | None] = []
    for start in starts:
        key = (start.tenant_id, start.order_id)
        refusal = start_refusal(knowing.get(key, OrderKnown()))
        refusals.append(refusal)
        if refusal is None:
            started.append(start)
            knowing[key] = dataclasses.replace(knowing.get(key, OrderKnown()), plan=True)
    return tuple(started), tuple(refusals)
