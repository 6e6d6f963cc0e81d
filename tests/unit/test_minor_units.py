"""Money in minor units: the shortcut for plain amounts gives exactly what the Decimal computation gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.core.checks import minor_by_decimal, to_minor


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
