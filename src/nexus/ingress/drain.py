"""Stopping one `nexus serve` process behind a load balancer: drain, end, and a hard stop.

    SERVING --SIGTERM--> DRAINING --drain_grace_s over, SIGINT or a second signal--> ENDING
       |                                                                                ^
       +--SIGINT, or SIGTERM with no grace----------------------------------------------+
    any signal: the process exits (status 1) drain_timeout_s after the first, whatever still runs

- DRAINING: `/readyz` answers 503 (status `draining`) and every other request is served as before, for
  `drain_grace_s`: the balancer's health checks (deploy/haproxy.cfg) take the instance out of rotation
  while nothing it was sent is refused.
- ENDING: the waits (long polls, SSE streams, MCP `wait_for_order`) answer the order's current state and end
  (`DecisionListener.end_waits`), the HTTP server stops accepting and finishes the requests it holds, then
  `serve()` cancels the process's services as at any stop: a Kafka consumer commits and leaves its group,
  the dispatcher and the saga executor release their leases.
- The hard stop is a timer thread, so that it fires even if the event loop is stuck.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

HARD_STOP_STATUS = 1


class DrainState(enum.Enum):
    SERVING = "serving"
    DRAINING = "draining"
    ENDING = "ending"


class Drain:
    """The stop of one process as a state; `on_end` callbacks run once, when it enters ENDING."""

    def __init__(self, grace_s: float, timeout_s: float) -> None:
        self.grace_s = grace_s
        self.timeout_s = timeout_s
        self.state = DrainState.SERVING
        self._on_end: list[Callable[[], None]] = []
        self._grace: asyncio.TimerHandle | None = None

    @property
    def draining(self) -> bool:
        """Whether `/readyz` must answer 503: a stop signal has come."""
        return self.state is not DrainState.SERVING

    def on_end(self, callback: Callable[[], None]) -> None:
        self._on_end.append(callback)

    def signalled(self, signum: int) -> bool:
        """A stop signal, on the event loop's thread. False when the process was already ENDING (the caller
        may then force its stop)."""
        if self.state is DrainState.ENDING:
            return False
        if self.state is DrainState.SERVING:
            _start_hard_stop(self.timeout_s)
            if signum == signal.SIGTERM and self.grace_s > 0:
                self.state = DrainState.DRAINING
                log.info(
                    "draining: /readyz answers 503 for %gs while requests are still served",
                    self.grace_s,
                    extra={"action": "drain_start", "grace_s": self.grace_s},
                )
                self._grace = asyncio.get_running_loop().call_later(self.grace_s, self.end)
                return True
        self.end()
        return True

    def end(self) -> None:
        """Enter ENDING: the waits answer, the server stops accepting (the `on_end` callbacks)."""
        if self.state is DrainState.ENDING:
            return
        self.state = DrainState.ENDING
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        log.info("draining over; stopping", extra={"action": "drain_end"})
        for callback in self._on_end:
            callback()


def _start_hard_stop(timeout_s: float) -> None:
    timer = threading.Timer(timeout_s, _hard_stop, args=(timeout_s,))
    timer.daemon = True  # a process that stopped in time exits without waiting for it
    timer.name = "nexus-hard-stop"
    timer.start()


def _hard_stop(timeout_s: float) -> None:
    print(f"nexus serve: not stopped {timeout_s:g}s after the signal; exiting now", file=sys.stderr, flush=True)
    os._exit(HARD_STOP_STATUS)
