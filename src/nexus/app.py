"""Wiring: one gateway process (HTTP API, group commit, buffer sweeper, dispatcher, Kafka consumer)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import uvicorn

from nexus.gateway import Gateway
from nexus.ingress.batcher import GroupCommitter
from nexus.ingress.http import create_app
from nexus.settings import Settings
from nexus.store.database import Database

log = logging.getLogger(__name__)


def instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


async def sweep_buffer(gateway: Gateway, settings: Settings) -> None:
    """Dead-letter buffered steps whose gap never filled (BUFFER_TIMEOUT), forever."""
    while True:
        try:
            while await gateway.expire_buffered(settings.buffer_timeout_s):
                pass
        except Exception:
            log.warning("buffer sweep failed", exc_info=True, extra={"action": "buffer_sweep"})
        await asyncio.sleep(settings.buffer_sweep_interval_s)


async def serve(
    settings: Settings,
    *,
    http: bool = True,
    dispatcher: bool = True,
    kafka: bool = False,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Run until SIGINT/SIGTERM: whichever of HTTP ingress, dispatcher and Kafka consumer are asked for."""
    db = await Database(settings).open()
    gateway = Gateway(db, record_plan_mismatch=True)
    committer = GroupCommitter(
        gateway,
        workers=settings.batch_workers,
        max_events=settings.batch_max_events,
        window_ms=settings.batch_window_ms,
    )
    services: list[Coroutine[Any, Any, None]] = [sweep_buffer(gateway, settings)]
    if dispatcher:
        from nexus.delivery.dispatcher import OutboxDispatcher
        from nexus.delivery.subscriptions import ensure_default_subscription

        await ensure_default_subscription(db, settings)
        services.append(OutboxDispatcher(db, settings, instance_id()).run())
    if kafka:
        from nexus.ingress.kafka import KafkaIngress

        services.append(KafkaIngress(Gateway(db, record_plan_mismatch=False), settings).run())

    tasks = [asyncio.create_task(s) for s in services]
    committer.start()
    try:
        if http:
            app = create_app(db, gateway, committer)
            config = uvicorn.Config(
                app,
                host=settings.http_host,
                port=settings.http_port,
                log_level="warning",
                lifespan="off",
                access_log=False,
                timeout_graceful_shutdown=5,
            )
            server = uvicorn.Server(config)
            if on_ready is not None:
                asyncio.create_task(_announce(server, settings, on_ready))  # noqa: RUF006
            await server.serve()
        else:
            if on_ready is not None:
                on_ready("no http")
            await _wait_for_signal()
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await committer.stop()
        await db.close()


async def _announce(server: uvicorn.Server, settings: Settings, on_ready: Callable[[str], None]) -> None:
    while not server.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
        await asyncio.sleep(0.02)
    on_ready(f"http://{settings.http_host}:{settings.http_port}")


async def _wait_for_signal() -> None:
    import signal

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
