"""When an order is finished: decided here, with the batch's fold; the store only writes `finished_at` from it
(gateway.sql `write_batch`, migration 0043). A finished order counts out of `live_orders` and its retention
period starts (docs/retention.md).

| the order after its batch                                             | finished |
|-----------------------------------------------------------------------|----------|
| tombstoned, or `aborted`                                              | yes      |
| a terminal state of its process (its definition's `terminal`)         | yes      |
| `completed`, its process (that name and version) not in the catalog   | yes      |
| finished before the batch                                             | yes: an order never unfinishes |
| otherwise (live, or never written)                                    | no       |

The time it finished stays the database's: `write_batch` stamps `now()` the first time the flag is set and keeps
it afterwards. Pure: no I/O.
"""

from __future__ import annotations

from nexus.core.definitions import DEFAULT_PROCESS
from nexus.core.order_state import OrderState, Resolution
from nexus.core.process_model import ABORTED, ProcessCatalog

__all__ = ["UNKNOWN_PROCESS_TERMINAL", "finished", "is_finished"]

UNKNOWN_PROCESS_TERMINAL = "completed"
"""The one status that finishes an order whose process the catalog does not hold."""


def is_finished(state: OrderState, catalog: ProcessCatalog | None) -> bool:
    """Whether the order in `state` is finished by the table above (its own row only, not its history)."""
    if state.status is None:
        return False
    if state.tombstone or state.status == ABORTED:
        return True
    process = catalog.get(state.process or DEFAULT_PROCESS, state.process_version or 1) if catalog else None
    if process is None:
        return state.status == UNKNOWN_PROCESS_TERMINAL
    return process.is_terminal(state.status)


def finished(resolution: Resolution, catalog: ProcessCatalog | None) -> bool:
    """Whether the order is finished once its batch is folded: finished now, or already before."""
    return is_finished(resolution.after, catalog) or is_finished(resolution.before, catalog)
