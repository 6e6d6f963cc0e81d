"""Why an item the database refused is dead-lettered alone: its code and the words its sender sees (never
the driver's text). The one isolation policy of a failed batch (`isolation.py`) splits it; this decides the answer.

| refusal                                                   | code                 | message                   |
|-----------------------------------------------------------|----------------------|---------------------------|
| a unique key on a step's event_id (another step uses it)  | INVALID_EVENT        | event_id is already used  |
|                                                           |                      | by another step           |
| any other permanent refusal of the database               | the error's code     | `<what was refused>: the  |
|                                                           |                      | item cannot be stored`    |
| anything else (e.g. a value that cannot be serialized)    | DATABASE_REJECTED    | the item cannot be        |
|                                                           |                      | serialized or stored      |

Pure: no I/O.
"""

from __future__ import annotations

from nexus.errors import ErrorCode, InvalidEventError, PermanentDatabaseError

EVENT_ID_CONSTRAINTS = frozenset({"outbox_pkey", "outbox_event_id_key", "pending_events_event_id_key"})
"""Unique keys on a step's event_id: a second step reusing an event_id hits one of them."""


def refusal(exc: Exception) -> InvalidEventError:
    """The dead letter's error for an item refused with `exc` (the table above)."""
    if isinstance(exc, PermanentDatabaseError):
        if exc.constraint in EVENT_ID_CONSTRAINTS:
            return InvalidEventError("event_id is already used by another step", code=ErrorCode.INVALID_EVENT)
        return InvalidEventError(f"{exc.message}: the item cannot be stored", code=exc.code)
    return InvalidEventError("the item cannot be serialized or stored", code=ErrorCode.DATABASE_REJECTED)
