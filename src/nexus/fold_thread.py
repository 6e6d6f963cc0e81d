"""The fold thread: heavy transactions' folds (`plan_batch`) on one worker thread, so the event loop gets the GIL
back while they run.

One tenant's heavy transaction (a slice of a 1,000-envelope batch, a 1,000-line step checked by its process) is
a synchronous chunk of milliseconds; folded on the event loop, every other tenant's request waits for the whole
chunk at each of its awaits, whatever the schedulers of requests decide. Folded on a worker thread, the chunk
holds the GIL for at most the interpreter's switch interval at a time while the loop has work ready (CPython
hands the GIL to a waiting thread after `sys.getswitchinterval()`), so the loop answers other requests between
the fold's slices of time. A native call that holds the GIL (the CEL engine loading a context) is not cut.

A transaction weighing at least `NEXUS_FOLD_THREAD_WEIGHT` (`weight_of` summed over its items: one per item, plus
one per `ELEMENTS_PER_UNIT` list elements) is folded on the thread; lighter ones (a single step) stay inline, so
they pay no hand-off. The group commit has weighed its requests already (`nexus.ingress.batcher`): a transaction
of its heavy lanes folds on the thread, one of its light lanes (what one-event requests make together) inline,
without walking the items again (`nexus.store.lanes.HEAVY_LANE`). 0: every fold inline (no thread, the switch
interval untouched). While the thread is on, the process's switch interval is `NEXUS_FOLD_THREAD_SWITCH_MS`.

Why a thread may fold: `plan_batch` is pure (`core-no-io`): it reads its arguments and builds a new plan; the
only state it shares with other folds is caches (`functools.lru_cache` of the checks' fields, compiled programs
built once with the catalog), which are safe across threads. The database transaction, its locks and its writes
stay on the event loop; the loop awaits the fold inside the transaction. One thread: heavy folds run one at a
time, in the order they were handed over.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from nexus.core.decide.items import Incoming
from nexus.core.decide.plan import BatchPlan, BatchReads, Parts, plan_batch
from nexus.store.lanes import HEAVY_LANE

ELEMENTS_PER_UNIT = 16
"""An item weighs one unit, plus one per this many elements of the lists in its data (`weight_of`)."""


def weight_of(item: Incoming) -> int:
    """An item's share of a transaction's work: one unit, plus one per `ELEMENTS_PER_UNIT` elements of the
    lists in it (a process's checks run over every element: a step of 1,000 order lines weighs 63 single
    steps); an item kept as text, one per KiB. An item weighed where it was parsed (`Incoming.weight`) is not
    walked again."""
    if item.weight:
        return item.weight
    raw = item.raw
    if isinstance(raw, str):
        return 1 + len(raw) // 1024
    elements = 0
    stack: list[Any] = [raw]
    while stack:
        node = stack.pop()
        if type(node) is list:
            elements += len(node)
            stack.extend(x for x in node if type(x) is list or type(x) is dict)
        elif isinstance(node, Mapping):
            stack.extend(x for x in node.values() if type(x) is list or type(x) is dict)
    return 1 + elements // ELEMENTS_PER_UNIT


def heavy(items: Sequence[Incoming], threshold: int) -> bool:
    """Whether `items` weigh at least `threshold` (counted only until it is reached; 0: never heavy)."""
    if threshold <= 0:
        return False
    if len(items) >= threshold:
        return True
    total = 0
    for item in items:
        total += weight_of(item)
        if total >= threshold:
            return True
    return False


class FoldThread:
    """Folds heavy transactions on one worker thread owned by the serving process (`start`, `close`); with
    weight 0, or before `start`, every fold runs inline."""

    def __init__(self, weight: int = 0, switch_ms: float = 1.0) -> None:
        self.weight = weight
        self.switch_s = switch_ms / 1000.0
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._switch_before: float | None = None

    @property
    def running(self) -> bool:
        return self._executor is not None

    def start(self) -> None:
        """The worker thread, and the process's switch interval lowered (once; weight 0: nothing)."""
        if self.weight <= 0 or self._executor is not None:
            return
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nexus-fold")
        if self.switch_s > 0:
            self._switch_before = sys.getswitchinterval()
            sys.setswitchinterval(self.switch_s)

    def close(self) -> None:
        """The worker thread ended (after its fold in hand) and the switch interval given back."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        if self._switch_before is not None:
            sys.setswitchinterval(self._switch_before)
            self._switch_before = None

    async def plan(self, items: Sequence[Incoming], reads: BatchReads, parts: Parts, **kwargs: Any) -> BatchPlan:
        """`plan_batch(items, reads, parts, **kwargs)`: on the worker thread if the items are heavy, else inline."""
        executor = self._executor
        lane = HEAVY_LANE.get()  # the group commit's lanes are already weighed: their items need no second walk
        if executor is None or not (heavy(items, self.weight) if lane is None else lane):
            return plan_batch(items, reads, parts, **kwargs)
        # the caller's context goes along (a probe or a span reading a context variable sees the same)
        fold = functools.partial(contextvars.copy_context().run, plan_batch, items, reads, parts, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(executor, fold)
