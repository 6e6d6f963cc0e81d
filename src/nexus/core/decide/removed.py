"""A step for an order removed after its retention period, decided from its removal marker.

The marker (table removed_orders, kept NEXUS_REMOVED_ORDER_MEMORY_S) keeps the order's plan, final status and
last_seq; the gateway reads it when the order's row is absent (`OrderState.removed`), and nothing else of
the order is left to decide with. The table, in order:

| step                                                        | decision  | code          |
|-------------------------------------------------------------|-----------|---------------|
| the order's own plan, seq_id <= last_seq                    | DUPLICATE |               |
| the order's own plan, ABORT_PLAN                            | DUPLICATE |               |
| any other step (later seq, REPLAN, another plan, a new      | DISCARD   | ORDER_REMOVED |
| first step for the same order id)                           |           |               |

Safe: a removed order was finished (completed, aborted or tombstoned), so on its row every step at or below
last_seq of its plan was a DUPLICATE, an abort of a finished order a DUPLICATE, and no later step could apply
(AFTER_TERMINAL or DISCARD): nothing the marker answers would have written a notification. A step that would
have been REJECTED AFTER_TERMINAL is DISCARD ORDER_REMOVED instead (its verdict is not kept). An order id
cannot start again while its marker lives: its first step is DUPLICATE (same plan) or DISCARD (another).

Pure: no I/O.
"""

from __future__ import annotations

from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.errors import ErrorCode
from nexus_wire.codes import Decision


def decide_removed(state: OrderState, event: EventEnvelope) -> Decision:
    """The table above for one step of a removed order (`state.removed`)."""
    if event.plan_id == state.plan_id:
        if event.is_abort:
            return Decision.DUPLICATE
        if event.seq_id is not None and event.seq_id <= state.last_seq:
            return Decision.DUPLICATE
    return Decision.DISCARD


def removed_code(decision: Decision, state: OrderState) -> ErrorCode | None:
    """ORDER_REMOVED for a DISCARD answered from a removal marker."""
    return ErrorCode.ORDER_REMOVED if state.removed and decision is Decision.DISCARD else None
