"""The SDK as a user writes it: `EventEnvelope` from `nexus_client`, a non-default tenant's key, typed
refusals (code, check, message) on `StepResult`."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from typing import Any

import pytest

import nexus_client
from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.store.database import Database
from nexus_client import ClientConfig, EventEnvelope, NexusClient, StepResult
from nexus_client._protocol import encode_steps
from nexus_wire.codes import Decision
from tests.factories import step

pytestmark = pytest.mark.slow

CREATED = {
    "user_id": "u1",
    "items": [{"product_id": "p", "quantity": 1, "unit_price": 10}],
    "total_amount": 10,
    "currency": "USD",
}


def test_the_package_exports_the_envelope_results_and_errors() -> None:
    """`from nexus_client import ...` reaches the envelope, the results and every error type."""
    for name in ("EventEnvelope", "StepResult", "SubmitResult", "ApiError", "ClientError", "NotFound",
                 "Unavailable", "GatewayUnreachable", "WaitTimeout"):  # fmt: skip
        assert name in nexus_client.__all__ and hasattr(nexus_client, name), name
    assert {"code", "check", "message", "approval_id"} <= set(StepResult.model_fields)


def test_tenant_id_is_sent_only_when_the_caller_set_it() -> None:
    """An envelope built without `tenant_id` is encoded without it (one or a batch); one that sets it keeps it."""
    plain = step("o", "p", 1)
    named = step("o", "p", 2, tenant_id="acme")
    assert "tenant_id" not in json.loads(encode_steps(plain))
    batch = json.loads(encode_steps([plain, named]))["events"]
    assert "tenant_id" not in batch[0] and batch[1]["tenant_id"] == "acme"


async def test_an_agent_with_a_non_default_tenants_key_submits_and_reads_typed_refusals(
    start_gateway: Any, db: Database
) -> None:
    """acme's agent key: a step built from `nexus_client.EventEnvelope` applies under acme (no
    TENANT_MISMATCH); a wrong amount comes back REJECTED with its code, check and message as fields."""
    _, base = start_gateway("--no-dispatcher")
    _, key = await create_key(db, "acme", frozenset({Role.AGENT}))

    def envelope(seq: int, event_type: str, data: dict[str, Any]) -> EventEnvelope:
        return EventEnvelope(
            event_id=uuid.uuid4(),
            event_type=event_type,
            plan_id="sdk-plan",
            order_id="sdk-acme-1",
            seq_id=seq,
            timestamp=dt.datetime.now(dt.UTC),
            data=data,
        )

    await asyncio.to_thread(_agent, base, key, envelope)


def _agent(base: str, key: str, envelope: Any) -> None:
    with NexusClient(ClientConfig(gateway_url=base, api_key=key)) as client:
        first = client.submit(envelope(1, "OrderCreated", CREATED)).first
        assert first.decision is Decision.APPLY, first
        assert client.submit(envelope(2, "InventoryValidated", {})).first.decision is Decision.APPLY
        wrong = client.submit(envelope(3, "PaymentProcessed", {"payment_id": "x", "amount": 99, "currency": "USD"}))
        refused = wrong.first
        assert (refused.decision, refused.code) == (Decision.REJECTED, "CHECK_FAILED")
        assert refused.check == "payment_amount_matches_order"
        assert refused.message and "amount" in refused.message
        assert client.order("sdk-acme-1").last_seq == 2
