"""Wiring: one gateway process (HTTP API, group commit, buffer sweeper, dispatcher, Kafka consumer)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any

import uvicorn

from nexus import metrics, tracing
from nexus.audit.signing import checkpoint_loop, load_signing_key
from nexus.core.process_model import ProcessCatalog
from nexus.fold_thread import FoldThread
from nexus.gateway import Gateway
from nexus.ingress.batcher import GroupCommitter
from nexus.ingress.drain import Drain
from nexus.ingress.http import create_app
from nexus.ingress.http_server import server_config
from nexus.settings import Settings, otel_variables
from nexus.store.database import Database
from nexus.store.sagas import effect_services

if TYPE_CHECKING:
    from fastapi import FastAPI

    from nexus.lifecycle.waiting import DecisionListener

log = logging.getLogger(__name__)


def instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


async def sweep_forever(action: str, sweep: Callable[[], Awaitable[object]], interval_s: float) -> None:
    """Run `sweep` until it finds nothing, then wait `interval_s`, forever; a failed sweep is logged and
    tried again at the next interval (the sweepers below)."""
    while True:
        try:
            while await sweep():
                pass
        except Exception:
            log.warning("%s failed", action, exc_info=True, extra={"action": action})
        await asyncio.sleep(interval_s)


async def sweep_buffer(gateway: Gateway, settings: Settings) -> None:
    """Dead-letter buffered steps whose gap never filled (BUFFER_TIMEOUT), forever."""
    await sweep_forever(
        "buffer_sweep", lambda: gateway.expire_buffered(settings.buffer_timeout_s), settings.buffer_sweep_interval_s
    )


async def sweep_deadlines(gateway: Gateway, settings: Settings) -> None:
    """Abort live plans past their deadline (abort_code timeout), every NEXUS_DEADLINE_SWEEP_S."""
    await sweep_forever("deadline_sweep", gateway.abort_overdue, settings.deadline_sweep_s)


async def expire_approvals(gateway: Gateway, settings: Settings) -> None:
    """Deny approvals not given within their `expires_s`, every NEXUS_APPROVAL_SWEEP_S."""
    from nexus.lifecycle.approvals import expire

    await sweep_forever("approval_expiry", lambda: expire(gateway), settings.approval_sweep_s)


async def serve(
    settings: Settings,
    *,
    http: bool = True,
    dispatcher: bool = True,
    kafka: bool = False,
    on_ready: Callable[[str], None] | None = None,
    background: bool = True,
    sockets: list[socket.socket] | None = None,
) -> None:
    """Run until SIGINT/SIGTERM: whichever of HTTP ingress, dispatcher and Kafka consumer are asked for.

    `background=False` runs only the HTTP API and its LISTEN connection (the other
    processes of `--workers N`; the first runs the sweepers, checkpointer, dispatcher, executor, metrics
    listener and consumer once for all); `sockets`: serve on these (bound by the supervisor)."""
    signing_key = load_signing_key(settings)  # A bad key stops the start, before anything runs
    tracing.configure(otel_variables())  # the SDK's OTEL_* variables; nothing is installed unless they ask
    db = await Database(settings).open()
    catalog = await _register_processes(db, settings, background)
    limit = settings.default_max_order_amount
    folds = FoldThread(settings.fold_thread_weight, settings.fold_thread_switch_ms)  # heavy folds off the loop
    gateway = Gateway(db, record_plan_mismatch=True, catalog=catalog, default_max_order_amount=limit, folds=folds)
    committer = GroupCommitter(
        gateway,
        workers=settings.batch_workers,
        max_events=settings.batch_max_events,
        window_ms=settings.batch_window_ms,
        tenant_events=settings.batch_tenant_events,
        contended_events=settings.batch_tenant_events_contended,
        heavy_weight=settings.fold_thread_weight,
        heavy_duty=settings.heavy_duty,
    )
    from nexus.lifecycle.waiting import DecisionListener  # One LISTEN connection per process

    listener = DecisionListener(db.url, settings)
    services: list[tuple[str, Coroutine[Any, Any, None]]] = [("decision-listener", listener.run())]
    if background:
        services += await _background_services(db, gateway, catalog, settings, signing_key, dispatcher, kafka)
    supervisor = _Supervisor()
    supervisor.start(services, listener)
    committer.start()
    folds.start()
    try:
        if http:
            drain = Drain(settings.drain_grace_s, settings.drain_timeout_s)  # SIGTERM: nexus.ingress.drain
            drain.on_end(listener.end_waits)
            app = create_app(db, gateway, committer, settings=settings, decision_listener=listener, drain=drain)
            await _serve_http(app, settings, supervisor.stop, on_ready, sockets, drain)
        else:
            if on_ready is not None:
                on_ready("no http")
            await _wait_for_signal(supervisor.stop)
    finally:
        await supervisor.cancel()
        await committer.stop()
        folds.close()
        await db.close()
        tracing.shutdown()  # the spans still batched are exported
    if supervisor.failures:
        raise ServiceFailed("; ".join(supervisor.failures))


async def _register_processes(db: Database, settings: Settings, background: bool) -> ProcessCatalog:
    """The process definitions, registered in the database (refused ones stop the start), and the bootstrap
    admin key written for the first process of a serve that has no key yet."""
    from nexus.auth.keys import bootstrap_admin_key, bootstrap_key_path
    from nexus.errors import ConfigurationError
    from nexus.processes import register

    try:
        catalog = await register(db, settings.process_dir)
    except ConfigurationError as exc:
        await db.close()
        raise ServiceFailed(f"process definitions refused: {exc}") from exc
    admin_key = await bootstrap_admin_key(db, bootstrap_key_path(settings)) if background else None
    if admin_key is not None:
        # The path, never the key: it is in a file only its owner can read.
        print(f"nexus: no API keys yet; bootstrap admin key written to {admin_key.resolve()}", flush=True)
    metrics.born_saga_services(effect_services(catalog))
    return catalog


class _Supervisor:
    """The process's services as tasks; `stop` is set when one of them ends."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.failures: list[str] = []
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, services: list[tuple[str, Coroutine[Any, Any, None]]], listener: DecisionListener) -> None:
        for name, service in services:
            task = asyncio.create_task(service, name=name)
            task.add_done_callback(self._watch)
            self.tasks.append(task)
            if name == "decision-listener":
                listener.adopt(task)

    def _watch(self, task: asyncio.Task[None]) -> None:
        # A service never returns on its own: if one ends, the process is no longer what it claims to
        # be (a gateway whose dispatcher died delivers nothing). Stop, and exit non-zero so a supervisor
        # restarts it, instead of living on half-dead.
        if task.cancelled():
            return
        exc = task.exception()
        log.critical(
            "service stopped; shutting down",
            exc_info=exc,
            extra={"action": "service_failed", "service": task.get_name()},
        )
        self.failures.append(f"{task.get_name()}: {exc!r}")
        self.stop.set()

    async def cancel(self) -> None:
        for task in self.tasks:
            task.remove_done_callback(self._watch)
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _serve_http(
    app: FastAPI,
    settings: Settings,
    stop: asyncio.Event,
    on_ready: Callable[[str], None] | None,
    sockets: list[socket.socket] | None,
    drain: Drain,
) -> None:
    server = _Server(server_config(app, settings), drain)
    freeze_startup_objects()
    if on_ready is not None:
        asyncio.create_task(_announce(server, settings, on_ready))  # noqa: RUF006 - fire and forget: it ends once the server has started
    stopper = asyncio.create_task(_stop_server_on(stop, server))
    await server.serve(sockets=sockets)
    stopper.cancel()


