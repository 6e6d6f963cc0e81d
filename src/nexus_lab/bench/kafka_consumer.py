"""One gateway process of the Kafka bench's consumer group, run as a script: `<python> kafka_consumer.py JSON`.

Run by path with any checkout's `nexus` first on `PYTHONPATH` (`nexus bench --kafka-consumer-cmd`), so it
imports nothing but `nexus` and what that checkout has always had: `Database`, `Gateway`, `KafkaIngress`
(`max_records`, `assigned`, `owned`, `run`, `_resolve`), `nexus.app.event_loop_factory` and aiokafka's
consumer.

Protocol on stdout, one JSON object a line: `{"ready": pid}` once in the group, `{"owned": n}` whenever the
number of partitions it owns changes, and on "stop" (or end of input) on stdin the result:
`{"cpu_s", "batches", "submits"}`.

What it measures, by wrapping those names from outside (the same way for every checkout):
- `batches`: each lane batch, from the poll that fetched its oldest record to the commit that covers all
  of it (seconds);
- `submits`: each `Gateway.submit` call (seconds);
- `cpu_s`: this process's CPU seconds from joining the group to "stop";
- `split`: per lane batch, where its time went (seconds; `SPLIT` names the fields): waiting in its lane
  from the poll to the start of its resolution (the slice before it), decoding until `submit`, in `submit`
  waiting for a pooled connection, in its statements (from send to answer: the database's work and the wait
  for this event loop to read it), in the decision fold (`plan_batch`), the rest of `submit`, from `submit`
  to resolved (dead letters, offsets), and from resolved to the commit that covers it.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import sys
import time
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer

import nexus.fold_thread
import nexus.gateway
from nexus.app import event_loop_factory
from nexus.gateway import Gateway
from nexus.ingress.kafka import KafkaIngress
from nexus.settings import Settings
from nexus.store.database import Database

SPLIT = ("records", "lane_wait", "decode", "acquire", "statements", "fold", "submit_other", "resolve_other",
         "commit_wait")  # fmt: skip
"""The fields of a lane batch's `split` row, in order (records, then seconds)."""

_SLICE: contextvars.ContextVar[dict[str, float] | None] = contextvars.ContextVar("slice", default=None)
"""The lane batch being resolved in this task: where its parts' times add up."""


def _timed(name: str, method: Any) -> Any:
    """`method` (a coroutine function) adding its wall time to the current lane batch's `name`."""

    async def timed(*args: Any, **kwargs: Any) -> Any:
        times = _SLICE.get()
        if times is None:
            return await method(*args, **kwargs)
        started = time.perf_counter()
        try:
            return await method(*args, **kwargs)
        finally:
            times[name] = times.get(name, 0.0) + time.perf_counter() - started

    return timed


