"""OpenTelemetry tracing of the gateway: off by default, configured by the SDK's standard `OTEL_*` variables.

Tracing is on when `OTEL_TRACES_EXPORTER` names an exporter (`otlp`, `console`) or an OTLP endpoint is
given (`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and `OTEL_SDK_DISABLED` is
not true. Then a `TracerProvider` is built by the SDK from the environment (`OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER(_ARG)`) with OTLP over HTTP (protobuf). Off, no provider
is installed and every hot path pays one module-global read (`active()`), nothing else.

Spans (their names are stable, docs/observability.md):
- `POST /v1/events` and the other routes: the maintained ASGI instrumentation, wrapped around the app;
- `nexus.kafka.consume` per consumed batch (CONSUMER, linked to each record's producer context);
- `nexus.submit` per `Gateway.submit` batch, linked to every item's incoming context, and under each
  item's own incoming context (its `traceparent`) a `nexus.decision` span with the order, decision, code;
- `nexus.webhook.deliver` per delivery attempt (CLIENT), child of the event's context; the webhook
  request's `traceparent` is this span's, so the receiver sees the agent's trace id;
- `nexus.saga.effect` / `nexus.saga.compensate` per saga call (CLIENT), child of the step's context, the
  service's request carrying its traceparent (`traced_effect`);
- `POST` per outbound request (CLIENT, child of the attempt's or call's span: `http_request_span`), the
  span the receiver's or service's traceparent names (the outbound client is our own, not a library's);
- the maintained instrumentations of asyncpg (each query) and aiokafka (each record received, each record
  sent), installed
  with the provider (`instrument_libraries`) and only ever inside a span of ours or an agent's: a library
  call with no trace around it (the dispatcher's and executors' polling) starts none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, SpanContext, Tracer

INSTRUMENTATION = "nexus"
_tracer: Tracer | None = None
_instrumentors: list[Any] = []
_Call = TypeVar("_Call", bound=tuple[Any, ...])


class _Item(Protocol):
    @property
    def traceparent(self) -> str | None: ...
    @property
    def tenant_id(self) -> str: ...
    @property
    def envelope(self) -> Any: ...


class _Outcome(Protocol):
    @property
    def decision(self) -> Any: ...
    @property
    def code(self) -> Any: ...
    @property
    def event_id(self) -> str | None: ...


def active() -> bool:
    """Whether spans are recorded: the one check hot paths make."""
    return _tracer is not None


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the standard OTEL_* variables ask for traces (see the module docstring)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure(env: Mapping[str, str]) -> TracerProvider | None:
    """At the edge (`nexus serve`): install the SDK's provider if `env` (the `OTEL_*` variables, from
    `settings.otel_variables()`) asks for traces."""
    if _tracer is not None or not wanted(env):
        return None
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or "nexus-gateway"})
    provider = TracerProvider(resource=resource)  # the sampler comes from OTEL_TRACES_SAMPLER(_ARG)
    exporter: SpanExporter
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # endpoint, headers, timeout: OTEL_EXPORTER_OTLP_* read by the exporter
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    use(provider)
    instrument_libraries(provider)
    return provider


def use(provider: Any | None) -> None:
    """Record the gateway's spans with `provider` (tests pass one with an in-memory exporter); None: off."""
    global _tracer  # the one switch hot paths read
    _tracer = None if provider is None else provider.get_tracer(INSTRUMENTATION)


def shutdown() -> None:
    """Flush and stop the provider `configure` installed (spans still in its batch are exported)."""
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    flush = getattr(provider, "shutdown", None)
    if _tracer is not None and flush is not None:
        flush()
    uninstrument_libraries()
    use(None)


def instrument_libraries(provider: Any) -> None:
    """Install the maintained instrumentations of asyncpg and aiokafka, their spans made only
    inside an existing trace (see `_InsideTraces`). Only when tracing is on: off, nothing is patched. An
    outbound request's span is our own (`http_request_span`): its client (outbound/http1.py) is not a
    library's, and the gateway makes no other HTTP calls."""
    from opentelemetry.instrumentation.aiokafka import AIOKafkaInstrumentor
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

    if _instrumentors:
        return
    inside = _InsideTraces(provider)
    # AsyncPGInstrumentor's __init__ has no annotations
    instrumentors = (
        AsyncPGInstrumentor(),  # type: ignore[no-untyped-call]  # the instrumentor's constructor is untyped
        AIOKafkaInstrumentor(),
    )
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=inside)
        _instrumentors.append(instrumentor)