async def _background_services(
    db: Database,
    gateway: Gateway,
    catalog: ProcessCatalog,
    settings: Settings,
    signing_key: Any,
    dispatcher: bool,
    kafka: bool,
) -> list[tuple[str, Coroutine[Any, Any, None]]]:
    """The services one process runs for the whole serve (with `--workers N`, the first process)."""
    services: list[tuple[str, Coroutine[Any, Any, None]]] = [("buffer-sweeper", sweep_buffer(gateway, settings))]
    services.append(("deadline-sweeper", sweep_deadlines(gateway, settings)))
    services.append(("approval-expirer", expire_approvals(gateway, settings)))
    services.append(("audit-checkpointer", checkpoint_loop(db, settings, signing_key)))
    from nexus.retention.remover import RetentionRemover  # Finished orders leave after their period

    services.append(("retention-remover", RetentionRemover(db, settings, catalog).run()))
    if dispatcher:
        from nexus.delivery.dispatcher import OutboxDispatcher
        from nexus.delivery.subscriptions import ensure_default_subscription

        await ensure_default_subscription(db, settings)
        services.append(("dispatcher", OutboxDispatcher(db, settings, instance_id()).run()))
        from nexus.delivery.attempts import prune_loop  # The attempts' record stays bounded

        services.append(("attempts-pruner", prune_loop(db, settings)))
    if settings.saga_executors > 0 and gateway.effect_processes:  # Effects performed here
        from nexus.saga.executor import SagaExecutor

        services.append(("saga-executor", SagaExecutor(db, gateway, settings, instance_id()).run()))
    if settings.metrics_bind:
        services.append(("metrics", serve_metrics(db, settings.metrics_bind)))
    if kafka:
        from nexus.ingress.kafka import KafkaIngress

        limit = settings.default_max_order_amount
        kafka_gateway = Gateway(db, record_plan_mismatch=False, catalog=catalog, default_max_order_amount=limit)
        services.append(("kafka-consumer", KafkaIngress(kafka_gateway, settings).run()))
        from nexus.lifecycle.relay import DecisionsRelay  # Decisions back to Kafka agents

        services.append(("decisions-relay", DecisionsRelay(db, settings).run()))
    return services


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where available: the HTTP and PostgreSQL I/O of the gateway is its hot path."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_until_stopped(settings: Settings, *, name: str = "nexus serve", **options: Any) -> int:
    """`serve(settings, **options)` on its own event loop until a signal (0), or until a service fails
    (1, said on stderr under `name`): the body of `nexus serve` and of each of its `--workers` processes."""
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        try:
            runner.run(serve(settings, **options))
        except ServiceFailed as exc:
            print(f"{name}: {exc}", file=sys.stderr, flush=True)
            return 1
    return 0