class Probe:
    """Times lane batches from poll to commit (and the parts of that time) and `Gateway.submit` calls."""

    def __init__(self) -> None:
        self.polled: dict[tuple[Any, int], float] = {}
        """(partition, first offset of a fetched chunk) -> when the poll returned it."""
        self.pending: list[tuple[float, dict[Any, int], dict[str, float]]] = []
        self.committed: dict[Any, int] = {}
        self.batches: list[float] = []
        self.split: list[list[float]] = []
        self.submits: list[float] = []

    def install(self) -> None:
        probe = self
        getmany, commit = AIOKafkaConsumer.getmany, AIOKafkaConsumer.commit
        resolve, submit = KafkaIngress._resolve, Gateway.submit

        async def timed_getmany(consumer: Any, *args: Any, **kwargs: Any) -> Any:
            batch = await getmany(consumer, *args, **kwargs)
            now = time.perf_counter()
            for tp, records in batch.items():
                if records:
                    probe.polled[(tp, records[0].offset)] = now
            return batch

        async def timed_commit(consumer: Any, offsets: Any = None) -> Any:
            result = await commit(consumer, offsets)
            probe.on_commit(dict(offsets or {}))
            return result

        async def timed_resolve(ingress: Any, slices: dict[Any, list[Any]], *args: Any) -> None:
            polled = [probe.polled_at(tp, part) for tp, part in slices.items()]
            times = {"start": time.perf_counter(), "records": sum(len(part) for part in slices.values())}
            token = _SLICE.set(times)
            try:
                await resolve(ingress, slices, *args)
            finally:
                _SLICE.reset(token)
            times["resolved"] = time.perf_counter()
            probe.pending.append((min(polled), {tp: part[-1].offset + 1 for tp, part in slices.items()}, times))

        async def timed_submit(gateway: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            times = _SLICE.get()
            if times is not None:
                times.setdefault("submit_start", started)
            try:
                return await submit(gateway, *args, **kwargs)
            finally:
                ended = time.perf_counter()
                probe.submits.append(ended - started)
                if times is not None:
                    times["submit"] = times.get("submit", 0.0) + ended - started

        _time_fold_and_statements()

        AIOKafkaConsumer.getmany = timed_getmany
        AIOKafkaConsumer.commit = timed_commit
        KafkaIngress._resolve = timed_resolve  # type: ignore[method-assign,assignment]  # a probe wraps the method for the run
        Gateway.submit = timed_submit  # type: ignore[method-assign,assignment]  # a probe wraps the method for the run

    def polled_at(self, tp: Any, part: list[Any]) -> float:
        """When the chunk holding the slice's first record was polled (its oldest record): the chunk starting
        at or just before it. A lane may resolve a chunk in several slices, one after the other, so a chunk
        is forgotten only once a later one of its partition is looked up."""
        first = part[0].offset
        starts = [o for (t, o) in self.polled if t == tp and o <= first]
        if not starts:
            return time.perf_counter()
        start = max(starts)
        for older in starts:
            if older < start:
                del self.polled[(tp, older)]
        return self.polled[(tp, start)]

    def on_commit(self, offsets: dict[Any, int]) -> None:
        now = time.perf_counter()
        for tp, off in offsets.items():
            self.committed[tp] = max(off, self.committed.get(tp, 0))
        waiting = []
        for polled, needs, times in self.pending:
            if all(self.committed.get(tp, 0) >= off for tp, off in needs.items()):
                self.batches.append(now - polled)
                self.split.append(split_of(polled, times, now))
            else:
                waiting.append((polled, needs, times))
        self.pending = waiting


def _time_fold_and_statements() -> None:
    """The fold's time and the statements' and pool acquisitions' times, added to the slice being resolved."""
    plan_batch = nexus.gateway.plan_batch  # type: ignore[attr-defined]  # imported into the module, not declared by it

    def timed_plan_batch(*args: Any, **kwargs: Any) -> Any:
        times = _SLICE.get()
        started = time.perf_counter()
        try:
            return plan_batch(*args, **kwargs)
        finally:
            if times is not None:
                times["fold"] = times.get("fold", 0.0) + time.perf_counter() - started

    nexus.gateway.plan_batch = timed_plan_batch  # type: ignore[attr-defined]  # a probe wraps the gateway's import for the run
    nexus.fold_thread.plan_batch = timed_plan_batch  # type: ignore[attr-defined]  # and the fold thread's (`submit`'s fold)
    for name in ("execute", "fetch", "fetchval", "fetchrow"):
        setattr(asyncpg.Connection, name, _timed("statements", getattr(asyncpg.Connection, name)))
    asyncpg.pool.Pool._acquire = _timed("acquire", asyncpg.pool.Pool._acquire)


def split_of(polled: float, times: dict[str, float], committed: float) -> list[float]:
    """A lane batch's `SPLIT` row from the times its probe gathered."""
    start, resolved = times["start"], times["resolved"]
    submit_start = times.get("submit_start", resolved)
    submit = times.get("submit", 0.0)
    inside = times.get("acquire", 0.0) + times.get("statements", 0.0) + times.get("fold", 0.0)
    return [
        times["records"],
        start - polled,
        submit_start - start,
        times.get("acquire", 0.0),
        times.get("statements", 0.0),
        times.get("fold", 0.0),
        max(0.0, submit - inside),
        max(0.0, resolved - submit_start - submit),
        committed - resolved,
    ]


def say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def main(args: dict[str, Any]) -> None:
    probe = Probe()
    probe.install()
    settings = Settings.from_env().replace(**args["settings"])
    db = await Database(settings).open(migrate=False)
    ingress = KafkaIngress(Gateway(db, record_plan_mismatch=False), settings)
    ingress.max_records = args["poll"]
    task = asyncio.create_task(ingress.run())
    try:
        async with asyncio.timeout(60):
            await ingress.assigned.wait()
        cpu = time.process_time()
        say({"ready": os.getpid()})

        async def report() -> None:
            owned = -1
            while True:
                if len(ingress.owned) != owned:
                    owned = len(ingress.owned)
                    say({"owned": owned})
                await asyncio.sleep(0.05)

        reporter = asyncio.create_task(report())
        await asyncio.to_thread(sys.stdin.readline)
        reporter.cancel()
        task.cancel()
        await asyncio.gather(task, reporter, return_exceptions=True)
        result = {"cpu_s": time.process_time() - cpu, "batches": probe.batches, "submits": probe.submits}
        say(result | {"split": probe.split})
    finally:
        task.cancel()
        await db.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    # The event loop `nexus serve` runs its Kafka consumer on (uvloop where installed).
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(main(json.loads(sys.argv[1])))
