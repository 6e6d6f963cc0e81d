"""The strict decoder's compiled path (orjson) answers exactly what its standard-library path answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nexus.core import strict_json
from nexus.core.strict_json import InputLimits, OversizedInt, loads
from nexus.errors import InvalidEventError

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet='[]{}":,\\ab\x00\u00e9', max_size=6),
)
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.text(alphabet='[]{}":\\ab', max_size=3), children, max_size=3),
    ),
    max_leaves=30,
)


def strict_only(body: bytes, limits: InputLimits) -> Any:
    """The standard-library path alone (the decoder before the compiled path existed)."""
    fast = strict_json._fast
    try:
        strict_json._fast = lambda raw, depth: strict_json._SLOW  # type: ignore[assignment]
        return loads(body, limits)
    finally:
        strict_json._fast = fast  # type: ignore[assignment]


def outcome(body: bytes, decode: Any) -> Any:
    limits = InputLimits(max_depth=4)
    try:
        value = decode(body, limits)
    except InvalidEventError as exc:
        return ("error", exc.code, str(exc))
    return ("value", json.dumps(value, sort_keys=False), strict_json.find_oversized_int(value))


def with_duplicate(doc: Any) -> bytes:
    body = json.dumps(doc).encode()
    return body.replace(b"{", b'{"a": 1, "a": 2, ', 1) if body.startswith(b"{") and len(body) > 2 else body


@given(documents)
def test_the_compiled_path_decodes_as_the_strict_one(doc: Any) -> None:
    """Any document (big integers, floats, escapes, NUL, depth past the limit) decodes to the same value, or
    is refused with the same code and message, with or without the compiled path."""
    body = json.dumps(doc).encode()
    assert outcome(body, loads) == outcome(body, strict_only)


@given(documents)
def test_duplicate_keys_are_refused_on_either_path(doc: Any) -> None:
    """A document with a key twice in one object is refused exactly as the strict path refuses it."""
    body = with_duplicate(doc)
    assert outcome(body, loads) == outcome(body, strict_only)


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": 1, "a": 2}',
        b'{"a" : 1, "b": {"c": 1, "c" : 2}}',
        b'{"a\\"": 1, "a\\"": 2}',
        b'{"t": "12:00:00", "t": "x"}',
        b"[NaN]",
        b"[1e309]",
        b"[18446744073709551616]",
        b"[9223372036854775808]",
        b"[-9223372036854775809]",
        b'["\\ud800"]',
        b'\xef\xbb\xbf{"a": 1}',
        b'{"a": "\\u0000"}',
        b"[[[[[1]]]]]",
    ],
)
def test_what_the_compiled_decoder_would_get_wrong_goes_the_strict_way(body: bytes) -> None:
    """Duplicate keys (spaced, escaped, beside colons in strings), non-finite numbers, integers beyond
    int64, lone surrogates, a BOM and nesting past the limit answer as the strict path answers."""
    assert outcome(body, loads) == outcome(body, strict_only)


def test_integers_beyond_int64_stay_markers() -> None:
    """An integer past int64 is still the marker (never orjson's float), so its item is INVALID_EVENT."""
    value = loads(b'{"a": [1, 9223372036854775808]}')
    assert isinstance(value["a"][1], OversizedInt)


def test_a_wide_shallow_document_takes_the_compiled_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1,000-item step or batch has thousands of brackets but nests four deep: it is decoded by orjson
    alone (the standard-library path, several times slower, is not called)."""
    items = [{"product_id": f"p{i}", "quantity": 1, "unit_price": 1} for i in range(1000)]
    body = json.dumps({"data": {"items": items, "total_amount": 1}}).encode()

    def not_called(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the standard-library decoder was called")

    monkeypatch.setattr(strict_json.json, "loads", not_called)
    assert loads(body, InputLimits(max_depth=4))["data"]["items"][999]["product_id"] == "p999"


@pytest.mark.parametrize("depth", [3, 4, 5])
def test_nesting_is_measured_on_wide_documents(depth: int) -> None:
    """Many containers, the deepest `depth` levels down (an empty list at the bottom: an empty container is a
    level too): within a limit of 4 it decodes as the strict path does, past it NESTING_TOO_DEEP on both."""
    inner: Any = []
    for _ in range(depth - 3):  # the outer list and its objects are the first two levels, [] the third
        inner = [inner]
    body = json.dumps([{"a": inner} for _ in range(300)] + [[] for _ in range(300)]).encode()
    assert outcome(body, loads) == outcome(body, strict_only)
    assert (outcome(body, loads)[0] == "error") == (depth > 4)
