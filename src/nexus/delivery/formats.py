"""Webhook body formats: `native` (the notification payload as stored) or `cloudevents`
(CloudEvents 1.0, structured mode, `application/cloudevents+json`). Both are signed the same way: the
signature covers the exact bytes sent."""

from __future__ import annotations

import datetime as dt
import json
import urllib.parse
from typing import Any

NATIVE = "native"
CLOUDEVENTS = "cloudevents"
FORMATS = (NATIVE, CLOUDEVENTS)
CLOUDEVENTS_CONTENT_TYPE = "application/cloudevents+json"
SEQUENCE_DIGITS = 20
"""The CloudEvents `sequence` extension compares values as strings: a position is zero-padded to 20 digits
(any 64-bit position fits), so "00000000000000000010" sorts after "00000000000000000009"."""


def _segment(value: object) -> str:
    """One path segment of `source`: everything but RFC 3986's unreserved characters percent-encoded."""
    return urllib.parse.quote(str(value), safe="")


def cloudevent(payload: dict[str, Any], created_at: dt.datetime) -> dict[str, Any]:
    """A notification payload as a structured CloudEvent; the native payload is its `data`."""
    tenant = payload.get("tenant_id") or "default"
    return {
        "specversion": "1.0",
        "id": payload["notification_id"],
        "source": f"/nexus/tenants/{_segment(tenant)}/orders/{_segment(payload['order_id'])}",
        "type": f"nexus.order.{payload['event_type']}",
        "subject": payload["order_id"],
        "time": created_at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        "datacontenttype": "application/json",
        # extension attributes (lower-case alphanumeric names, string values)
        "tenantid": tenant,
        "planid": payload["plan_id"],
        "sequence": str(payload["position"]).zfill(SEQUENCE_DIGITS),
        "data": payload,
    }


def render_body(fmt: str | None, body: str, created_at: dt.datetime) -> tuple[bytes, str]:
    """(bytes to send, content type) of a stored notification payload in a subscription's format."""
    if fmt == CLOUDEVENTS:
        event = cloudevent(json.loads(body), created_at)
        return json.dumps(event, separators=(",", ":")).encode(), CLOUDEVENTS_CONTENT_TYPE
    return body.encode(), "application/json"
