"""OpenTelemetry traces: one trace from the SDK's publish to the webhook receiver, spans in memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from nexus import tracing
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.processes import builtin_catalog
from nexus.saga.executor import SagaExecutor
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_client import AsyncNexusClient, ClientConfig
from nexus_client.kafka import EventProducer
from nexus_lab.services import RunningServices
from nexus_lab.sink import start_sink
from tests.conftest import TEST_API_KEY
from tests.factories import step
from tests.helpers import wait_until
from tests.integration.kafka_helpers import BOOTSTRAP, kafka_settings, running_ingress, wait_committed_to_end
from tests.integration.test_delivery import SECRET, dispatching, settled, subscribe
from tests.integration.test_sagas import saga_settings, services

__all__ = ["kafka_settings", "services"]  # fixtures, imported for pytest

_EXPORTER = InMemorySpanExporter()
_PROVIDER: TracerProvider | None = None


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's SDK provider (set once: OpenTelemetry allows one global), recording into memory;
    the gateway's tracing switched on for the test and off after it."""
    global _PROVIDER
    if _PROVIDER is None:
        _PROVIDER = TracerProvider()
        _PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(_PROVIDER)
    _EXPORTER.clear()
    tracing.use(_PROVIDER)
    tracing.instrument_libraries(_PROVIDER)
    try:
        yield _EXPORTER
    finally:
        tracing.uninstrument_libraries()
        tracing.use(None)
        _EXPORTER.clear()


def _named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _trace_id(traceparent: str) -> int:
    return int(traceparent.split("-")[1], 16)


async def test_one_trace_from_the_agents_publish_to_the_webhook_receiver(
    db: Database, settings: Settings, spans: InMemorySpanExporter
) -> None:
    """The SDK's publish span, the HTTP server span, the decision span (order, decision, code) and the
    webhook delivery span share one trace id, and the receiver's traceparent names the request span under
    the delivery span."""
    sink = await start_sink(secret=SECRET)
    try:
        await subscribe(db, sink.url + "/hook")
        app = create_app(db, Gateway(db), settings=settings)
        config = ClientConfig(gateway_url="http://gateway", api_key=TEST_API_KEY)
        async with AsyncNexusClient(config, transport=httpx.ASGITransport(app=app)) as client:
            result = await client.submit(step("tr-o1", "tr-p1", 1))
            rejected = await client.submit(step("tr-o1", "tr-p1", 2, event_type="OrderShipped"))
        assert (result.first.decision.value, rejected.first.decision.value) == ("APPLY", "REJECTED")
        async with dispatching(db, settings):
            await wait_until(lambda: settled(db), 20, "delivery")
        records = sink.sink.records
    finally:
        await sink.aclose()
    finished = list(spans.get_finished_spans())
    publish = _named(finished, "nexus_client publish")
    assert len(publish) == 2
    trace_id = publish[0].context.trace_id
    # In process the client's span is current when the app runs, so the ASGI span is INTERNAL, not SERVER.
    server = [s for s in _named(finished, "POST /v1/events") if s.context.trace_id == trace_id]
    assert server, "the ASGI instrumentation continued the agent's trace"
    decisions = _named(finished, "nexus.decision")
    applied = [d for d in decisions if d.context.trace_id == trace_id]
    assert len(applied) == 1
    attrs: Any = applied[0].attributes
    assert (attrs["nexus.order_id"], attrs["nexus.decision"], attrs["nexus.code"]) == ("tr-o1", "APPLY", "")
    assert applied[0].parent is not None and applied[0].parent.span_id == publish[0].context.span_id
    refused: Any = next(d for d in decisions if d.context.trace_id == publish[1].context.trace_id).attributes
    assert (refused["nexus.decision"], refused["nexus.code"]) == ("REJECTED", "INVALID_TRANSITION")
    batch = _named(finished, "nexus.submit")
    assert any(link.context.span_id == publish[0].context.span_id for b in batch for link in b.links)
    [delivery] = _named(finished, "nexus.webhook.deliver")
    assert delivery.context.trace_id == trace_id
    assert delivery.attributes is not None and delivery.attributes["nexus.delivery.outcome"] == "delivered"
    [record] = records
    assert _trace_id(record["traceparent"]) == trace_id
    # The receiver's parent is the webhook request's own CLIENT span (`POST`), a child of the delivery attempt's.
    [request] = [s for s in finished if s.context.span_id == int(record["traceparent"].split("-")[2], 16)]
    assert request.kind is SpanKind.CLIENT and request.parent is not None
    assert request.parent.span_id == delivery.context.span_id


def test_tracing_is_off_by_default_and_adds_no_middleware(db: Database, settings: Settings) -> None:
    """Without OTEL_* asking for traces nothing is installed: no provider, no ASGI middleware, no spans."""
    assert not tracing.wanted({})
    assert not tracing.wanted({"OTEL_SERVICE_NAME": "x"})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.configure({}) is None
    assert not tracing.active()
    assert not hasattr(asyncpg.Connection.fetch, "__wrapped__")  # no library instrumentation installed
    app = create_app(db, Gateway(db), settings=settings)
    assert all("OpenTelemetry" not in m.cls.__name__ for m in app.user_middleware)  # type: ignore[attr-defined]