# Allocations between two collections of the youngest generation (CPython's default: 700). A request
# allocates objects that mostly die with it; at 700 the collector ran every dozen requests or so, walking
# those still in flight (4.4 % of the gateway's CPU under wrk at 64 connections; 1.1 % at 20,000).
GC_YOUNG_THRESHOLD = 20_000


def freeze_startup_objects() -> None:
    """Move everything built at startup (modules, the app, pydantic's validators) out of the collector's
    sight: a full collection no longer walks them, and the request path allocates enough for those to run
    often (15 % of the server's samples under wrk were the collector); collect the youngest generation
    less often (`GC_YOUNG_THRESHOLD`)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


async def serve_metrics(db: Database, bind: str) -> None:
    """/metrics without a key on its own address (NEXUS_METRICS_BIND=host:port), for a scraper on a
    network the API is not exposed to; the API's own /metrics keeps needing an operator key."""
    from prometheus_client import CONTENT_TYPE_LATEST
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from nexus import metrics
    from nexus.ingress.http import refresh_db_gauges

    async def get_metrics(_: Request) -> Response:
        await refresh_db_gauges(db)
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    host, _, port = bind.rpartition(":")
    config = uvicorn.Config(
        Starlette(routes=[Route("/metrics", get_metrics)]),
        host=host.strip("[]") or "127.0.0.1",
        port=int(port),
        log_level="warning",
        lifespan="off",
        access_log=False,
    )
    await _QuietServer(config).serve()
    raise RuntimeError(f"metrics server on {bind} stopped")


class _Server(uvicorn.Server):
    """uvicorn re-raises the signal it caught once it has shut down: with the default handler back in
    place that kills the process before our own shutdown (leases released, pool closed, embedded
    PostgreSQL stopped). Catch SIGINT/SIGTERM ourselves and let `serve()` finish instead; a signal goes to
    the drain (SIGTERM: readiness false for the grace first), which sets `should_exit` when it ends."""

    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        super().__init__(config)
        self.drain = drain
        drain.on_end(self._exit)

    def _exit(self) -> None:
        self.should_exit = True

    def _signalled(self, signum: int) -> None:
        if not self.drain.signalled(signum):  # a signal while already ending: stop at once
            self.force_exit = True

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        loop = asyncio.get_running_loop()

        def on_signal(signum: int, _frame: Any) -> None:
            loop.call_soon_threadsafe(self._signalled, signum)  # the drain's timers belong to the loop

        originals = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)


class _QuietServer(uvicorn.Server):
    """A second server in the process (metrics): the main server owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ServiceFailed(RuntimeError):
    """A background service of the process (dispatcher, consumer, sweeper) ended unexpectedly."""


async def _stop_server_on(stop: asyncio.Event, server: uvicorn.Server) -> None:
    await stop.wait()
    server.should_exit = True


async def _announce(server: uvicorn.Server, settings: Settings, on_ready: Callable[[str], None]) -> None:
    while not server.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
        await asyncio.sleep(0.02)
    on_ready(f"http://{settings.http_host}:{settings.http_port}")


async def _wait_for_signal(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