def uninstrument_libraries() -> None:
    """Remove what `instrument_libraries` installed (tests switch tracing off again)."""
    while _instrumentors:
        _instrumentors.pop().uninstrument()


class _InsideTraces:
    """A tracer provider for the library instrumentations whose tracers start a span only under a sampled
    parent (ours, or an agent's extracted from a record): background polling, hundreds of queries a
    minute with no request behind them, would otherwise each be a root trace of its own, and under an
    unsampled request each statement would still pay for a span that is never recorded."""

    def __init__(self, provider: Any) -> None:
        self._provider = provider

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        return _InsideTracer(self._provider.get_tracer(*args, **kwargs))


def _sampled_parent(context: Any) -> bool:
    """Whether the context's span is a sampled parent (ours, or a remote agent's): under an unsampled one a
    library span would not be recorded anyway (parent-based sampling), so it is not even started."""
    from opentelemetry import trace

    parent = trace.get_current_span(context).get_span_context()
    return parent.is_valid and parent.trace_flags.sampled


class _InsideTracer:
    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer

    def start_span(self, name: str, context: Any = None, *args: Any, **kwargs: Any) -> Any:
        from opentelemetry import trace

        if not _sampled_parent(context):
            return trace.INVALID_SPAN
        return self._tracer.start_span(name, context, *args, **kwargs)

    @contextlib.contextmanager
    def start_as_current_span(self, name: str, context: Any = None, *args: Any, **kwargs: Any) -> Iterator[Any]:
        from opentelemetry import trace

        if not _sampled_parent(context):
            yield trace.INVALID_SPAN
            return
        with self._tracer.start_as_current_span(name, context, *args, **kwargs) as span:
            yield span


def instrument(app: Any) -> None:
    """Add the maintained OpenTelemetry ASGI middleware to a Starlette/FastAPI app (only call when `active()`)."""
    from opentelemetry import trace
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    app.add_middleware(
        OpenTelemetryMiddleware, excluded_urls="healthz,readyz,metrics", tracer_provider=trace.get_tracer_provider()
    )


def _span_context(traceparent: str | None) -> SpanContext | None:
    """The remote span context of a W3C traceparent (version 00), or None; cheaper than the propagator,
    which a batch of hundreds of items would run twice per item."""
    if not traceparent or len(traceparent) != 55 or traceparent[2] != "-" or not traceparent.startswith("00"):
        return None
    from opentelemetry.trace import SpanContext, TraceFlags

    try:
        trace_id, span_id, flags = int(traceparent[3:35], 16), int(traceparent[36:52], 16), int(traceparent[53:], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))


def _context_of(traceparent: str | None) -> Any:
    span_context = _span_context(traceparent)
    if span_context is None:
        return None
    from opentelemetry import trace

    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


def _link_all(span: Span, contexts: Sequence[SpanContext | None]) -> None:
    """Link a recording span to each distinct context (the SDK keeps the first OTEL_SPAN_LINK_COUNT_LIMIT)."""
    seen: set[int] = set()
    for ctx in contexts:
        if ctx is not None and ctx.span_id not in seen:
            seen.add(ctx.span_id)
            span.add_link(ctx)


