"""The shared package (nexus_wire) is the envelope's shape and the values both sides use; the gateway's envelope
is the same model (a step's data is judged later, by the order's own process). The gateway imports the shared
names from nexus_wire itself: no module of src/ re-exports them (tests/unit/test_code_size.py)."""

from __future__ import annotations

import pydantic
import pytest

import nexus_wire
from nexus.core import envelope as gateway
from nexus.core.decide.validation import data_verdict
from nexus.errors import ErrorCode, InvalidEventError
from nexus.processes import builtin_catalog
from nexus_client._protocol import envelope_json
from tests.factories import abort_json, step_json


def test_the_wire_checks_the_shape_and_the_gateway_the_data() -> None:
    """A payment with a negative amount is a well-formed envelope on the wire and at parse time (neither can
    know the order's process), and INVALID_EVENT naming the field when the order's process judges it."""
    body = step_json("o-1", "p-1", 3)
    body["data"] = {**body["data"], "amount": -1}
    wire = nexus_wire.EventEnvelope.model_validate(body)
    assert wire.data["amount"] == -1
    verdict = data_verdict(builtin_catalog().get("order"), gateway.parse_envelope(body))
    assert verdict is not None and verdict.code is ErrorCode.INVALID_EVENT
    assert verdict.message.startswith("data.amount: ")


def test_both_refuse_a_malformed_envelope_alike() -> None:
    """An ABORT_PLAN carrying a seq_id, and a step without one, are refused by the wire's model itself."""
    aborted = {**abort_json("o-1", "p-1"), "seq_id": 2}
    numberless = {k: v for k, v in step_json("o-1", "p-1", 1).items() if k != "seq_id"}
    for body, words in ((aborted, "carries no seq_id"), (numberless, "needs a seq_id")):
        with pytest.raises(pydantic.ValidationError, match=words):
            nexus_wire.EventEnvelope.model_validate(body)
        with pytest.raises(InvalidEventError, match=words):
            gateway.parse_envelope(body)


def test_a_gateway_envelope_is_a_wire_envelope() -> None:
    """The gateway's envelope extends the wire's, so the SDK sends one as it is (the lab builds them), and the
    two encode alike."""
    body = step_json("o-1", "p-1", 1)
    parsed = gateway.parse_envelope(body)
    assert isinstance(parsed, nexus_wire.EventEnvelope)
    assert envelope_json(parsed) == envelope_json(nexus_wire.EventEnvelope.model_validate(body))
