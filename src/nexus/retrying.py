"""Sleeping a retry-in-place loop's waits: the schedule is nexus_wire/backoff.py's `Backoff`, the clock asyncio's.

One object per loop: `wait()` after a failure sleeps the next delay of the schedule, `reset()` after a
success starts it over. `sleep_until_set` is the sleep of every loop that waits to be woken or timed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import random

from nexus_wire.backoff import Backoff, RetryPolicy


class Retrying:
    """The waits of one retry loop."""

    def __init__(self, schedule: Backoff | RetryPolicy, rng: random.Random | None = None) -> None:
        self._backoff = schedule if isinstance(schedule, Backoff) else Backoff(schedule)
        self._rng = rng or random.Random()

    @property
    def failures(self) -> int:
        """Failures in a row so far."""
        return self._backoff.failures

    def next_delay_s(self) -> float:
        """Count one more failure and return how long to wait before trying again."""
        delay_ms, self._backoff = self._backoff.after_failure(self._rng.random())
        return delay_ms / 1000.0

    async def wait(self) -> float:
        """Count one more failure and sleep its delay; returns the seconds slept."""
        delay = self.next_delay_s()
        await asyncio.sleep(delay)
        return delay

    def reset(self) -> None:
        self._backoff = self._backoff.reset()


async def sleep_until_set(event: asyncio.Event, timeout_s: float) -> bool:
    """Sleep until `event` is set or `timeout_s` passes; whether it was set.

    With `asyncio.timeout`, never `asyncio.wait_for`: on Python 3.11 `wait_for` loses a cancellation that
    lands as the event is set, and a loop woken at the instant of its shutdown then runs on forever.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(timeout_s, 0.0)):
            await event.wait()
    return event.is_set()
