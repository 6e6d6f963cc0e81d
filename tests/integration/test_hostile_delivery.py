"""Hostile input reaching delivery: an unbuildable webhook request, and subscription names as metric labels."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

from nexus import metrics
from nexus.core.decide.items import Incoming
from nexus.delivery.dispatcher import OutboxDispatcher
from nexus.delivery.subscriptions import disable_subscription
from nexus.gateway import Gateway
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.sink import start_sink
from tests.factories import step
from tests.integration.test_delivery import dispatching, settled, submit_plans, subscribe, wait_until


async def test_unbuildable_request_is_dead_at_once_and_not_a_breaker_failure(db: Database, settings: Settings) -> None:
    """A notification whose headers HTTP cannot carry dies on its first attempt; the breaker stays closed."""
    sink = await start_sink()
    try:
        sub = await subscribe(db, sink.url + "/hook")
        # Stored as older versions accepted it (before identifiers were restricted): a newline and non-ASCII.
        for bad in ("bad\norder", "caf\u00e9-order"):
            envelope = step("x", "p", 1).model_copy(update={"order_id": bad})
            await Gateway(db).submit([Incoming(envelope.model_dump_json(), envelope)])
        await submit_plans(db, 5)
        async with dispatching(db, settings.replace(breaker_threshold=2)):
            await wait_until(lambda: settled(db), 10, "every delivery settled")
        rows = await db.fetch(
            "SELECT order_id, state, attempts, dead_reason FROM deliveries WHERE order_id IN ($1, $2)",
            "bad\norder",
            "caf\u00e9-order",
        )
        breaker = await db.fetchrow(
            "SELECT state, failure_count FROM circuit_breakers WHERE subscription_id = $1", sub.id
        )
    finally:
        await sink.aclose()
    assert sorted((r["state"], r["attempts"]) for r in rows) == [("dead", 1), ("dead", 1)]
    assert all(r["dead_reason"].startswith("unsendable") for r in rows)
    assert breaker is not None and (breaker["state"], breaker["failure_count"]) == ("closed", 0)
    assert len([r for r in sink.sink.records if r["status"] == 200]) == 25


async def test_breaker_series_are_bounded_and_disabled_ones_removed(db: Database, settings: Settings) -> None:
    """However many subscriptions exist, the breaker gauge has at most N own series plus `other`."""
    subs = [await subscribe(db, "http://127.0.0.1:9/hook", name=f"sub-{i:03d}") for i in range(12)]
    dispatcher = OutboxDispatcher(db, settings.replace(metrics_max_subscriptions=5), "labels")
    await dispatcher._report.refresh_gauges(db)
    names = {s.labels["subscription"] for s in _breaker_samples()}
    assert names == {"sub-000", "sub-001", "sub-002", "sub-003", "sub-004", "other"}
    await disable_subscription(db, subs[0].name)
    for sub in subs[6:]:
        await disable_subscription(db, sub.name)
    await dispatcher._report.refresh_gauges(db)
    names = {s.labels["subscription"] for s in _breaker_samples()}
    assert names == {"sub-001", "sub-002", "sub-003", "sub-004", "sub-005"}


def _breaker_samples() -> list:  # type: ignore[type-arg]
    [family] = [m for m in metrics.REGISTRY.collect() if m.name == "nexus_circuit_breaker_state"]
    return list(family.samples)


async def test_hostile_retry_after_is_read_as_absent(
    db: Database, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A receiver answering 503 with `Retry-After: \\xb2` gets a normal retry: no ERROR, the status recorded."""
    answers = [b"503 Service Unavailable\r\nRetry-After: \xb2", b"200 OK"]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()
                return
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
            await reader.readexactly(length)
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
            writer.write(b"HTTP/1.1 " + answer + b"\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    caplog.set_level(logging.INFO)
    try:
        await subscribe(db, f"http://127.0.0.1:{port}/hook")
        envelope = step("o-ra", "p-ra", 1)
        await Gateway(db).submit([Incoming(envelope.model_dump_json(), envelope)])
        async with dispatching(db, settings):
            await wait_until(lambda: settled(db), 10, "the notification delivered")
        row = await db.fetchrow("SELECT state, attempts FROM deliveries")
        tried = await db.fetch("SELECT status, error_class FROM delivery_attempts ORDER BY attempt")
    finally:
        server.close()
    assert row is not None and (row["state"], row["attempts"]) == ("delivered", 2)
    assert [(r["status"], r["error_class"]) for r in tried] == [(503, None), (200, None)]
    # asyncpg's pool reports a connection released mid-transaction when the dispatcher's stop cancels a
    # claim in flight (the pool rolls it back): the stop's, not the Retry-After's; anything else fails.
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in errors if "Resetting connection with an active transaction" not in r.getMessage()]
