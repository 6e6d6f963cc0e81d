"""Strict JSON for untrusted input: one parser for every ingress, with limits that bound its cost.

The standard library's decoder is lenient where an attacker profits: it takes the last of duplicate keys,
accepts `NaN`/`Infinity` (stored later as null), turns `1e309` into infinity, and guesses UTF-16/32 from
bytes. Here those are `PARSE_ERROR`. Depth is measured on the bytes before the decoder recurses, so a
body of 5,000 nested arrays costs one linear scan and no stack. Integers are checked against int64
while decoding: larger ones are a type violation (`INVALID_EVENT`), reported for the item that holds
them rather than for the whole body.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
from collections.abc import Callable
from typing import Any

import orjson

from nexus.errors import ErrorCode, InvalidEventError
from nexus_wire.envelope import INT64_MAX

INT64_MIN = -(2**63)

# Escapes first (outside strings a backslash is invalid JSON anyway), then strings have no backslash and
# each one ends at the next quote: two linear passes, whatever the input (no backtracking).
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
# Everything but the four brackets is deleted; what remains is the nesting skeleton of the document.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# A bracket as its effect on the depth (+1 opening, -1 closing), through translate() and a subtraction.
_PAIR = re.compile(rb"\[\]|\{\}")
_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
# 19 digits in a row outside strings: an integer that may be beyond int64 (which orjson turns into a float).
_LONG_NUMBER = re.compile(rb"[0-9]{19}")
# The escape of a UTF-16 surrogate (\uD800-\uDFFF): a string holding one may hold a lone one once decoded.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_SLOW = object()
_PLAIN = frozenset({str, int, float, bool, type(None)})


@dataclasses.dataclass(frozen=True, slots=True)
class InputLimits:
    """Bounds on one request or message; every one is a setting (NEXUS_MAX_*)."""

    max_depth: int = 32
    """Nesting of arrays and objects, counting the outermost one as 1 (an envelope's data.items is 3)."""
    max_string_length: int = 65_536
    max_events: int = 1_000


class OversizedInt(int):
    """An integer literal outside int64, kept (as a marker) so the item holding it is INVALID_EVENT."""


def depth_of(body: bytes, cap: int = 64) -> int:
    """The deepest nesting of arrays/objects in `body` without decoding it (brackets in strings ignored).

    Exact up to `cap`, `cap`+1 beyond it. Each pass deletes the innermost `[]`/`{}` pairs at C speed, so
    the cost is at most `cap`+1 linear passes and the GIL is released between them.
    """
    skeleton = _STRING.sub(b"", _ESCAPE.sub(b"", body)).translate(None, _NOT_BRACKETS)
    for level in range(cap + 1):
        if not skeleton:
            return level
        reduced = _PAIR.sub(b"", skeleton)
        if reduced == skeleton:  # unbalanced (invalid JSON anyway): count what is left
            counted = skeleton.translate(_STEP)
            return max(0, *itertools.accumulate(map(int.__sub__, counted, itertools.repeat(1))))
        skeleton = reduced
    # Pairs were still being removed at level cap+1: deeper than the cap; the exact depth does not matter.
    return cap + 1


def loads(body: bytes | str, limits: InputLimits | None = None) -> Any:
    """Decode strict JSON; raise `InvalidEventError` with PARSE_ERROR, NESTING_TOO_DEEP or PAYLOAD_TOO_LARGE."""
    limits = limits or InputLimits()
    try:
        raw = body if isinstance(body, bytes) else body.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEventError(f"a lone surrogate at position {exc.start}", code=ErrorCode.PARSE_ERROR) from exc
    value = _fast(raw, limits.max_depth)
    if value is not _SLOW:
        return value
    depth = depth_of(raw, limits.max_depth)
    if depth > limits.max_depth:
        raise InvalidEventError(
            f"JSON nested more than {limits.max_depth} levels deep (the limit)",
            code=ErrorCode.NESTING_TOO_DEEP,
        )
    try:
        text = raw.decode("utf-8") if isinstance(body, bytes) else body
    except UnicodeDecodeError as exc:
        raise InvalidEventError(f"not UTF-8: invalid byte at position {exc.start}", code=ErrorCode.PARSE_ERROR) from exc
    try:
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
            parse_float=_finite_float,
            parse_int=_int64,
        )
    except InvalidEventError:
        raise
    except RecursionError as exc:  # the byte scan bounds depth; this is only a second line of defence
        raise InvalidEventError("JSON nested too deep", code=ErrorCode.NESTING_TOO_DEEP) from exc
    except ValueError as exc:
        raise InvalidEventError(f"not JSON: {exc}", code=ErrorCode.PARSE_ERROR) from exc
    if _SURROGATE_ESCAPE.search(raw) is not None and _holds_lone_surrogate(value):
        raise InvalidEventError("a lone surrogate escaped in a string (not UTF-8)", code=ErrorCode.PARSE_ERROR)
    return value


