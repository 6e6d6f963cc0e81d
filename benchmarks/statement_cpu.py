"""The gateway's process CPU per event inside each statement `Gateway.submit` sends (asyncpg's encoding of the
parameters, the send, the answer's decoding; PostgreSQL's own CPU is another process's and not counted), with
each statement's parameters in characters per event: `benchmarks/submit_cpu.py`'s workload (wrk's envelopes in
fixed batches on a real PostgreSQL). Two trees compared this way show whether one sends more, or pays more to
send the same.

Run with a tree's sources first on the path: ``PYTHONPATH=<tree>/src .venv/bin/python benchmarks/statement_cpu.py
[--orders 300] [--batch 8] [--rounds 3]`` (the warm-up round and the scratch database's migrations are counted
too: a few statements, far below the workload's).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from submit_cpu import measure

from nexus_lab.bench import admin_postgres

Method = Callable[..., Awaitable[Any]]
STATS: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0])


def _size(value: Any) -> int:
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, list):
        return sum(_size(v) for v in value)
    return 8


def _name(text: str) -> str:
    """A statement's first line that is not a comment (a named query's header comments vary)."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("--")]
    return (lines[0] if lines else text.strip())[:50]


def _counted(method: Method) -> Method:
    async def counted(self: asyncpg.Connection, text: str, *args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return await method(self, text, *args, **kwargs)
        finally:
            row = STATS[_name(text)]
            row[0] += 1
            row[1] += time.process_time() - started
            row[2] += sum(_size(a) for a in args)

    return counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--orders", type=int, default=300)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncpg.Connection.execute = _counted(asyncpg.Connection.execute)  # type: ignore[method-assign]
    asyncpg.Connection.fetch = _counted(asyncpg.Connection.fetch)  # type: ignore[method-assign]
    with admin_postgres() as admin:
        results = asyncio.run(measure(admin, args.orders, args.batch, args.rounds))
    events = args.orders * 5 * (args.rounds + 1)
    print(f"us of process CPU per event (submit_cpu's rounds): {[round(x) for x in results]}")
    for name, (count, cpu, chars) in sorted(STATS.items(), key=lambda kv: -kv[1][1])[:6]:
        print(f"{count / events:6.3f} statements {cpu / events * 1e6:7.2f} us CPU {chars / events:8.1f} chars  {name}")


if __name__ == "__main__":
    main()
