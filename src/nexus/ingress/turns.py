"""The HTTP server's turn budget: how many new request heads and connection closes one turn of the event loop
handles while tenants compete.

One event loop serves every connection. A tenant's burst (a thousand long polls opened at once, or all of
them closed at once) arrives in one turn of the loop: uvicorn then parses every head and starts every task
(about 60 us each), or loses every connection (about 30 us each), before anything else runs, and another
tenant's request, which needs several turns (its head, its task, each database round trip, its answer),
waits behind each such turn. With `NEXUS_HTTP_HEADS_PER_TURN` = N (default 1) a turn handles at most N new
heads and closes while a share other than theirs has requests in flight (`RequestShares`) or holds a
connection open (a tenant's keep-alive connection: its next request may come any moment); beyond, each
connection's bytes (or its close) wait in a queue of their share (`Gatekeeper.share_of`, read from the
head's bytes), and the queues are taken round robin on the next turns, N a turn. A tenant's burst is then
spread over turns, and another tenant's request is handled on the next one. One share alone is never put
off (a single tenant's throughput is the loop's), and neither are `/healthz` and `/readyz` nor the rest of
a request whose head was handled (its body).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Literal

from nexus import metrics
from nexus.auth.middleware import Gatekeeper
from nexus.auth.shares import RequestShares

log = logging.getLogger(__name__)

Work = Callable[[], bool]
"""Deferred work: it runs when its turn comes, and answers False when it had nothing to do (its connection
closed meanwhile), which costs nothing of the turn's budget."""

Deferred = Literal["head", "close"]
"""What is put off: a new request head or a connection's close."""

_REQUEST_LINE = re.compile(rb"[!-~]+ ([^ ?#\r\n]*)")
_AUTHORIZATION = re.compile(rb"\r\nauthorization:([^\r\n]*)", re.IGNORECASE)
_PROBES = frozenset({b"/healthz", b"/readyz"})


def head_path(data: bytes) -> bytes | None:
    """The path of the request line that starts `data` (None when it does not start with one)."""
    match = _REQUEST_LINE.match(data)
    return None if match is None else match.group(1)


def is_probe(data: bytes) -> bool:
    """Whether `data` starts a request for `/healthz` or `/readyz`."""
    return head_path(data) in _PROBES


def share_of_head(data: bytes, gate: Gatekeeper) -> str | None:
    """The share the request starting with `data` counts in, as `Gatekeeper.share_of` finds it once the head
    is parsed (its Bearer key's tenant when the cache knows the key valid; else None, the unauthenticated
    share), read from the raw bytes: the request line's path and the first Authorization header."""
    path = head_path(data)
    if path is None:
        return None
    match = _AUTHORIZATION.search(data)
    headers = [] if match is None else [(b"authorization", match.group(1).strip())]
    return gate.share_of({"type": "http", "path": path.decode("latin-1"), "headers": headers})


class TurnBudget:
    """The heads and closes one turn of the loop handles (`per_turn`), and the queues, per share, of those put
    off to later turns. A turn's count starts at zero on the turn after the last counted unit."""

    def __init__(self, per_turn: int, shares: RequestShares) -> None:
        self.per_turn = per_turn
        self._shares = shares
        self._spent = 0
        self._queues: OrderedDict[str | None, deque[Work]] = OrderedDict()
        self._connections: dict[str | None, int] = {}
        self._draining = False

    @property
    def queued(self) -> int:
        """Units of work waiting for a turn."""
        return sum(len(queue) for queue in self._queues.values())

    def quiet(self) -> bool:
        """Whether at most one share holds connections and nothing is queued: then nothing is put off, and
        nothing is counted either (a count schedules its reset for the next turn: a callback a turn for
        nothing under one tenant's load)."""
        return len(self._connections) <= 1 and not self._queues

    def spent(self) -> bool:
        """Whether a new unit may have to wait: this turn's budget is spent, or work is queued."""
        return self._spent >= self.per_turn or bool(self._queues)

    def contended(self, share: str | None) -> bool:
        """Whether a unit of `share` must wait once `spent`: work is queued (it goes behind, in its share's
        queue), or another share than `share` has requests in flight or holds a connection open."""
        if self._queues:
            return True
        own = self._shares.unchecked if share is None else self._shares.in_flight(share)
        held = self._connections
        return self._shares.total > own or len(held) > 1 or (len(held) == 1 and share not in held)

    def hold(self, share: str | None) -> None:
        """Count a connection in `share`, the share of its last request."""
        self._connections[share] = self._connections.get(share, 0) + 1

    def release(self, share: str | None) -> None:
        """Count out a connection of `share` (its next request counts elsewhere, or it was lost)."""
        left = self._connections[share] - 1
        if left:
            self._connections[share] = left
        else:
            del self._connections[share]

    def charge(self, loop: asyncio.AbstractEventLoop) -> None:
        """Count one unit handled in this turn."""
        if self._spent == 0:
            loop.call_soon(self._new_turn)
        self._spent += 1

    def defer(self, loop: asyncio.AbstractEventLoop, share: str | None, what: Deferred, work: Work) -> None:
        """Queue `work` (a head or a close) in `share`'s queue for a later turn."""
        queue = self._queues.get(share)
        if queue is None:
            queue = self._queues[share] = deque()
        queue.append(work)
        metrics.HTTP_DEFERRED_BY_WHAT[what].inc()
        if not self._draining:
            self._draining = True
            loop.call_soon(self._drain, loop)

    def _new_turn(self) -> None:
        self._spent = 0

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run queued work round robin over the shares, one unit a share at a time, until this turn's budget is
        spent; the rest waits for the next turn."""
        try:
            while self._queues and self._spent < self.per_turn:
                share, queue = self._queues.popitem(last=False)
                work = queue.popleft()
                if queue:
                    self._queues[share] = queue  # to the back: the next share's unit comes first
                if work():
                    self.charge(loop)
        finally:
            if self._queues:
                loop.call_soon(self._drain, loop)
            else:
                self._draining = False
