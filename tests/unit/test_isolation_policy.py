"""The one isolation policy of a failed batch (nexus.core.decide.isolation): its split, what an isolated item
becomes, and its bounded log lines. Pure."""

from __future__ import annotations

from nexus.core.decide.isolation import MAX_LOGGED_TEXT, isolated, isolation_line, order_groups, unstored
from nexus.core.decide.items import Incoming
from nexus.errors import ErrorCode, PermanentDatabaseError
from nexus_wire.codes import Decision
from tests.factories import step_json


def test_a_failed_batch_splits_by_order_keeping_the_items_order() -> None:
    """One group per order (unparsed items together), each in the items' order, groups by first item."""
    items = [
        Incoming.parse(step_json("a", "p", 1)),
        Incoming.parse("not json"),
        Incoming.parse(step_json("b", "p", 1)),
        Incoming.parse(step_json("a", "p", 2)),
    ]
    assert order_groups(items) == [[0, 3], [1], [2]]


def test_an_isolated_item_keeps_its_payload_and_order() -> None:
    """An item refused alone becomes an unparsed item with the refusal's code, its input and its envelope kept."""
    item = Incoming.parse(step_json("o-1", "p", 1))
    dead = isolated(item, PermanentDatabaseError("the database rejected the operation"))
    assert dead.envelope is None and dead.raw == item.raw and dead.refused == item.envelope
    assert dead.error is not None and dead.error.code is ErrorCode.DATABASE_REJECTED
    assert isolated(dead, ValueError("again")).refused == item.envelope


def test_an_unstorable_item_is_a_database_rejected_dead_letter() -> None:
    """An item whose dead letter is refused too is answered DEAD_LETTER DATABASE_REJECTED, nothing stored."""
    item = Incoming.parse(step_json("o-1", "p", 1))
    outcome = unstored(item)
    assert (outcome.event_id, outcome.decision, outcome.code) == (
        item.event_id,
        Decision.DEAD_LETTER,
        ErrorCode.DATABASE_REJECTED,
    )
    assert outcome.dead_letter_id is None


def test_a_log_line_is_bounded_whatever_the_error() -> None:
    """The line of an isolated item names its order and cuts the error's and its cause's text."""
    item = Incoming.parse(step_json("o-1", "p", 1))
    exc = PermanentDatabaseError("x" * 10_000)
    exc.__cause__ = ValueError("y" * 10_000)
    line = isolation_line(item, None, exc)
    assert line["order_id"] == "o-1" and line["code"] == "DATABASE_REJECTED"
    assert len(line["error"]) <= MAX_LOGGED_TEXT + 3 and len(line["cause"]) <= MAX_LOGGED_TEXT + 3
