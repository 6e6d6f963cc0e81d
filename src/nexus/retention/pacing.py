"""The remover's pace (NEXUS_RETENTION_DUTY): it works a share d of its time through a backlog and leaves the rest
to the hot path. After a batch that took t seconds it pauses t*(1-d)/d: the pause follows the batch's own time,
so a batch slowed by a busy machine is followed by a longer pause (the remover backs off as load rises)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable

PAUSE_MIN_S = 0.05
"""The shortest pause after a batch (d < 1): a batch of a few orders does not make the remover spin."""
PAUSE_MAX_S = 10.0
"""The longest pause after a batch: a batch slowed by a lock or a stall does not stop the remover for minutes."""


def pause_after(busy_s: float, duty: float) -> float:
    """The pause after a batch that took `busy_s` seconds, for the remover to work the share `duty` of its time;
    0 at duty 1 (full speed)."""
    if duty >= 1:
        return 0.0
    return min(PAUSE_MAX_S, max(PAUSE_MIN_S, busy_s * (1 - duty) / duty))


@dataclasses.dataclass(frozen=True, slots=True)
class Batch:
    """One paced batch: what it removed, how long it took and how long the remover paused after it."""

    removed: int
    busy_s: float
    pause_s: float


async def paced(step: Callable[[], Awaitable[int]], duty: float) -> list[Batch]:
    """`step` (one bounded batch; how much it removed) run until it removes nothing, each batch that removed
    something followed by its pause; the batches."""
    batches: list[Batch] = []
    while True:
        started = time.monotonic()
        removed = await step()
        if not removed:
            return batches
        busy = time.monotonic() - started
        batches.append(Batch(removed, busy, pause_after(busy, duty)))
        if batches[-1].pause_s:
            await asyncio.sleep(batches[-1].pause_s)
