"""Notification ids (the Idempotency-Key) are UUIDv5 of the event, whatever computes them."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from nexus.core.decide.rows import _OUTBOX_NAMESPACE, outbox_id_for


@given(st.uuids(), st.one_of(st.just("default"), st.text(min_size=1, max_size=20)))
def test_outbox_id_is_uuid5_of_the_event(event_id: uuid.UUID, tenant: str) -> None:
    """The id equals the standard library's uuid5 of the same name, bit for bit, as a UUID of version 5."""
    name = str(event_id) if tenant == "default" else f"{tenant}\x1f{event_id}"
    expected = uuid.uuid5(_OUTBOX_NAMESPACE, name)
    made = outbox_id_for(event_id, tenant)
    assert made == expected and str(made) == str(expected) and hash(made) == hash(expected)
    assert made.version == 5 and made.variant == uuid.RFC_4122 and made.bytes == expected.bytes
