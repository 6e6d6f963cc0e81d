"""OpenTelemetry traces (issue 16): one trace from the SDK's publish to the webhook receiver, spans in memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nexus import tracing
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_client import AsyncNexusClient, ClientConfig
from nexus_client.kafka import EventProducer
from nexus_lab.sink import start_sink
from tests.conftest import TEST_API_KEY
from tests.factories import step
from tests.helpers import wait_until
from tests.integration.kafka_helpers import BOOTSTRAP, kafka_settings, running_ingress, wait_committed_to_end
from tests.integration.test_delivery import SECRET, dispatching, settled, subscribe

__all__ = ["kafka_settings"]  # the fixture, imported for pytest

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
    try:
        yield _EXPORTER
    finally:
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
    webhook delivery span share one trace id, and the receiver's traceparent names the delivery span."""
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
    assert int(record["traceparent"].split("-")[2], 16) == delivery.context.span_id


def test_tracing_is_off_by_default_and_adds_no_middleware(db: Database, settings: Settings) -> None:
    """Without OTEL_* asking for traces nothing is installed: no provider, no ASGI middleware, no spans."""
    assert not tracing.wanted({})
    assert not tracing.wanted({"OTEL_SERVICE_NAME": "x"})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.configure({}) is None
    assert not tracing.active()
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
