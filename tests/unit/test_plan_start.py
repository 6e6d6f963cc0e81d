"""A plan's start decided by the fold (nexus.core.decide.plan_start): ORDER_EXISTS whenever the tenant knows
the order in any way. Pure."""

from __future__ import annotations

import itertools

from nexus.core.decide.plan_start import OrderKnown, start_refusal
from nexus.errors import ErrorCode


def test_a_plan_starts_only_for_an_order_nobody_knows() -> None:
    """Every combination of order row, buffered step and started plan: ORDER_EXISTS unless none is there."""
    for order, buffered, plan in itertools.product((False, True), repeat=3):
        expected = ErrorCode.ORDER_EXISTS if (order or buffered or plan) else None
        assert start_refusal(OrderKnown(order, buffered, plan)) is expected