def traceparent_of(span: Span) -> str | None:
    """The W3C traceparent naming `span` (None if it does not record)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


@contextlib.contextmanager
def consume_span(topic: str, partition: int, traceparents: Sequence[str | None]) -> Iterator[None]:
    """A consumed Kafka batch (only call when `active()`)."""
    from opentelemetry.trace import SpanKind

    assert _tracer is not None
    attributes: dict[str, str | int] = {
        "messaging.system": "kafka",
        "messaging.destination.name": topic,
        "messaging.destination.partition.id": str(partition),
        "messaging.batch.message_count": len(traceparents),
    }
    with _tracer.start_as_current_span("nexus.kafka.consume", kind=SpanKind.CONSUMER, attributes=attributes) as span:
        if span.is_recording():
            _link_all(span, [_span_context(t) for t in traceparents])
        yield


@contextlib.contextmanager
def submit_span(items: Sequence[_Item], source: str) -> Iterator[Span]:
    """The batch span of one `Gateway.submit` (only call when `active()`); links are added only if it records."""
    assert _tracer is not None
    attributes: dict[str, str | int] = {"nexus.source": source, "nexus.batch.size": len(items)}
    with _tracer.start_as_current_span("nexus.submit", attributes=attributes) as span:
        yield span


def record_decisions(items: Sequence[_Item], outcomes: Sequence[_Outcome], batch: Span) -> None:
    """Under each item's incoming context (or the batch span's when it had none), a span for its decision.

    The caller's sampling decision is honoured as a parent-based sampler would: an item whose incoming
    traceparent is not sampled (or, without one, an unsampled batch) gets no span, and costs one parse.
    """
    from opentelemetry import trace

    assert _tracer is not None
    contexts = [_span_context(item.traceparent) for item in items]
    batch_recording = batch.is_recording()
    if batch_recording:
        _link_all(batch, contexts)
    batch_link = [trace.Link(batch.get_span_context())]
    batch_context = trace.set_span_in_context(batch)
    for item, outcome, incoming in zip(items, outcomes, contexts, strict=True):
        if (incoming is None and not batch_recording) or (incoming is not None and not incoming.trace_flags.sampled):
            continue
        envelope = item.envelope
        attributes: dict[str, Any] = {
            "nexus.decision": outcome.decision.value,
            "nexus.code": outcome.code.value if outcome.code is not None else "",
            "nexus.tenant": item.tenant_id,
            "nexus.event_id": outcome.event_id or "",
        }
        if envelope is not None:
            attributes["nexus.order_id"] = envelope.order_id
            attributes["nexus.plan_id"] = envelope.plan_id
            attributes["nexus.event_type"] = str(envelope.event_type)
            if envelope.seq_id is not None:
                attributes["nexus.seq"] = envelope.seq_id
        parent = batch_context if incoming is None else trace.set_span_in_context(trace.NonRecordingSpan(incoming))
        _tracer.start_span("nexus.decision", context=parent, attributes=attributes, links=batch_link).end()


@contextlib.contextmanager
def delivery_span(traceparent: str | None, attributes: dict[str, Any]) -> Iterator[Span]:
    """One webhook delivery attempt (CLIENT), child of the event's context (only call when `active()`)."""
    from opentelemetry.trace import SpanKind

    assert _tracer is not None
    with _tracer.start_as_current_span(
        "nexus.webhook.deliver", context=_context_of(traceparent), kind=SpanKind.CLIENT, attributes=attributes
    ) as span:
        yield span


@contextlib.contextmanager
def http_request_span(method: str, url: str) -> Iterator[Span]:
    """The HTTP request of a delivery attempt or a saga call (CLIENT, child of the current span), named as
    the aiohttp and httpx instrumentations name theirs; the outbound client (outbound/http1.py) has none.
    Only call when `active()`."""
    from opentelemetry.trace import SpanKind
    from yarl import URL

    assert _tracer is not None
    target = URL(url)  # the address only: a subscription's path or query may hold a token
    attributes: dict[str, str | int] = {"http.request.method": method, "server.address": target.host or ""}
    if target.port is not None:
        attributes["server.port"] = target.port
    with _tracer.start_as_current_span(method, kind=SpanKind.CLIENT, attributes=attributes) as span:
        yield span


async def traced_effect(
    call: Callable[[str | None], Awaitable[_Call]], url: str, traceparent: str | None, compensation: bool
) -> _Call:
    """One saga call (an effect, or its compensation when `compensation`): `call(traceparent)` sends it.

    Off, the request carries the step's own traceparent (the agent's). On, it runs under a CLIENT span,
    child of that context, and carries this span's traceparent: the service sees the agent's trace id.
    The answer starts `(outcome, response, error, ...)` (saga/executor.py); the outcome becomes an attribute.
    """
    if _tracer is None:
        return await call(traceparent)
    from opentelemetry.trace import SpanKind

    name = "nexus.saga.compensate" if compensation else "nexus.saga.effect"
    attributes = {"http.request.method": "POST", "url.full": url}
    with _tracer.start_as_current_span(
        name, context=_context_of(traceparent), kind=SpanKind.CLIENT, attributes=attributes
    ) as span:
        result = await call(traceparent_of(span) or traceparent)
        outcome, error = result[0], result[2]
        span.set_attribute("nexus.saga.outcome", str(getattr(outcome, "value", outcome)))
        if error is not None:
            span.set_attribute("error.type", error[:200])
        return result
