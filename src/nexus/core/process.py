"""The built-in process: an e-commerce order, its steps in order and the status each step leaves."""

from __future__ import annotations

import enum


class EventType(enum.StrEnum):
    ORDER_CREATED = "OrderCreated"
    INVENTORY_VALIDATED = "InventoryValidated"
    PAYMENT_PROCESSED = "PaymentProcessed"
    ORDER_SHIPPED = "OrderShipped"
    ORDER_COMPLETED = "OrderCompleted"
    ABORT_PLAN = "ABORT_PLAN"


class OrderStatus(enum.StrEnum):
    CREATED = "created"
    INVENTORY_VALIDATED = "inventory_validated"
    PAYMENT_PROCESSED = "payment_processed"
    SHIPPED = "shipped"
    COMPLETED = "completed"
    ABORTED = "aborted"

    @property
    def terminal(self) -> bool:
        return self in (OrderStatus.COMPLETED, OrderStatus.ABORTED)


class AbortCode(enum.StrEnum):
    INVENTORY_FAILED = "inventory_failed"
    PAYMENT_REJECTED = "payment_rejected"
    TIMEOUT = "timeout"
    MANUAL = "manual"


# The steps of the order process, by position (seq_id), and the status each one leaves the order in.
STEPS: tuple[EventType, ...] = (
    EventType.ORDER_CREATED,
    EventType.INVENTORY_VALIDATED,
    EventType.PAYMENT_PROCESSED,
    EventType.ORDER_SHIPPED,
    EventType.ORDER_COMPLETED,
)
STATUS_AFTER: dict[EventType, OrderStatus] = {
    EventType.ORDER_CREATED: OrderStatus.CREATED,
    EventType.INVENTORY_VALIDATED: OrderStatus.INVENTORY_VALIDATED,
    EventType.PAYMENT_PROCESSED: OrderStatus.PAYMENT_PROCESSED,
    EventType.ORDER_SHIPPED: OrderStatus.SHIPPED,
    EventType.ORDER_COMPLETED: OrderStatus.COMPLETED,
    EventType.ABORT_PLAN: OrderStatus.ABORTED,
}
LAST_SEQ = len(STEPS)


def seq_of(event_type: EventType) -> int | None:
    """The position of a step in the process, from 1; None for ABORT_PLAN, which has no position."""
    if event_type is EventType.ABORT_PLAN:
        return None
    return STEPS.index(event_type) + 1
