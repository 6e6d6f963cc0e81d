"""What Nexus reads of a process definition comes from its YAML: shapes, plans, kinds and the data schemas."""

from __future__ import annotations

import enum
import importlib
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexus import metrics
from nexus.core import definitions
from nexus.core.envelope import json_schemas
from nexus.core.step_data import problem
from nexus.processes import builtin_catalog, compile_sources, dir_sources, shipped, shipped_kinds
from nexus_lab.agent import paths
from nexus_wire.envelope import Int64, Timestamp

# The pydantic models order.yaml's data schemas replace, as they were: the YAML must refuse all they refused.
Amount = Annotated[Decimal, Field(ge=0)]
Currency = Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
Identifier = Annotated[str, Field(min_length=1, max_length=200)]


def data_problem(step: str, data: dict[str, Any]) -> str | None:
    """What the default process's schema of `step` says of `data` (as its orders' steps are judged)."""
    return problem(shipped().steps[step].data_schema, data)


class _Data(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class _Item(_Data):
    product_id: Identifier
    quantity: Int64 = Field(gt=0)
    unit_price: Amount


class _OrderCreated(_Data):
    user_id: Identifier | None = None
    items: list[_Item] = Field(default_factory=list)
    total_amount: Amount = Decimal(0)
    currency: Currency = "USD"


class _InventoryValidated(_Data):
    warehouse_id: Identifier | None = None
    reserved_items: list[_Item] = Field(default_factory=list)


class _PaymentProcessed(_Data):
    payment_id: Identifier | None = None
    amount: Amount = Decimal(0)
    currency: Currency = "USD"
    method: Identifier | None = None


class _OrderShipped(_Data):
    carrier: Identifier | None = None
    tracking_number: Identifier | None = None


class _OrderCompleted(_Data):
    completed_at: Timestamp | None = None


OLD_MODELS: dict[str, type[_Data]] = {
    "OrderCreated": _OrderCreated,
    "InventoryValidated": _InventoryValidated,
    "PaymentProcessed": _PaymentProcessed,
    "OrderShipped": _OrderShipped,
    "OrderCompleted": _OrderCompleted,
}

# JSON values of every kind, weighted toward what the fields expect and their edges.
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=2**63 - 1),
    st.sampled_from([0, 1, 2, 1.0, 2.0, 0.0, -0.0, 2**63 - 1]),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-5, max_value=1e6),
    st.sampled_from(["", "1", "1.50", "-1", "-0", ".5", "5.", "1e3", "abc", "USD", "usd", "EURO", "NaN", "x" * 201]),
    st.sampled_from(["2026-01-01T10:00:00Z", "2026-01-01 10:00", "2026-13-01T10:00", "yesterday", "2026-02-30T00:00"]),
    st.text(max_size=5),
)
_item = st.fixed_dictionaries(
    {
        "product_id": st.one_of(st.just("p"), _scalars),
        "quantity": st.one_of(st.integers(1, 5), st.sampled_from([1.0, 2.0]), _scalars),
        "unit_price": st.one_of(st.just("2.50"), _scalars),
    },
    optional={"note": _scalars},
)
_items = st.lists(_item, max_size=2)
# Mostly valid values, so that one bad field at a time is tried, and anything at all.
_VALID: dict[str, Any] = {
    "user_id": "u",
    "total_amount": "5.00",
    "amount": 5,
    "currency": "USD",
    "warehouse_id": "wh",
    "payment_id": "pay",
    "method": "card",
    "carrier": "c",
    "tracking_number": "t",
    "completed_at": "2026-01-01T10:00:00Z",
}


def _value(field: str) -> st.SearchStrategy[Any]:
    if field in ("items", "reserved_items"):
        return st.one_of(_items, _scalars)
    return st.one_of(st.just(_VALID.get(field)), _scalars, _items)


