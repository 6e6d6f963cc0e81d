"""Static cost of CEL rules: a rule whose work grows faster than linearly with a list is refused. Pure.

A check runs under its order's lock on the event loop, and CEL holds the GIL: a rule whose work grows
with the square of a list (``a.all(x, b.exists(y, ...))``, 1,000 x 1,000 visits, 1.2-2.4 s of CPU) stalls
every tenant. Lists are bounded (`core/list_limits.py`, `max_list_items`), so what is left to bound is how
the work of a rule grows with them. This module parses each rule (checks, `approval.when`, effect
bodies) and counts the items each operation visits at the limits, as the engine (`common-expression-
language`, cel-rust) does the work (measured in benchmarks/history/notebook.md, "Bounded check cost"):

* a walk (``all``, ``exists``, ``exists_one``; ``in`` on anything but a literal; the core's list
  functions ``sum`` and ``same_items``) visits its list once;
* ``map`` and ``filter`` build their result by copying it once per item: their own list, squared
  (1,000 items: 40-300 ms), so they are for short lists only;
* a list, or a value that may hold one, read from a variable (``data.x``, ``order.x``) is copied on
  every read: read inside a walk, once per item of that walk;
* whatever sits inside a walk's body is done once per item of the walk (products of the bounds).

A list's bound is the definition's `max_list_items` (default 1,000) unless the step's JSON Schema gives it
a smaller ``maxItems`` (for ``data.*`` paths, the items of a walked list, and ``order.*`` facts, from the
schemas of the steps that record them), or it is a literal of known length. A value read inside a walk is
known not to be a list when the schema gives it a scalar ``type`` (``limits`` and ``step`` hold scalars).

A rule is refused when an operation visits more than `NESTED_FACTOR` x the limit items: a single walk,
however long, is allowed, and so are any number of them one after another; anything quadratic only when
its lists are bounded far below the limit (16 items inside a walk of 1,000). Strings are not counted (each
is bounded by `NEXUS_MAX_STRING_LENGTH`).

The parser covers CEL's expression grammar (the engine has already accepted the rule's syntax); it builds
a small tree of tuples, enough to find the walks and their lists. A rule it cannot read is refused.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from typing import Any

from nexus.core.list_limits import DEFAULT_MAX_LIST_ITEMS

NESTED_FACTOR = 16
"""A nested walk may visit at most this many times the limit: inner lists of up to 16 items."""
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
LIST_FUNCTIONS = frozenset({"sum", "same_items"})
VARIABLES = frozenset({"data", "order", "step", "limits", "result"})

# -- parsing -----------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>[rRbB]{0,2}(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<number>0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[uU]?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||&&|==|!=|<=|>=|[-+*/%!<>?:.,()\[\]{}])
    """,
    re.VERBOSE | re.DOTALL,
)
_RELATIONS = frozenset({"==", "!=", "<", "<=", ">", ">=", "in"})

Node = tuple[Any, ...]
"""("ident", name) | ("select", operand, field) | ("call", target | None, name, args) | ("index", operand,
index) | ("list", items) | ("map", entries) | ("literal", text) | ("op", operator, operands)"""


def _tokens(source: str) -> list[str]:
    out: list[str] = []
    position = 0
    while position < len(source):
        match = _TOKEN.match(source, position)
        if match is None:
            raise ValueError(f"unexpected character {source[position]!r}")
        position = match.end()
        if match.lastgroup == "string":
            out.append('"')  # the value of a literal never matters here
        elif match.lastgroup != "space":
            out.append(match.group())
    return out


