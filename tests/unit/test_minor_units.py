"""Money in minor units: the shortcut for plain amounts gives exactly what the Decimal computation gives, and an
amount too long for a minor unit is invalid data, never an exception."""

from __future__ import annotations

import re
from decimal import Decimal
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.core.checks import minor_by_decimal, money_problem, to_minor
from nexus.core.decide.validation import data_verdict
from nexus.core.envelope import parse_envelope
from nexus.core.process_checks import validate_step
from nexus.errors import ErrorCode
from nexus.processes import builtin_catalog
from tests.factories import step_json


def result(convert: object, value: object, exponent: int) -> tuple[object, type]:
    try:
        out = convert(value, exponent)  # type: ignore[operator]
    except Exception as exc:  # an error is a result to compare too
        return ("raised", type(exc))
    return (out, type(out))


amounts = st.one_of(
    st.from_regex(r"\A[0-9\u0663\u00b2]{0,22}(\.[0-9\u0663]{0,5})?\Z"),
    st.text(alphabet="0123456789.+-eE _", max_size=8),
    st.integers(),
    st.integers(min_value=-(10**16), max_value=10**16),
    st.floats(allow_nan=False),
    st.booleans(),
)


@settings(max_examples=3000)
@given(amounts, st.sampled_from([0, 2, 3]))
def test_plain_amounts_convert_as_decimal_does(value: object, exponent: int) -> None:
    """Digit strings (with non-ASCII digits, too many decimals, signs, spaces), integers of any size,
    floats and booleans convert (or fail) exactly as the Decimal computation does."""
    assert result(to_minor, value, exponent) == result(minor_by_decimal, value, exponent)


numerals = st.one_of(
    st.from_regex(r"\A[+-]?[0-9]{1,40}(\.[0-9]{0,40})?([eE][+-]?[0-9]{1,22})?\Z"),
    st.integers(min_value=-(10**60), max_value=10**60),
    st.floats(allow_nan=True, allow_infinity=True),
)


@settings(max_examples=1500)
@given(numerals, st.sampled_from([0, 2, 3]))
def test_no_amount_makes_the_conversion_raise(value: object, exponent: int) -> None:
    """Any number or numeral, however long (`1e26`, 40 digits, `1e999999`), converts to an int or comes back
    unchanged; it never raises (a raise in `validate_step` failed the whole batch)."""
    out = to_minor(value, exponent)
    assert type(out) is int or out is value


@settings(max_examples=1500)
@given(st.one_of(numerals, amounts), st.sampled_from([0, 2, 3]))
def test_the_shortcut_for_usual_amounts_agrees_with_converting_them(value: object, exponent: int) -> None:
    """`money_problem` skips converting short amounts; it refuses exactly the numbers and numerals the
    conversion cannot hold (booleans and words are no amounts: the schema judges them)."""
    numeral = isinstance(value, str) and re.fullmatch(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?", value)
    amount = type(value) in (int, float) or bool(numeral)
    refused = amount and type(to_minor(value, exponent)) is not int
    assert (money_problem({"a": value}, ["a"], exponent) is not None) == refused


def test_an_amount_too_long_is_named_by_its_path_never_its_value() -> None:
    """`money_problem` names the first money field whose amount no minor unit holds, by its path (list elements
    by index), and passes amounts that convert, non-numerals and values that are not amounts."""
    huge = "99999999999999999999999999999.99"
    data = {"total_amount": "10.00", "items": [{"unit_price": 1}, {"unit_price": huge}], "note": huge}
    problem = money_problem(data, ["total_amount", "items.unit_price"], 2)
    assert (
        problem
        == "data.items.1.unit_price: " + "Input should be an amount of at most 28 digits in the currency's minor unit"
    )
    assert money_problem({"total_amount": "1e26"}, ["total_amount"], 2) is not None
    assert money_problem({"total_amount": "1e25"}, ["total_amount"], 2) is None
    assert money_problem({"total_amount": 10**30, "x": "abc"}, ["x", "missing.y"], 2) is None


def test_an_amount_too_long_is_found_in_mappings_that_are_not_dicts() -> None:
    """`money_problem` walks any mapping (a read-only view, a nested one, one inside a list) as it walks a dict."""
    huge = "99999999999999999999999999999.99"
    data = MappingProxyType({"items": [MappingProxyType({"unit_price": huge})], "fee": MappingProxyType({"v": huge})})
    too_long = ": Input should be an amount of at most 28 digits in the currency's minor unit"
    assert money_problem(data, ["items.unit_price"], 2) == "data.items.0.unit_price" + too_long
    assert money_problem(data, ["fee.v"], 2) == "data.fee.v" + too_long


def test_a_too_long_amount_is_invalid_data_on_arrival_and_when_it_would_apply() -> None:
    """On arrival `data_verdict` says INVALID_EVENT with the path; a step judged only when it would apply (it
    came before its order's first step) is REJECTED CHECK_FAILED `data`; its facts never raise."""
    order = builtin_catalog().latest["order"]
    body = step_json("o-1", "p-1", 1)
    body["data"]["total_amount"] = "1e26"
    verdict = data_verdict(order, parse_envelope(body))
    assert verdict is not None and verdict.code == ErrorCode.INVALID_EVENT
    assert verdict.message.startswith("data.total_amount: Input should be an amount") and "1e26" not in verdict.message
    late = validate_step(order, None, {}, "OrderCreated", 1, body["data"], {"max_order_amount": 100000})
    assert late is not None and (late.code, late.check) == (ErrorCode.CHECK_FAILED, "data")
    assert late.message == verdict.message
    assert order.facts_after({}, "OrderCreated", body["data"])["total_amount"] == "1e26"


def test_a_tenant_limit_too_long_for_minor_units_judges_steps_without_raising() -> None:
    """A tenant's `max_order_amount` of 1e30 (the CLI takes any non-negative amount) reaches CEL unconverted:
    a step under it applies, where the conversion raised and failed every batch of the tenant."""
    order = builtin_catalog().latest["order"]
    data = step_json("o-1", "p-1", 1)["data"]
    assert validate_step(order, None, {}, "OrderCreated", 1, data, {"max_order_amount": Decimal("1e30")}) is None
