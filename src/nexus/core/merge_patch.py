"""JSON Merge Patch (RFC 7396) on parsed JSON: how `core/shipped.py` writes a definition as the changes from
an earlier one, so that what two shipped definitions share is written once; and `expand`, how it writes once
a part that stands in several places (`{"$shared": name}` in each).

`diff(base, target)` is the patch that `apply` turns `base` into `target` with; values the patch does not
touch are shared with `base`, not copied (the shapes are read, never changed). A patch cannot say "this key
is null" (null removes a key) nor move a key: `diff` returns None when `target` needs either.
"""

from __future__ import annotations

from typing import Any


def apply(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`base` changed by `patch`: a null removes its key, an object patches an object, anything else replaces."""
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = apply(out[key], value)
        else:
            out[key] = value
    return out


def diff(base: dict[str, Any], target: dict[str, Any]) -> dict[str, Any] | None:
    """The patch that `apply` turns `base` into `target` with, keys in `target`'s order; None if there is none."""
    patch = _diff(base, target)
    if list(_walk(apply(base, patch))) != list(_walk(target)):
        return None
    return patch


def expand(doc: Any, parts: dict[str, Any]) -> Any:
    """`doc` with each `{"$shared": name}` in it replaced by `parts[name]` (the same object, not a copy)."""
    if isinstance(doc, dict):
        if len(doc) == 1 and SHARED_KEY in doc:
            return parts[doc[SHARED_KEY]]
        return {key: expand(value, parts) for key, value in doc.items()}
    if isinstance(doc, list):
        return [expand(value, parts) for value in doc]
    return doc


SHARED_KEY = "$shared"


def _diff(base: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    patch: dict[str, Any] = {key: None for key in base if key not in target}
    for key, value in target.items():
        old = base.get(key, _MISSING)
        if isinstance(old, dict) and isinstance(value, dict):
            inner = _diff(old, value)
            if inner:
                patch[key] = inner
        elif old != value or type(old) is not type(value):
            patch[key] = value
    return patch


def _walk(value: Any) -> Any:
    """Every key and leaf in document order: equal walks are equal documents with their keys in the same order."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield ("key", key)
            yield from _walk(inner)
        yield ("end", None)
    elif isinstance(value, list):
        yield ("list", len(value))
        for inner in value:
            yield from _walk(inner)
    else:
        yield (type(value).__name__, value)


_MISSING = object()
