"""The wire format: strict envelopes and JSON Schemas that agree with the models."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from nexus.core.envelope import json_schemas, parse_envelope
from nexus.errors import ErrorCode, InvalidEventError
from nexus.processes import builtin_catalog
from nexus.processes.schemas_export import render
from tests.factories import abort_json, replan_json, step_json

ROOT = Path(__file__).resolve().parents[2]


def test_valid_step_parses() -> None:
    """A well-formed step parses into an envelope with its type and seq."""
    env = parse_envelope(json.dumps(step_json("o1", "p1", 3)))
    assert env.seq_id == 3
    assert env.event_type == "PaymentProcessed"
    assert env.tenant_id == "default"


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda e: e.update(event_type="Order Teleported!"), "event_type"),
        (lambda e: e.pop("order_id"), "order_id"),
        (lambda e: e.pop("seq_id"), "needs a seq_id"),
        (lambda e: e.update(seq_id=0), "seq_id"),
        (lambda e: e.update(event_id="not-a-uuid"), "event_id"),
        (lambda e: e.update(timestamp="yesterday"), "timestamp"),
        (lambda e: e.update(schema_version="2.0"), "schema_version"),
        (lambda e: e.update(surprise=True), "surprise"),
    ],
)
def test_invalid_envelopes_are_invalid_event(mutate, fragment) -> None:  # type: ignore[no-untyped-def]
    """Malformed types, missing fields, bad seq and extra fields are INVALID_EVENT."""
    event = step_json("o1", "p1", 1)
    mutate(event)
    with pytest.raises(InvalidEventError) as info:
        parse_envelope(json.dumps(event))
    assert info.value.code is ErrorCode.INVALID_EVENT
    assert fragment in str(info.value)


def test_step_data_is_left_to_the_orders_process() -> None:
    """A negative amount parses: the envelope cannot know the order's process, whose schema judges the data."""
    event = step_json("o1", "p1", 1)
    event["data"]["total_amount"] = -1
    assert parse_envelope(json.dumps(event)).data["total_amount"] == -1


def test_timestamp_without_offset_is_read_as_utc() -> None:
    """A timestamp without an offset (datetime.utcnow().isoformat()) is accepted and read as UTC."""
    env = parse_envelope(step_json("o1", "p1", 1, timestamp="2026-01-01T10:00:00"))
    assert env.timestamp.isoformat() == "2026-01-01T10:00:00+00:00"


def test_float_arithmetic_amounts_are_accepted() -> None:
    """Amounts computed in binary floating point (0.1 * 3) are valid; only a negative amount is not."""
    event = step_json("o1", "p1", 1)
    event["data"]["total_amount"] = 0.1 * 3
    event["data"]["items"][0]["unit_price"] = 0.1
    assert str(parse_envelope(json.dumps(event)).data["total_amount"]) == "0.30000000000000004"


def test_abort_plan_rejects_seq_id() -> None:
    """ABORT_PLAN carries no seq_id, and needs a reason and an abort code."""
    with pytest.raises(InvalidEventError, match="no seq_id"):
        parse_envelope(abort_json("o1", "p1", seq_id=2))
    bad = abort_json("o1", "p1")
    bad["data"]["abort_code"] = "bored"
    with pytest.raises(InvalidEventError, match="abort_code"):
        parse_envelope(bad)


def test_not_json_is_parse_error() -> None:
    """Bytes that are not JSON are PARSE_ERROR, not INVALID_EVENT."""
    with pytest.raises(InvalidEventError) as info:
        parse_envelope(b"{nope")
    assert info.value.code is ErrorCode.PARSE_ERROR


def test_committed_schemas_match_models() -> None:
    """schemas/events/ holds exactly what the models export (run `make schemas` after changing them)."""
    folder = ROOT / "schemas" / "events"
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in folder.glob("*.json")}
    assert on_disk == render()


@pytest.mark.parametrize("seq", [1, 2, 3, 4, 5])
def test_schema_and_model_agree_on_samples(seq: int) -> None:
    """A step the model accepts validates against its schema, and a seq_id below 1 fails both."""
    schemas = json_schemas(builtin_catalog())
    good = step_json("o1", "p1", seq)
    jsonschema.validate(good, schemas[good["event_type"]])
    parse_envelope(good)
    wrong_seq = dict(good, seq_id=0)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong_seq, schemas[good["event_type"]])
    with pytest.raises(InvalidEventError):
        parse_envelope(wrong_seq)


def test_abort_schema_agrees_with_model() -> None:
    """ABORT_PLAN validates against its schema, and without a reason fails both."""
    schema = json_schemas(builtin_catalog())["ABORT_PLAN"]
    good = abort_json("o1", "p1", 2)
    jsonschema.validate(good, schema)
    parse_envelope(good)
    bad = abort_json("o1", "p1", 2)
    del bad["data"]["reason"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    with pytest.raises(InvalidEventError):
        parse_envelope(bad)


def test_replan_schema_agrees_with_model() -> None:
    """REPLAN has its schema; without new_plan_id, or with a seq_id, it fails both."""
    schema = json_schemas(builtin_catalog())["REPLAN"]
    good = replan_json("o1", "p1", "p2")
    jsonschema.validate(good, schema)
    parse_envelope(good)
    for bad in ({**good, "data": {"reason": "r"}}, {**good, "seq_id": 3}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
        with pytest.raises(InvalidEventError):
            parse_envelope(bad)
