"""A plan's end as a command (`POST /v1/orders/{id}/abort` and `.../replan`, MCP `abort_plan` and `replan`):
the step is completed in the fold from the order's state read under its lock, never from a read taken before.

| state read under the order's lock    | the ABORT_PLAN (abort code `manual`) or REPLAN the fold decides           |
|--------------------------------------|---------------------------------------------------------------------------|
| a live order                         | of the order's live plan; an abort's `aborted_at_seq` is its `last_seq`   |
| a plan started with no step yet      | of the started plan (an abort: TOMBSTONE, as `position.py` decides)        |
| an order aborted or terminal         | of the order's plan (then DUPLICATE, as `position.py` and `replan.py` say) |

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState


@dataclasses.dataclass(frozen=True, slots=True)
class PlanEnd:
    """An item that ends its order's plan: an ABORT_PLAN or REPLAN whose plan id (and an abort's
    `aborted_at_seq`) are placeholders the fold fills from the order's state (`ended_envelope`)."""

    replan: bool = False


def ended_envelope(envelope: EventEnvelope, state: OrderState, started_plan_id: str | None) -> EventEnvelope:
    """The end as the step it is: the order's live plan (else the started plan's), and an abort's position."""
    update: dict[str, Any] = {}
    plan_id = state.plan_id or started_plan_id
    if plan_id is not None:
        update["plan_id"] = plan_id
    if envelope.is_abort:
        update["data"] = {**envelope.data, "aborted_at_seq": state.last_seq}
    return envelope.model_copy(update=update)