class _Parser:
    def __init__(self, source: str) -> None:
        self.tokens = _tokens(source)
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        symbol = self.peek()
        if symbol is None or (expected is not None and symbol != expected):
            raise ValueError(f"expected {expected or 'more'}, found {symbol or 'the end'}")
        self.at += 1
        return symbol

    def parse(self) -> Node:
        node = self.expr()
        if self.peek() is not None:
            raise ValueError(f"unexpected {self.peek()!r}")
        return node

    def expr(self) -> Node:
        condition = self.binary(0)
        if self.peek() == "?":
            self.take("?")
            then = self.binary(0)
            self.take(":")
            return ("op", "?:", (condition, then, self.expr()))
        return condition

    _LEVELS: tuple[frozenset[str], ...] = (
        frozenset({"||"}),
        frozenset({"&&"}),
        _RELATIONS,
        frozenset({"+", "-"}),
        frozenset({"*", "/", "%"}),
    )

    def binary(self, level: int) -> Node:
        if level == len(self._LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        while self.peek() in self._LEVELS[level]:
            operator = self.take()
            node = ("op", operator, (node, self.binary(level + 1)))
        return node

    def unary(self) -> Node:
        if self.peek() in ("!", "-"):
            operator = self.take()
            return ("op", operator, (self.unary(),))
        return self.member()

    def member(self) -> Node:
        node = self.primary()
        while True:
            symbol = self.peek()
            if symbol == ".":
                self.take(".")
                name = self.take()
                called = self.peek() == "("
                node = ("call", node, name, self.arguments("(", ")")) if called else ("select", node, name)
            elif symbol == "[":
                self.take("[")
                index = self.expr()
                self.take("]")
                node = ("index", node, index)
            elif symbol == "{" and node[0] in ("ident", "select"):  # a message: Name{field: value}
                node = ("map", self.entries())
            else:
                return node

    def primary(self) -> Node:
        symbol = self.take()
        if symbol == "." and self.peek() is not None:
            symbol = self.take()
        if symbol == "(":
            node = self.expr()
            self.take(")")
            return node
        if symbol == "[":
            self.at -= 1
            return ("list", self.arguments("[", "]"))
        if symbol == "{":
            self.at -= 1
            return ("map", self.entries())
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", symbol) and symbol not in ("true", "false", "null"):
            if self.peek() == "(":
                return ("call", None, symbol, self.arguments("(", ")"))
            return ("ident", symbol)
        return ("literal", symbol)

    def arguments(self, opening: str, closing: str) -> tuple[Node, ...]:
        self.take(opening)
        items: list[Node] = []
        while self.peek() != closing:
            items.append(self.expr())
            if self.peek() != closing:
                self.take(",")
        self.take(closing)
        return tuple(items)

    def entries(self) -> tuple[Node, ...]:
        self.take("{")
        items: list[Node] = []
        while self.peek() != "}":
            key = self.expr()
            self.take(":")
            items.append(("op", ":", (key, self.expr())))
            if self.peek() != "}":
                self.take(",")
        self.take("}")
        return tuple(items)


def parse(source: str) -> Node:
    """The tree of a CEL expression; `ValueError` if it cannot be read."""
    return _Parser(source).parse()


# -- the walks and their bounds ----------------------------------------------------------------------------


WALKS_ONCE = "walks its list once"
"""A `Walk`'s `why` unless it says another."""


@dataclasses.dataclass(frozen=True, slots=True)
class Bounds:
    """What bounds a rule's lists: the limit, the step's data schema, the facts' schemas by name."""

    limit: int
    data: Mapping[str, Any] | None = None
    facts: Mapping[str, Mapping[str, Any] | None] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class Walk:
    """One operation of a rule that visits list items: what it is, how many it visits at the limits, why."""

    what: str
    visits: int
    depth: int
    """How many walks it sits inside (0: at the top of the rule)."""
    why: str = WALKS_ONCE


_SCALARS = frozenset({"string", "number", "integer", "boolean", "null"})
_SCALAR_VARIABLES = frozenset({"limits", "step"})


def _path(node: Node) -> tuple[str, tuple[str, ...]] | None:
    """A select chain as (root variable, fields); an index counts as `[]` (one item of the list)."""
    fields: list[str] = []
    while node[0] in ("select", "index"):
        fields.append(node[2] if node[0] == "select" else "[]")
        node = node[1]
    if node[0] != "ident":
        return None
    return node[1], tuple(reversed(fields))


def _describe(node: Node) -> str:
    found = _path(node)
    if found is not None:
        return ".".join((found[0], *found[1])).replace(".[]", "[]")
    if node[0] == "call" and node[1] is not None:
        return f"{_describe(node[1])}.{node[2]}(...)"
    if node[0] == "list":
        return f"a list of {len(node[1])}"
    return "an expression"


def _schema_at(schema: Mapping[str, Any] | None, fields: tuple[str, ...]) -> Mapping[str, Any] | None:
    for field in fields:
        if not isinstance(schema, Mapping):
            return None
        if field == "[]":
            schema = schema.get("items")
        else:
            properties = schema.get("properties")
            schema = properties.get(field) if isinstance(properties, Mapping) else None
    return schema if isinstance(schema, Mapping) else None


def _is_scalar(schema: Mapping[str, Any] | None) -> bool:
    kind = schema.get("type") if schema is not None else None
    kinds = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else {"?"}
    return kinds <= _SCALARS


Scope = Mapping[str, Mapping[str, Any] | None]
"""The iteration variables in scope, each with the schema of its items (None: unknown)."""


class _Analysis:
    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self.walks: list[Walk] = []

    def schema_of(self, node: Node, scope: Scope) -> Mapping[str, Any] | None:
        found = _path(node)
        if found is None:
            return None
        return self._schema(found[0], found[1], scope)

    def _schema(self, root: str, fields: tuple[str, ...], scope: Scope) -> Mapping[str, Any] | None:
        if root in scope:
            return _schema_at(scope[root], fields)
        if root == "data":
            return _schema_at(self.bounds.data, fields)
        if root == "order" and fields:
            return _schema_at(self.bounds.facts.get(fields[0]), fields[1:])
        return None

    def bound(self, node: Node, scope: Scope) -> int:
        """How many items the list `node` holds at most."""
        limit = self.bounds.limit
        if node[0] in ("list", "map"):
            return len(node[1])
        if node[0] == "call" and node[1] is not None and node[2] in ("map", "filter"):
            return self.bound(node[1], scope)
        if node[0] == "op" and node[1] == "+":
            return min(sum(self.bound(n, scope) for n in node[2]), 2 * limit)
        return _max_items(self.schema_of(node, scope), limit)

    def read(self, node: Node, scope: Scope, times: int, depth: int) -> None:
        """A variable's value read inside a walk: copied on every read unless the schema says it is a scalar
        (for a read through an index, the list before the first index is what is copied)."""
        found = _path(node)
        if found is None or depth == 0:
            return
        root, fields = found
        if root in scope or root in _SCALAR_VARIABLES or root not in VARIABLES:
            return
        copied = fields[: fields.index("[]")] if "[]" in fields else fields
        schema = self._schema(root, copied, scope)
        if _is_scalar(schema):
            return
        what = ".".join((root, *copied))
        self.walks.append(
            Walk(what, times * _max_items(schema, self.bounds.limit), depth, "may be a list, copied on every read")
        )

    def walk(self, node: Node, scope: Scope, times: int, depth: int) -> None:
        kind = node[0]
        if kind == "call":
            target, name, args = node[1], node[2], node[3]
            if target is not None and name in MACROS and args and args[0][0] == "ident":
                self.walk(target, scope, times, depth)
                size = self.bound(target, scope)
                if name in ("map", "filter"):
                    why = "builds its result by copying it once per item (this CEL engine)"
                    self.walks.append(Walk(f"{_describe(target)}.{name}", times * size * size, depth, why))
                else:
                    self.walks.append(Walk(f"{_describe(target)}.{name}", times * size, depth))
                two_variables = len(args) == 3 and name != "map" and args[1][0] == "ident"
                names = [a[1] for a in args[: 2 if two_variables else 1]]
                element = self.schema_of(target, scope)
                inner = {**scope, **{n: _schema_at(element, ("[]",)) for n in names}}
                for body in args[len(names) :]:
                    self.walk(body, inner, times * max(size, 1), depth + 1)
                return
            if target is not None:
                self.walk(target, scope, times, depth)
            for arg in args:
                self.walk(arg, scope, times, depth)
            if target is None and name in LIST_FUNCTIONS:
                for arg in args:
                    if arg[0] != "literal":
                        self.walks.append(Walk(f"{name}({_describe(arg)})", times * self.bound(arg, scope), depth))
            return
        if kind == "op":
            for operand in node[2]:
                self.walk(operand, scope, times, depth)
            if node[1] == "in" and node[2][1][0] not in ("list", "map"):
                collection = node[2][1]
                self.walks.append(Walk(f"in {_describe(collection)}", times * self.bound(collection, scope), depth))
            return
        if kind in ("ident", "select", "index"):
            if _path(node) is not None:
                self.read(node, scope, times, depth)
            for child in node[1:]:
                if isinstance(child, tuple) and (kind == "index" or _path(child) is None):
                    self.walk(child, scope, times, depth)
            return
        if kind in ("list", "map"):
            for child in node[1]:
                self.walk(child, scope, times, depth)


def _max_items(schema: Mapping[str, Any] | None, limit: int) -> int:
    most = schema.get("maxItems") if schema is not None else None
    if isinstance(most, int) and not isinstance(most, bool) and most >= 0:
        return min(most, limit)
    return limit


def walks(source: str, bounds: Bounds) -> list[Walk]:
    """Every list walk of a rule, with its visits at the limits; `ValueError` if the rule cannot be read."""
    analysis = _Analysis(bounds)
    analysis.walk(parse(source), {}, 1, 0)
    return analysis.walks


def too_costly(source: str, bounds: Bounds) -> str | None:
    """Why a rule is refused (its costliest operation), or None when its cost is at most linear."""
    budget = NESTED_FACTOR * bounds.limit
    over = [w for w in walks(source, bounds) if w.visits > budget]
    if not over:
        return None
    # The costliest; among equals, a walk names the cause better than the read of its list.
    worst = max(over, key=lambda w: (w.visits, w.why == WALKS_ONCE, w.depth))
    where = f", inside {'another walk' if worst.depth == 1 else f'{worst.depth} walks'}" if worst.depth else ""
    return (
        f"its cost grows faster than linearly with a list: {worst.what} {worst.why}{where}, "
        f"{worst.visits:,} visits at max_list_items {bounds.limit:,} (at most {budget:,}); bound the lists "
        f"far below the limit (JSON Schema maxItems, <= {NESTED_FACTOR} inside a walk) or compare them in one "
        "pass (sum(list, fields...), same_items(a, b, fields...))"
    )


# -- a definition's rules ----------------------------------------------------------------------------------


def _facts_schemas(definition: Any) -> dict[str, Mapping[str, Any] | None]:
    """For each fact name, the schema of the data field it comes from; None where one step leaves it open
    (a fact recorded by several steps is as bounded as the least bounded of them)."""
    found: dict[str, Mapping[str, Any] | None] = {}
    for step in definition.steps.values():
        properties = step.data.get("properties", {}) if isinstance(step.data, Mapping) else {}
        properties = properties if isinstance(properties, Mapping) else {}
        for name in step.facts if step.facts is not None else list(properties):
            schema = properties.get(name)
            schema = schema if isinstance(schema, Mapping) else None
            found[name] = schema if found.get(name, schema) == schema else None
    return found


def costly_rules(definition: Any) -> Iterator[tuple[list[Any], str]]:
    """Each rule of a definition (a `core.process_model.ProcessDefinition`, which imports this module) whose cost
    is refused: (its path in the YAML, the reason)."""
    limit = definition.max_list_items or DEFAULT_MAX_LIST_ITEMS
    facts = _facts_schemas(definition)
    for name, step in definition.steps.items():
        bounds = Bounds(limit, step.data or None, facts)
        rules: list[tuple[list[Any], str, str]] = [
            (["steps", name, "checks", i], f"check {check.id}", check.rule) for i, check in enumerate(step.checks)
        ]
        if step.approval is not None and step.approval.when:
            rules.append((["steps", name, "approval"], "approval.when", step.approval.when))
        if step.effect is not None:
            bodies = [("effect", step.effect.body)]
            if step.effect.compensation is not None:
                bodies.append(("effect.compensation", step.effect.compensation.body))
            for where, body in bodies:
                rules += [(["steps", name, "effect"], f"{where}.body.{k}", v) for k, v in body.items()]
        for path, what, source in rules:
            try:
                reason = too_costly(source, bounds)
            except ValueError as exc:  # the engine read it: a gap of this parser, refused rather than unjudged
                reason = f"its cost cannot be analysed ({exc})"
            if reason is not None:
                yield path, f"step {name}, {what}: {reason}"
