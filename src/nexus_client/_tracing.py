"""The agent's publish span: OpenTelemetry API only, so an application's own SDK setup records it.

OpenTelemetry is not a dependency of the SDK: without `opentelemetry-api` installed there is no span and no
header (the gateway starts its own trace). With the API but no SDK provider (its default) the no-op tracer
makes this a few attribute reads; the gateway then continues the caller's traceparent (if any) or starts its
own trace.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Iterator, Sequence
from typing import Any

from nexus_wire.envelope import EventEnvelope

_HAS_OTEL = importlib.util.find_spec("opentelemetry") is not None


@functools.cache
def _tracer() -> Any:
    from opentelemetry import trace

    return trace.get_tracer("nexus_client")


@contextlib.contextmanager
def publish(steps: Sequence[EventEnvelope], transport: str) -> Iterator[dict[str, str]]:
    """A PRODUCER span around publishing `steps`; yields the headers that carry it (empty if not recording)."""
    if not _HAS_OTEL:
        yield {}
        return
    from opentelemetry import propagate, trace

    attributes: dict[str, str | int] = {"messaging.system": transport, "messaging.batch.message_count": len(steps)}
    if len(steps) == 1:
        attributes["nexus.order_id"] = steps[0].order_id
        attributes["nexus.event_type"] = str(steps[0].event_type)
        attributes["nexus.event_id"] = str(steps[0].event_id)
    kind = trace.SpanKind.PRODUCER
    with _tracer().start_as_current_span("nexus_client publish", kind=kind, attributes=attributes) as span:
        carrier: dict[str, str] = {}
        if span.is_recording():
            propagate.inject(carrier)
        yield carrier
