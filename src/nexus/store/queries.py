"""Named SQL queries, loaded from the .sql files beside this module.

A file holds several queries, each introduced by a line ``-- name: query_name``.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@functools.cache
def load(file: str) -> dict[str, str]:
    text = resources.files("nexus.store").joinpath("queries", file).read_text(encoding="utf-8")
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        queries[name] = body.strip()
    return queries


def query(file: str, name: str) -> str:
    try:
        return load(file)[name]
    except KeyError:
        raise KeyError(f"no query {name!r} in {file}") from None
