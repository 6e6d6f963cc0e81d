"""core/merge_patch: a shipped definition written as the changes from another reads back exactly as its YAML."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.core import merge_patch, schemas_export

_LEAF = st.one_of(st.integers(), st.text(max_size=3), st.lists(st.integers(), max_size=2))
_DOC = st.recursive(
    st.dictionaries(st.sampled_from("abcd"), _LEAF, max_size=4),
    lambda inner: st.dictionaries(st.sampled_from("abcd"), st.one_of(_LEAF, inner), max_size=4),
    max_leaves=12,
)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a) == json.dumps(b)


@settings(deadline=None)
@given(_DOC, _DOC)
def test_diff_then_apply_gives_the_target_keys_in_order(base: dict[str, Any], target: dict[str, Any]) -> None:
    """Where diff gives a patch, applying it to the base gives the target, its keys in the target's order."""
    patch = merge_patch.diff(base, target)
    if patch is not None:
        assert _same(merge_patch.apply(base, patch), target)


def test_a_key_that_would_move_has_no_patch() -> None:
    """A key the target adds before one the base has cannot be placed by a merge patch: diff says None."""
    assert merge_patch.diff({"a": 1, "c": 3}, {"a": 1, "b": 2, "c": 3}) is None
    assert merge_patch.diff({"a": 1, "b": 2, "c": 3}, {"a": 1, "c": 3}) == {"b": None}


def test_a_null_value_has_no_patch() -> None:
    """A null in the target cannot be written (null removes a key in a merge patch): diff says None."""
    assert merge_patch.diff({"a": 1}, {"a": None}) is None


def test_shipped_definitions_read_back_as_their_yaml() -> None:
    """Every definition of core/shipped.py, written in full or as a patch, equals its YAML's shape, keys in order."""
    from nexus.core.shipped import DEFINITIONS

    shapes = schemas_export.shapes()
    assert list(DEFINITIONS) == list(shapes)
    for name, shape in shapes.items():
        assert _same(DEFINITIONS[name], shape), name


def test_shared_parts_are_written_once() -> None:
    """core/shipped.py writes at least one definition as a patch (the order variants share their data schemas)
    and a schema that stands in several places (the order's item) once."""
    text = schemas_export.render_shipped()
    assert "merge_patch.apply(" in text
    assert '"$shared": "items"' in text


def test_expand_puts_the_shared_part_in_each_place() -> None:
    """Each {"$shared": name} becomes that part, in objects and lists; other objects are kept as they are."""
    item = {"type": "object"}
    doc = {"a": {"$shared": "item"}, "b": [{"$shared": "item"}, {"$shared": "item", "x": 1}]}
    assert merge_patch.expand(doc, {"item": item}) == {"a": item, "b": [item, {"$shared": "item", "x": 1}]}
