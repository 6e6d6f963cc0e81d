"""The Kafka ingress's record decoder (ingress/kafka_decode.py) gives the strict decoder's item, always."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.core.decide.items import Incoming
from nexus.ingress.kafka_decode import decode_record
from nexus.ingress.tenants import bind_or_dead_letter

CORPUS = Path(__file__).resolve().parents[1] / "golden" / "corpus.jsonl"
TOPIC_TENANT = "default"
ACTOR = "kafka:nexus.events"


def strict(value: bytes, tenant: str = TOPIC_TENANT) -> Incoming:
    return bind_or_dead_letter(Incoming.parse(value, traceparent="tp"), tenant, ACTOR)


def same(a: Incoming, b: Incoming) -> bool:
    """Equal items; an error compares by its type, code and message (exceptions compare by identity)."""
    if (a.error is None) != (b.error is None):
        return False
    if (
        a.error is not None
        and b.error is not None
        and (type(a.error), a.error.code, str(a.error)) != (type(b.error), b.error.code, str(b.error))
    ):
        return False
    plain = {"error": None}
    return a.__class__(**{**_fields(a), **plain}) == b.__class__(**{**_fields(b), **plain})


def _fields(item: Incoming) -> dict[str, Any]:
    return {name: getattr(item, name) for name in item.__dataclass_fields__}


def corpus_items() -> list[str]:
    items: list[str] = []
    for line in CORPUS.read_text().splitlines():
        for action in json.loads(line).get("actions", [json.loads(line)]):
            items.extend(i for i in action.get("items", []) if isinstance(i, str))
    return items


def envelope(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "event_id": str(uuid.UUID(int=7)),
        "event_type": "OrderCreated",
        "plan_id": "p-1",
        "order_id": "o-1",
        "seq_id": 1,
        "timestamp": "2026-01-01T00:00:00Z",
        "data": {
            "user_id": "u1",
            "items": [{"product_id": "p", "quantity": 2, "unit_price": "3.50"}],
            "total_amount": "7.00",
            "currency": "USD",
        },
    }
    base.update(changes)
    return base


VALID = json.dumps(envelope()).encode()
ABORT = {"reason": "r", "abort_code": "manual", "aborted_at_seq": 0}
TRICKY = [
    VALID,
    json.dumps(envelope(tenant_id="default")).encode(),
    json.dumps(envelope(tenant_id="other")).encode(),  # another tenant: TENANT_MISMATCH
    VALID.replace(b'"plan_id"', b'"order_id": "o-2", "plan_id"'),  # a duplicate key at the top
    VALID.replace(b'"user_id"', b'"currency": "EUR", "user_id"'),  # a duplicate key inside data
    VALID.replace(b'"quantity": 2', b'"quantity": 2, "quantity": 3'),  # inside a list's object
    VALID.replace(b'"seq_id": 1', b'"seq_id": 9223372036854775808'),  # past int64
    VALID.replace(b'"seq_id": 1', b'"seq_id": 9223372036854775807'),  # int64's edge
    VALID.replace(b'"seq_id": 1', b'"seq_id": 1e309'),
    VALID.replace(b'"seq_id": 1', b'"seq_id": NaN'),
    VALID.replace(b'"seq_id": 1', b'"seq_id": 1.0'),
    VALID.replace(b'"seq_id": 1', b'"seq_id": true'),
    VALID.replace(b'"user_id": "u1"', b'"user_id": "u\\ud800"'),  # a lone surrogate
    VALID.replace(b'"user_id": "u1"', b'"user_id": "u\\"1:{["'),  # an escaped quote, a colon, brackets
    VALID.replace(b'"user_id": "u1"', b'"user_id": "\xff"'),  # not UTF-8
    VALID.replace(b'"user_id": "u1"', b'"user_id": "a\x01b"'),  # a control character
    VALID.replace(b'"user_id": "u1"', b'"note": ' + b"[" * 40 + b"]" * 40 + b', "user_id": "u1"'),  # too deep
    VALID.replace(b'"user_id": "u1"', b'"note": ' + b"[" * 29 + b"]" * 29 + b', "user_id": "u1"'),  # just fits
    b"\xef\xbb\xbf" + VALID,  # a byte order mark
    VALID + b" x",
    b"[1, 2]",
    b"",
    b"{not json",
    json.dumps(envelope(seq_id=None)).encode(),  # INVALID_EVENT
    json.dumps(envelope(order_id="bad id")).encode(),  # INVALID_IDENTIFIER
    json.dumps(envelope(event_type="ABORT_PLAN", seq_id=None, data=ABORT)).encode(),
]


@pytest.mark.parametrize("value", TRICKY, ids=range(len(TRICKY)))
def test_tricky_records_decode_as_the_strict_path_does(value: bytes) -> None:
    """Duplicate keys, int64's bounds, non-finite numbers, bad UTF-8, depth, tenants: the same item and error."""
    assert same(decode_record(value, "tp", TOPIC_TENANT, ACTOR), strict(value))


def test_every_golden_corpus_item_decodes_as_the_strict_path_does() -> None:
    """Each envelope of the golden corpus, under either topic tenant, is the same item by both decoders."""
    items = corpus_items()
    assert len(items) > 50
    for raw in items:
        for tenant in (TOPIC_TENANT, "t-other"):
            assert same(decode_record(raw.encode(), "tp", tenant, ACTOR), strict(raw.encode(), tenant)), raw


json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=False),
        st.text(alphabet='"\\:{}[]ab\x00\u00e9', max_size=5),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(alphabet='":\\{ab', max_size=3), children, max_size=3)
    ),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_any_document_as_data_decodes_as_the_strict_path_does(value: Any, duplicate: bool) -> None:
    """Arbitrary JSON under `data` (and a duplicated key spliced in) never makes the two decoders differ."""
    body = json.dumps(envelope(event_type="CustomStep", data={"x": value})).encode()
    if duplicate:
        body = body.replace(b'"data": {', b'"data": {"x": 1, ', 1)
    assert same(decode_record(body, "tp", TOPIC_TENANT, ACTOR), strict(body))
