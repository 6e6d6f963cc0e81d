"""The one isolation policy of a failed batch, whatever door it came by (HTTP `/v1/events`, the steps API,
MCP, Kafka): how the batch is split and what a request it isolates becomes. `Gateway.submit` drives it.

| stage            | what is submitted                        | if it still fails (permanently)              |
|------------------|------------------------------------------|----------------------------------------------|
| the batch        | every item, one transaction              | split by order (`order_groups`)              |
| one order        | the order's items, one transaction       | each of its items alone, in order            |
| one item         | the item alone                           | `isolated`: the item as a dead letter        |
| its dead letter  | the refused item, payload and order kept | `unstored`: DEAD_LETTER DATABASE_REJECTED,   |
|                  |                                          | nothing stored (Kafka: its DLQ topic holds it) |

An isolated request costs one dead letter (its payload and order id kept, so `nexus dlq` and the redrive
API can send it again) and one bounded log line (`isolation_line`): no traceback per request; the batch's
failure is one warning line, its traceback at most once, at debug. Codes and words: `refusals.py`.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from nexus.core.decide.answers import Outcome
from nexus.core.decide.items import Incoming, order_key
from nexus.core.decide.refusals import refusal
from nexus.errors import ErrorCode, InvalidEventError
from nexus_wire.codes import Decision

MAX_LOGGED_TEXT = 200
"""The most characters of an error's text (or its cause's) a log line of the isolation carries."""

UNSTORED_MESSAGE = "the item cannot be serialized or stored"


def order_groups(items: Sequence[Incoming]) -> list[list[int]]:
    """The indexes of a failed batch's items, one group per order (items with no envelope: one group), each
    in the items' order; the groups in the order of their first item."""
    groups: dict[tuple[str, str] | None, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        groups[order_key(item.envelope) if item.envelope is not None else None].append(i)
    return list(groups.values())


def isolated(item: Incoming, exc: Exception) -> Incoming:
    """What an item the database refused alone becomes: an unparsed item (a dead letter in the fold) whose
    error is the refusal's code and words, keeping its input (the payload) and its envelope's order, plan and
    tenant (`refused`)."""
    return dataclasses.replace(item, envelope=None, error=refusal(exc), refused=item.envelope or item.refused)


def unstored(item: Incoming) -> Outcome:
    """The answer of an item whose dead letter the database refuses too: DEAD_LETTER DATABASE_REJECTED, with
    no dead-letter row (Kafka's door produces it to the DLQ topic as any dead letter)."""
    return Outcome(item.event_id, Decision.DEAD_LETTER, ErrorCode.DATABASE_REJECTED, UNSTORED_MESSAGE)


def bounded(text: str) -> str:
    """`text` cut to `MAX_LOGGED_TEXT` characters (a log line never carries a request's whole input)."""
    return text if len(text) <= MAX_LOGGED_TEXT else text[:MAX_LOGGED_TEXT] + "..."


def isolation_line(item: Incoming, error: InvalidEventError | None, exc: Exception) -> dict[str, Any]:
    """The `extra` of the one log line of an isolated request: what it was, what it became, why (bounded)."""
    env = item.envelope or item.refused
    return {
        "action": "isolate_item",
        "event_id": bounded(item.event_id or ""),
        "order_id": env.order_id if env else None,
        "tenant_id": env.tenant_id if env else item.tenant_id,
        "code": (error.code if error else ErrorCode.DATABASE_REJECTED).value,
        "error": bounded(str(exc)),
        "cause": bounded(repr(exc.__cause__)) if exc.__cause__ is not None else None,
    }


def batch_line(size: int, exc: Exception) -> dict[str, Any]:
    """The `extra` of the one warning line of a failed batch (its traceback: at debug, once)."""
    return {"action": "isolate", "items": size, "error": bounded(str(exc)), "error_type": type(exc).__name__}
