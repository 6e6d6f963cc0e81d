"""CloudEvents webhooks: every attribute valid for the official `cloudevents` SDK, `source` an RFC 3986
URI-reference whatever the tenant or order id holds, and `sequence` ordering as strings as positions do."""

from __future__ import annotations

import datetime as dt
import json
import re
import urllib.parse
from typing import Any

import pytest
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from nexus.core.decide.items import Incoming
from nexus.delivery.formats import CLOUDEVENTS, render_body
from nexus.delivery.subscriptions import add_subscription
from nexus.gateway import Gateway
from nexus.ingress.tenants import bind
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.sink import start_sink
from tests.factories import plan_json
from tests.integration.test_delivery import SECRET, dispatching, wait_until

# RFC 3986, section 3.3 (path-absolute of a relative reference): segments of pchar, where pchar is
# unreserved / pct-encoded / sub-delims / ":" / "@".
_PCHAR = r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})"
PATH_ABSOLUTE = re.compile(rf"^/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?$")

T = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def payload(position: int, tenant: str = "acme", order_id: str = "o-1") -> dict[str, Any]:
    """A stored notification payload, as the outbox holds it."""
    return {
        "notification_id": f"00000000-0000-0000-0000-{position:012d}",
        "tenant_id": tenant,
        "order_id": order_id,
        "plan_id": "p-1",
        "event_type": "OrderCreated",
        "position": position,
    }


def validated(body: bytes) -> CloudEvent:
    """The body read back by the official SDK (which validates every required, optional and extension
    attribute), with `source` checked against RFC 3986 and every extension a string."""
    event = JSONFormat().read(None, body)
    assert isinstance(event, CloudEvent)
    attributes = event.get_attributes()
    assert attributes["specversion"] == "1.0"
    assert PATH_ABSOLUTE.match(event.get_source()), event.get_source()
    assert urllib.parse.urlsplit(event.get_source()).path == event.get_source()
    for name in ("tenantid", "planid", "sequence"):
        assert isinstance(event.get_extension(name), str), name
    assert re.fullmatch(r"\d{20}", event.get_extension("sequence"))
    return event


@pytest.mark.parametrize(
    ("tenant", "order_id"),
    [("acme", "o-1"), ("a b/c?d#e", "order/../x"), ("tenant@host:1", "ü%20"), ("", "o")],
)
def test_source_is_a_uri_reference_whatever_the_identifiers_hold(tenant: str, order_id: str) -> None:
    """Tenant and order id are percent-encoded path segments: `source` parses as RFC 3986 and round-trips."""
    body, _ = render_body(CLOUDEVENTS, _json(payload(1, tenant, order_id)), T)
    event = validated(body)
    segments = event.get_source().split("/")
    assert [urllib.parse.unquote(s) for s in segments[-3:]] == [tenant or "default", "orders", order_id]


def test_sequence_sorts_as_strings_as_positions_sort_as_numbers() -> None:
    """Positions 1..12 and a 64-bit one: zero-padded to 20 digits, so "10" no longer sorts before "9"."""
    positions = [*range(1, 13), 2**63 - 1]
    sequences = [
        validated(render_body(CLOUDEVENTS, _json(payload(p)), T)[0]).get_extension("sequence") for p in positions
    ]
    assert sorted(sequences) == sequences
    assert sequences[8:10] == ["00000000000000000009", "00000000000000000010"]


async def test_delivered_cloudevents_pass_the_official_sdk(db: Database, settings: Settings) -> None:
    """Real notifications delivered to a CloudEvents subscription: each body validates with the SDK, its
    `source` names the tenant and order, its `sequence` is the padded position."""
    sink = await start_sink(secret=SECRET)
    try:
        await add_subscription(db, "ce", sink.url + "/h", SECRET, tenant_id="acme", fmt=CLOUDEVENTS)
        items = [bind(Incoming.parse(e), "acme") for e in plan_json("o-ce", "p-ce", 5)]
        await Gateway(db).submit([i for i in items if i is not None])
        async with dispatching(db, settings):
            await wait_until(lambda: _delivered(db), 15, "delivered")
        events = [validated(json.dumps(r["body"]).encode()) for r in sink.sink.records]
        assert [e.get_extension("sequence") for e in events] == [f"{p:020d}" for p in range(1, 6)]
        assert {e.get_source() for e in events} == {"/nexus/tenants/acme/orders/o-ce"}
    finally:
        await sink.aclose()


async def _delivered(db: Database) -> bool:
    return bool(await db.fetchval("SELECT count(*) = 0 FROM deliveries WHERE state = 'pending'"))


def _json(obj: dict[str, Any]) -> str:
    return json.dumps(obj)