def _holds_lone_surrogate(value: Any) -> bool:
    """Whether a key or string of a decoded document holds a surrogate (pairs were joined while decoding)."""
    return any_string(value, lambda text: _LONE_SURROGATE.search(text) is not None)


def any_string(value: Any, test: Callable[[str], bool]) -> bool:
    """Whether `test` holds for any key or string of a decoded JSON value (iterative: no recursion limit)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if test(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _fast(raw: bytes, max_depth: int) -> Any:
    """orjson's decoding of `raw` when it is provably what the strict decoder below returns, else `_SLOW`.

    orjson (compiled) refuses what the strict decoder refuses (NaN, infinities, non-UTF-8, lone
    surrogates, a BOM, nesting past 1,024) but two things: it keeps the last of duplicate keys, and it turns
    an integer beyond 64 bits into a float. So it is used only when no integer literal has 19 digits and
    the document has as many key/value pairs once decoded as key separators (colons outside strings) in
    the text, and nests no deeper than `max_depth` (both counted in one walk of the decoded value); anything
    else, an error included, goes the strict decoder's way, which says exactly why.
    """
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _SLOW
    plain = _ESCAPE.sub(b"", raw) if b"\\" in raw else raw
    outside = b"".join(plain.split(b'"')[::2])  # escapes gone, every other piece is outside the strings
    if _LONG_NUMBER.search(outside) is not None:
        return _SLOW
    if outside.count(b":") != _pairs_within(value, max_depth):  # a duplicate key, or nested too deep (-1)
        return _SLOW
    return value


def _pairs_within(value: Any, max_depth: int) -> int:
    """The key/value pairs of every object in a decoded document, or -1 when it nests deeper than
    `max_depth` (walked a level at a time: no recursion, and no bookkeeping per value; as fast as a plain walk
    on a one-line step, 1.6 us)."""
    pairs = 0
    level = [value]
    for _ in range(max_depth):  # the containers of level i nest i + 1 deep
        below: list[Any] = []
        for item in level:
            kind = type(item)
            if kind is dict:
                pairs += len(item)
                below.extend(item.values())
            elif kind is list:
                below.extend(item)
        if not below:
            return pairs
        level = below
    return -1 if any(type(item) is dict or type(item) is list for item in level) else pairs


def check_strings(obj: Any, limits: InputLimits) -> None:
    """Raise PAYLOAD_TOO_LARGE if any key or string value of `obj` exceeds the limit (iterative, no recursion)."""
    stack = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if len(value) > limits.max_string_length:
                raise InvalidEventError(
                    f"a string of {len(value)} characters; at most {limits.max_string_length} are accepted",
                    code=ErrorCode.PAYLOAD_TOO_LARGE,
                )
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def find_oversized_int(obj: Any) -> str | None:
    """Where in `obj` an integer beyond int64 sits (a dotted path), or None."""
    if not _holds_oversized(obj):  # the usual case, without building a path per value
        return None
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, OversizedInt):
            return path or "value"
        if isinstance(value, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{path}.{i}" if path else str(i), v) for i, v in enumerate(value))
    return None


def _holds_oversized(obj: Any) -> bool:
    """Whether `obj` may hold a marker: False only when every value in it is of a plain JSON type."""
    stack = [obj]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind not in _PLAIN:
            return True  # a marker, or another type: the walk that names the path looks closer
    return False


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidEventError("duplicate key in an object", code=ErrorCode.PARSE_ERROR)
            seen.add(key)
    return result


def _no_constant(name: str) -> Any:
    raise InvalidEventError("NaN and Infinity are not JSON numbers", code=ErrorCode.PARSE_ERROR)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise InvalidEventError("a number is out of range", code=ErrorCode.PARSE_ERROR)
    return value


def _int64(literal: str) -> int:
    if len(literal) > 4300:  # int() itself refuses longer literals (CPython's int max str digits)
        return OversizedInt(INT64_MAX + 1)
    value = int(literal)
    return OversizedInt(value) if not INT64_MIN <= value <= INT64_MAX else value
