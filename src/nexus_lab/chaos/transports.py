"""How the chaos agent reaches the gateways: spread over several, raced through two, patient with Kafka.

All three wrap the agent's own transports (`nexus_lab.agent.transport`) and keep their contract: `send`
returns once the message is acknowledged.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence
from typing import Any

from nexus_lab.agent.hostile import Mode
from nexus_lab.agent.hostile_messages import Message
from nexus_lab.agent.transport import Ack, HttpTransport, PublishError, Transport
from nexus_wire.codes import Decision

# A gateway SIGKILLed and restarted, or PostgreSQL down for a few seconds, answers nothing or 503 for a
# while: the agent retries (doubling from 0.1 s) for up to ~50 s before it gives up.
HTTP_RETRIES = 9
HTTP_BACKOFF_S = 0.1


def http_transports(urls: Sequence[str]) -> list[HttpTransport]:
    return [HttpTransport(u, retries=HTTP_RETRIES, backoff_s=HTTP_BACKOFF_S, max_connections=16) for u in urls]


class SpreadTransport:
    """Each order's messages go to one gateway, chosen by a hash of its order_id."""

    name = "http"

    def __init__(self, transports: Sequence[HttpTransport]) -> None:
        self.transports = list(transports)

    def _pick(self, message: Message) -> HttpTransport:
        return self.transports[zlib.crc32(message.key.encode()) % len(self.transports)]

    async def send(self, message: Message) -> Ack:
        return await self._pick(message).send(message)

    async def close(self) -> None:
        for t in self.transports:
            await t.close()


class RacingTransport:
    """Sends the two steps of every out-of-order pair at the same time, through two different gateways.

    The agent sends a swapped pair as step n+1 then step n, each after the previous was acknowledged.
    This transport holds step n+1 back and, when step n comes, posts both at once (n+1 to one gateway, n
    to the other, and a copy of each to the other gateway too), so two writers of one order race in
    PostgreSQL. A correct gateway serializes them: either n+1 is buffered and n drains it, or n applies
    first and n+1 after it. `relaxed` remembers which answers were raced so the report can accept
    either order (see `relax_report`).
    """

    name = "http"

    def __init__(self, transports: Sequence[HttpTransport]) -> None:
        if len(transports) < 2:
            raise ValueError("racing needs two gateways")
        self.transports = list(transports)
        self._held: dict[str, Message] = {}
        self.raced: dict[str, Ack] = {}
        """event_id of the held step -> the answer it really got."""
        self.races = 0

    async def send(self, message: Message) -> Ack:
        if message.mode is Mode.OUT_OF_ORDER and message.expected is Decision.BUFFER:
            self._held[message.key] = message
            return Ack(decision=Decision.BUFFER.value, http_status=None)
        held = self._held.pop(message.key, None)
        a, b = self.transports[0], self.transports[1]
        if held is None:
            return await a.send(message)
        self.races += 1
        results = await asyncio.gather(
            b.send(held), a.send(message), a.send(held), b.send(message), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r if isinstance(r, PublishError) else PublishError(str(r))
        later, earlier, later_copy, earlier_copy = results
        assert isinstance(later, Ack) and isinstance(earlier, Ack)
        assert isinstance(later_copy, Ack) and isinstance(earlier_copy, Ack)
        # Of two copies of one step, one is decided first and the other is its DUPLICATE: report the first.
        self.raced[str(held.event_id)] = _first_of(later, later_copy)
        return _first_of(earlier, earlier_copy)

    async def close(self) -> None:
        for t in self.transports:
            await t.close()


def _first_of(x: Ack, y: Ack) -> Ack:
    if x.decision == Decision.DUPLICATE.value and y.decision != Decision.DUPLICATE.value:
        return y
    return x


def relax_report(report: dict[str, Any], raced: dict[str, Ack]) -> None:
    """Put the raced steps' real answers in the report, accepting either order of a raced pair."""
    from nexus_lab.agent.runner import summarize

    for plan in report["plans"]:
        for e in plan["events"]:
            ack = raced.get(str(e["event_id"]))
            if ack is None:
                continue
            e.update(decision=ack.decision, code=ack.code, http_status=ack.http_status, attempts=ack.attempts)
            if ack.decision in (Decision.BUFFER.value, Decision.APPLY.value):
                e["expected_decision"] = ack.decision
    report["summary"] = summarize(report["plans"])


class PatientTransport:
    """Retries a publish the inner transport could not get acknowledged (a broker restarting)."""

    def __init__(self, inner: Transport, *, attempts: int = 12, backoff_s: float = 0.5) -> None:
        self.inner = inner
        self.name = inner.name
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.retried = 0

    async def send(self, message: Message) -> Ack:
        for attempt in range(1, self.attempts + 1):
            try:
                return await self.inner.send(message)
            except PublishError:
                if attempt == self.attempts:
                    raise
                self.retried += 1
                await asyncio.sleep(min(self.backoff_s * attempt, 5.0))
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await self.inner.close()
