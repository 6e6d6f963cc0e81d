"""The strict decoder of untrusted JSON (core/strict_json.py): depth measured on bytes, strict literals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nexus.core.strict_json import InputLimits, depth_of, find_oversized_int, loads
from nexus.errors import ErrorCode, InvalidEventError

documents = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(alphabet='[]{}"\\ab', max_size=6)),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(alphabet='[]{}"\\ab', max_size=4), children, max_size=3)
    ),
    max_leaves=40,
)


def true_depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((true_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((true_depth(v) for v in value.values()), default=0)
    return 0


@given(documents)
def test_depth_of_bytes_equals_the_depth_of_the_document(doc: Any) -> None:
    """Brackets inside strings (escaped quotes included) never count; the byte scan agrees with the tree."""
    body = json.dumps(doc).encode()
    assert depth_of(body, cap=64) == min(true_depth(doc), 65)


def test_depth_beyond_the_cap_is_reported_without_recursion() -> None:
    """A million nested arrays is measured as deeper than the cap, and refused before decoding."""
    body = b"[" * 1_000_000 + b"]" * 1_000_000
    assert depth_of(body, cap=32) == 33
    with pytest.raises(InvalidEventError) as info:
        loads(body, InputLimits(max_depth=32))
    assert info.value.code is ErrorCode.NESTING_TOO_DEEP


@pytest.mark.parametrize(
    "body",
    [b'{"a": 1, "a": 2}', b"[NaN]", b"[-Infinity]", b"[1e309]", '{"a": 1}'.encode("utf-16"), b"\xff", b"{"],
)
def test_lenient_json_is_a_parse_error(body: bytes) -> None:
    """Duplicate keys, non-finite numbers, and anything but UTF-8 are PARSE_ERROR."""
    with pytest.raises(InvalidEventError) as info:
        loads(body)
    assert info.value.code is ErrorCode.PARSE_ERROR


def test_integers_beyond_int64_are_found_where_they_are() -> None:
    """An integer past int64 decodes as a marker whose path names it; int64's bounds themselves are fine."""
    doc = loads(b'{"a": [1, {"b": 18446744073709551616}], "c": 9223372036854775807, "d": -9223372036854775808}')
    assert find_oversized_int(doc) == "a.1.b"
    assert find_oversized_int(loads(b"[9223372036854775807, -9223372036854775808]")) is None


@pytest.mark.parametrize(
    "body",
    [
        b'["\\ud800"]',
        b'{"\\udc00": 1}',
        b'["a\\uDBFF"]',
        b'["\\ud800\\u0041"]',
        b'["\\ude00\\ud83d"]',
        b'["\xed\xa0\x80"]',
        '["\ud800"]',
    ],
)
def test_lone_surrogates_escaped_or_raw_are_a_parse_error(body: bytes | str) -> None:
    """A lone surrogate, escaped in a key or string, raw in UTF-8, or in text, is PARSE_ERROR."""
    with pytest.raises(InvalidEventError) as info:
        loads(body)
    assert info.value.code is ErrorCode.PARSE_ERROR


def test_surrogate_pairs_and_escaped_backslashes_are_not_lone() -> None:
    """A proper pair decodes to its character; an escaped backslash before `ud800` is plain text."""
    assert loads(b'["\\ud83d\\ude00", "\\\\ud800"]') == ["\U0001f600", "\\ud800"]
