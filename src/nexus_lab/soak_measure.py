"""What the soak measures of its processes and its load: RSS and CPU of a process tree, the p99 of the agent's
sends (`nexus_lab.soak`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import psutil

from nexus_lab.agent.hostile_messages import Message
from nexus_lab.agent.transport import Ack, Transport


class TimedTransport:
    """The agent's transport, timing every send (retries included) for the cycle's p99."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.name = inner.name
        self.durations: list[float] = []

    async def send(self, message: Message) -> Ack:
        started = time.perf_counter()
        try:
            return await self.inner.send(message)
        finally:
            self.durations.append(time.perf_counter() - started)

    async def close(self) -> None:
        await self.inner.close()


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def rss_mb(pid: int) -> float:
    """RSS of `pid` and its descendants in MB (PostgreSQL's memory: `soak_memory.postgres_memory`)."""
    total = 0
    for proc in _tree(pid):
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total / 1e6


def cpu_s(pid: int) -> float:
    total = 0.0
    for proc in _tree(pid):
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def p99(values: Sequence[float]) -> float:
    ordered = sorted(values) or [0.0]
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