@pytest.mark.kafka
async def test_a_kafka_published_step_is_traced_through_the_consumer(
    kafka_settings: Settings, spans: InMemorySpanExporter
) -> None:
    """The SDK's Kafka publish span travels in the record's traceparent: the consumer's batch span links to
    it and the step's decision span is its child, in the agent's trace."""
    async with EventProducer(BOOTSTRAP, kafka_settings.kafka_topic) as producer:
        await producer.send(step("trk-o1", "trk-p1", 1))
    async with running_ingress(kafka_settings):
        await wait_committed_to_end(kafka_settings.kafka_group, kafka_settings.kafka_topic, timeout=60)
    finished = list(spans.get_finished_spans())
    [publish] = _named(finished, "nexus_client publish")
    consume = _named(finished, "nexus.kafka.consume")
    assert any(link.context.span_id == publish.context.span_id for c in consume for link in c.links)
    [decision] = [d for d in _named(finished, "nexus.decision") if d.context.trace_id == publish.context.trace_id]
    assert decision.parent is not None and decision.parent.span_id == publish.context.span_id
    assert decision.attributes is not None and decision.attributes["nexus.decision"] == "APPLY"
    # aiokafka's maintained instrumentation: the record's receive span, in the agent's trace
    received = _named(finished, f"{kafka_settings.kafka_topic} receive")
    assert any(r.context.trace_id == publish.context.trace_id and r.kind is SpanKind.CONSUMER for r in received)


async def test_one_trace_from_the_publish_through_decision_and_webhook_to_the_effect_call(
    database_url: str, services: RunningServices, spans: InMemorySpanExporter
) -> None:
    """A `fulfilment` step published by the SDK: its decision, the webhook delivery, the saga's effect call
    to the inventory service (`nexus services`), its request's own span and the maintained instrumentations'
    spans (asyncpg query) share the agent's trace id, and the service's ledger holds a traceparent of that trace
    naming the effect call's request; once the payment is refused for good, the reservation's
    compensation call has its span in the same trace. Library calls outside any trace start no span."""
    settings = saga_settings(database_url, services)
    db = await Database(settings).open(migrate=False)
    sink = await start_sink(secret=SECRET)
    gateway = Gateway(db, catalog=builtin_catalog())
    executor = SagaExecutor(db, gateway, settings, "trace-executor")
    services.services.faults["payment"].permanent_fail_rate = 1.0
    try:
        await subscribe(db, sink.url + "/hook")
        await db.fetchval("SELECT 1")  # outside any trace: no span
        app = create_app(db, gateway, settings=settings)
        config = ClientConfig(gateway_url="http://gateway", api_key=TEST_API_KEY)
        async with AsyncNexusClient(config, transport=httpx.ASGITransport(app=app)) as client:
            await client.submit(step("trs-o1", "trs-p1", 1, process="fulfilment"))
            reserve = await client.submit(step("trs-o1", "trs-p1", 2, process="fulfilment"))
            assert reserve.first.decision.value == "APPLY"
            for _ in range(50):
                if not await executor.run_once():
                    break
            charge = await client.submit(step("trs-o1", "trs-p1", 3, process="fulfilment"))
            assert charge.first.decision.value == "APPLY"
            for _ in range(50):
                if not await executor.run_once():
                    break
        async with dispatching(db, settings):
            await wait_until(lambda: settled(db), 20, "delivery")
            await wait_until(lambda: _count(db, "trs-o1"), 20, "both notifications")
        records = sink.sink.records
    finally:
        await executor.aclose()
        await sink.aclose()
        await db.close()
    finished = list(spans.get_finished_spans())
    publish = _named(finished, "nexus_client publish")[1]
    trace_id = publish.context.trace_id
    in_trace = [s for s in finished if s.context.trace_id == trace_id]
    names = {s.name for s in in_trace}
    assert {"nexus.decision", "nexus.saga.effect", "nexus.webhook.deliver"} <= names, names
    [effect] = [s for s in in_trace if s.name == "nexus.saga.effect"]
    assert effect.kind is SpanKind.CLIENT and effect.parent is not None
    assert effect.parent.span_id == publish.context.span_id  # the step's own context, stored with the saga
    assert effect.attributes is not None and effect.attributes["nexus.saga.outcome"] == "succeeded"
    entry, release = services.services.ledgers["inventory"].entries
    assert release["kind"] == "release"
    [compensate] = [s for s in in_trace if s.name == "nexus.saga.compensate"]
    assert compensate.parent is not None and compensate.parent.span_id == publish.context.span_id
    assert compensate.attributes is not None and compensate.attributes["url.full"].endswith("/releases")
    assert any(s.parent is not None and s.parent.span_id == compensate.context.span_id for s in in_trace)
    assert _trace_id(entry["traceparent"]) == trace_id
    [call] = [s for s in finished if s.context.span_id == int(entry["traceparent"].split("-")[2], 16)]
    assert call.parent is not None and call.parent.span_id == effect.context.span_id  # the request's own span
    assert any(s.attributes and s.attributes.get("db.system") == "postgresql" for s in in_trace)
    assert [r for r in records if r["event_type"] == "InventoryValidated"]
    assert {_trace_id(r["traceparent"]) for r in records if r["event_type"] == "InventoryValidated"} == {trace_id}
    roots = [s for s in finished if s.parent is None and s.instrumentation_scope is not None]
    assert not [s for s in roots if s.instrumentation_scope.name.startswith("opentelemetry.instrumentation")]


async def _count(db: Database, order_id: str) -> bool:
    delivered = await db.fetchval(
        "SELECT count(*) FROM deliveries WHERE order_id = $1 AND state = 'delivered'", order_id
    )
    return bool(delivered >= 2)
