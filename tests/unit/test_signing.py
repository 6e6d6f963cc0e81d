"""Standard Webhooks signatures: ours verify with the `standardwebhooks` library, and tampering fails."""

from __future__ import annotations

import time

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from nexus.delivery.signing import child_traceparent, delivery_headers, generate_secret, parse_secret, sign, verify
from nexus.errors import ConfigurationError

BODY = b'{"notification_id": "n1", "order_id": "o-1", "position": 1}'


def _headers(secret: str, **overrides: object) -> dict[str, str]:
    args: dict[str, object] = {
        "key": parse_secret(secret),
        "outbox_id": "6b1a7f0e-0000-4000-8000-000000000001",
        "order_id": "o-1",
        "event_type": "OrderCreated",
        "position": 1,
        "attempt": 1,
        "timestamp": int(time.time()),
        "body": BODY,
        "traceparent": None,
    }
    args.update(overrides)
    return delivery_headers(**args)  # type: ignore[arg-type]


def test_headers_verify_with_the_standardwebhooks_library() -> None:
    """The reference library accepts our signature over the exact body bytes."""
    secret = generate_secret()
    assert Webhook(secret).verify(BODY, _headers(secret)) == {"notification_id": "n1", "order_id": "o-1", "position": 1}


def test_tampered_body_or_wrong_secret_fails_verification() -> None:
    """A changed byte or another secret is refused, by the library and by our verify."""
    secret = generate_secret()
    headers = _headers(secret)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY.replace(b"o-1", b"o-2"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_secret()).verify(BODY, headers)
    key = parse_secret(secret)
    ts = int(headers["webhook-timestamp"])
    assert verify(key, headers["webhook-id"], ts, BODY, headers["webhook-signature"])
    assert not verify(key, headers["webhook-id"], ts + 1, BODY, headers["webhook-signature"])
    assert verify(key, "id", 1, b"x", "v0,abc " + sign(key, "id", 1, b"x"))


def test_delivery_headers_carry_the_contract() -> None:
    """Idempotency-Key and webhook-id are the outbox id; position and attempt are as given."""
    secret = generate_secret()
    h = _headers(secret, position=3, attempt=2)
    assert h["idempotency-key"] == h["webhook-id"] == "6b1a7f0e-0000-4000-8000-000000000001"
    assert h["x-aggregate-id"] == "o-1" and h["x-event-type"] == "OrderCreated"
    assert h["x-outbox-position"] == "3" and h["x-delivery-attempt"] == "2"
    assert h["webhook-signature"].startswith("v1,")


def test_traceparent_keeps_the_events_trace() -> None:
    """A request continues the event's trace with a new span; without one it starts a trace."""
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    child = child_traceparent(parent)
    assert child.split("-")[1] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert child.split("-")[2] != "00f067aa0ba902b7"
    fresh = child_traceparent(None).split("-")
    assert len(fresh) == 4 and len(fresh[1]) == 32 and len(fresh[2]) == 16


@pytest.mark.parametrize("bad", ["abc", "whsec_", "whsec_!!!", "whsec_YWJj"])
def test_malformed_secrets_are_configuration_errors(bad: str) -> None:
    """Secrets without the prefix, not base64, or too short are refused up front."""
    with pytest.raises(ConfigurationError):
        parse_secret(bad)