@st.composite
def step_data(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    step = draw(st.sampled_from(sorted(OLD_MODELS)))
    fields = draw(st.lists(st.sampled_from([*OLD_MODELS[step].model_fields, "extra"]), max_size=4, unique=True))
    return step, {f: draw(_value(f)) for f in fields}


def _old_accepts(step: str, data: dict[str, Any]) -> bool:
    try:
        OLD_MODELS[step].model_validate(data)
    except ValidationError:
        return False
    return True


@settings(max_examples=600, deadline=None)
@given(step_data())
def test_order_yaml_schemas_refuse_what_the_models_refused(case: tuple[str, dict[str, Any]]) -> None:
    """Whatever data a step carries, if the old pydantic model refused it, order.yaml's schema does too."""
    step, data = case
    if not _old_accepts(step, data):
        assert data_problem(step, data) is not None


HONEST = [
    (
        "OrderCreated",
        {
            "user_id": "u",
            "items": [{"product_id": "p", "quantity": 2, "unit_price": "2.50"}],
            "total_amount": 5,
            "currency": "BRL",
            "note": {"any": "thing"},
        },
    ),
    ("OrderCreated", {"items": [{"product_id": "p", "quantity": 1, "unit_price": 0.1}], "total_amount": 0.1}),
    ("OrderCreated", {"total_amount": "1e3", "user_id": None}),
    ("InventoryValidated", {"warehouse_id": "wh", "reserved_items": []}),
    ("PaymentProcessed", {"payment_id": "pay", "amount": "-0", "currency": "EUR", "method": None}),
    ("OrderShipped", {"carrier": "c", "tracking_number": None}),
    ("OrderCompleted", {"completed_at": "2026-01-01T10:00:00"}),
    ("OrderCompleted", {"completed_at": "2026-01-01 10:00+02:00"}),
    ("OrderCompleted", {}),
]


@pytest.mark.parametrize(("step", "data"), HONEST)
def test_order_yaml_schemas_accept_what_the_models_accepted(step: str, data: dict[str, Any]) -> None:
    """Honest data the old models accepted (numbers or decimal strings, offsets optional, extra fields) passes."""
    assert _old_accepts(step, data)
    assert data_problem(step, data) is None


@pytest.mark.parametrize(
    ("step", "data", "message"),
    [
        (
            "OrderCreated",
            {"items": [{"product_id": "p", "quantity": 0, "unit_price": 1}]},
            "data.items.0.quantity: Input should be greater than 0",
        ),
        (
            "OrderCreated",
            {"items": [{"product_id": "p", "quantity": 2.0, "unit_price": 1}]},
            "data.items.0.quantity: Input should be a valid integer",
        ),
        ("OrderCreated", {"total_amount": -1}, "data.total_amount: Input should be greater than or equal to 0"),
        ("PaymentProcessed", {"currency": "usd"}, "data.currency: String should match pattern '^[A-Z]{3}$'"),
        ("PaymentProcessed", {"amount": "-1"}, "data.amount: Input should be greater than or equal to 0"),
        ("PaymentProcessed", {"amount": "NaN"}, "data.amount: Input should be a finite number"),
        ("PaymentProcessed", {"amount": "1,5"}, "data.amount: Input should be a valid decimal"),
        (
            "PaymentProcessed",
            {"amount": True},
            "data.amount: Decimal input should be an integer, float, string or Decimal",
        ),
        (
            "InventoryValidated",
            {"reserved_items": [{"quantity": 1, "unit_price": 1}]},
            "data.reserved_items.0.product_id: Field required",
        ),
        ("OrderCompleted", {"completed_at": "2026-13-01T10:00"}, "data.completed_at: Value error"),
    ],
)
def test_bad_data_names_the_field(step: str, data: dict[str, Any], message: str) -> None:
    """A field the schema refuses is named by its path, in the words the envelope's other answers use."""
    problem = data_problem(step, data)
    assert problem is not None and problem.startswith(message)


CORE = Path(__file__).resolve().parents[2] / "src" / "nexus" / "core"


def test_the_core_names_no_shipped_step() -> None:
    """No module of nexus.core (generated or written) names a step type of a shipped definition: they reach
    the core only as a catalog."""
    names = {name for process in builtin_catalog().latest.values() for name in process.steps}
    found = [
        f"{path.relative_to(CORE)}: {name}"
        for path in sorted(CORE.rglob("*.py"))
        for name in sorted(names)
        if name in path.read_text(encoding="utf-8")
    ]
    assert found == []


def test_the_core_builds_no_enum_from_a_definition() -> None:
    """Every enum of nexus.core is a `class` written in its module's source: none is built from a definition at
    import (as the order process's step types and states once were)."""
    built = []
    for path in sorted(CORE.rglob("*.py")):
        parts = path.relative_to(CORE.parents[1]).with_suffix("").parts
        module = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        source = path.read_text(encoding="utf-8")
        for name, value in vars(module).items():
            ours = isinstance(value, type) and issubclass(value, enum.Enum) and value.__module__ == module.__name__
            if ours and f"class {value.__name__}(" not in source:
                built.append(f"{module.__name__}.{name}")
    assert built == []


def test_a_shipped_definition_loads_as_a_users_does(tmp_path: Path) -> None:
    """A shipped definition's file, put in a user's NEXUS_PROCESS_DIR, compiles to the very process the
    registry ships (same content hash, steps, states and transitions)."""
    folder = Path(__file__).resolve().parents[2] / "src" / "nexus" / "processes"
    for path in sorted(folder.glob("*.yaml")):
        (tmp_path / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    users = {p.name: p for p in compile_sources(dir_sources(tmp_path))}
    assert set(users) == set(builtin_catalog().latest) == {"order", "fulfilment", "order_reviewed", "refund"}
    for name, user in users.items():
        ours = shipped(name)
        assert (ours.content_hash, ours.definition, dict(ours.allowed)) == (
            user.content_hash,
            user.definition,
            dict(user.allowed),
        )


def test_plans_are_the_paths_through_the_definitions() -> None:
    """The order has one plan, its five steps; refund three (automatic, reviewed and paid, reviewed and rejected)."""
    order = definitions.plans(shipped("order"))
    assert order == (("OrderCreated", "InventoryValidated", "PaymentProcessed", "OrderShipped", "OrderCompleted"),)
    refund = definitions.plans(shipped("refund"))
    assert refund == (
        ("RefundRequested", "RefundAutoApproved", "RefundPaid"),
        ("RefundRequested", "RefundReviewStarted", "RefundReviewApproved", "RefundPaid"),
        ("RefundRequested", "RefundReviewStarted", "RefundReviewRejected"),
    )
    assert {definitions.status_after(shipped("refund"), p) for p in refund} == {"paid", "rejected"}


def test_event_schemas_carry_the_definitions_data() -> None:
    """schemas/events/<step>.json's `data` is the step's `data:` schema in its definition (order's and refund's
    alike), one file per step type of the shipped definitions and per built-in step."""
    schemas = json_schemas(builtin_catalog())
    order = builtin_catalog().get("order")
    assert order is not None
    for name, compiled in order.steps.items():
        assert schemas[name]["properties"]["data"] == compiled.step.data
    refund = builtin_catalog().get("refund")
    assert refund is not None
    assert schemas["RefundRequested"]["properties"]["data"] == refund.steps["RefundRequested"].step.data
    assert schemas["RefundPaid"]["properties"]["data"] == {"type": "object"}  # declares none: any object
    assert set(schemas) == set(shipped_kinds())


def test_metrics_kinds_come_from_the_definitions() -> None:
    """Events are counted by the step types of every shipped definition (refund's too) and the built-ins."""
    kinds = set(definitions.event_kinds(builtin_catalog()))
    assert {"RefundPaid", "OrderCreated", "ABORT_PLAN", "REPLAN"} <= kinds
    metrics.born_event_kinds(shipped_kinds())
    assert kinds | {"unknown"} == metrics._KNOWN_KINDS


def test_date_time_format_reads_as_the_timestamp() -> None:
    """`format: date-time` accepts what the envelope's timestamp accepts (no offset: UTC) and refuses the rest."""
    assert data_problem("OrderCompleted", {"completed_at": "2026-01-01T00:00:00"}) is None
    assert data_problem("OrderCompleted", {"completed_at": "2026-01-01"}) is not None


def test_refund_plans_validate_against_their_event_schemas() -> None:
    """Every event of the lab's refund plans validates against schemas/events/<its type>.json."""
    schemas = json_schemas(builtin_catalog())
    for i in range(20):
        plan = paths.refund_plan(f"schema:{i}", 0.3, 0.3)
        for seq, (name, data) in enumerate(zip(plan.shape, plan.data, strict=True), start=1):
            body = {
                "event_id": "6f1c2b9e-3a5d-4c7e-8f10-2b3c4d5e6f70",
                "event_type": name,
                "plan_id": "p",
                "order_id": "o",
                "timestamp": "2026-01-01T00:00:00Z",
                "data": data,
                "process": "refund",
            }
            if name != "ABORT_PLAN":
                body["seq_id"] = seq
            jsonschema.validate(body, schemas[name])
