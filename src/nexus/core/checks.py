"""Value checks of process steps, written in CEL and compiled once per definition. Pure: no I/O.

The engine is the Rust-backed `common-expression-language` (module `cel`): a compiled check evaluates in
~5-12 us where `cel-python` takes 100-450 us (benchmarks/history/notebook.md, "CEL engines"). A check passes only
when its rule evaluates to exactly `true`; `false`, any other value, a missing field or an evaluation error
denies, so a hallucinated or partial step can never slip through a rule that could not be read.

Money is compared in minor units: the definition names a step's money fields (`money:`), and they reach
CEL as integers (cents for USD, yen for JPY) computed with `Decimal` from the wire value, so `0.1 * 3`
sent as a binary float is 30 cents, never 0.30000000000000004.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import ROUND_HALF_EVEN, Context, Decimal, DecimalException, DivisionByZero, InvalidOperation, Overflow
from typing import Any

from nexus.core.cel_engine import cel
from nexus.core.cel_functions import list_sum, same_items
from nexus.core.list_handles import ListHandles

# ISO 4217 currencies whose minor unit is not the cent; every other code has two decimals.
_EXPONENTS: dict[str, int] = {
    "BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0, "RWF": 0,
    "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
    "BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
}  # fmt: skip


def exponent_of(currency: object) -> int:
    """Decimal places of a currency's minor unit (2 when unknown)."""
    return _EXPONENTS.get(currency, 2) if isinstance(currency, str) else 2


_EXACT = 10**15  # integers below it stay far inside Decimal's 28 digits once in minor units


def to_minor(value: object, exponent: int) -> object:
    """An amount in minor units (int), exactly, from an int, float, str or Decimal; other values unchanged."""
    kind = type(value)
    if kind is int and isinstance(value, int) and -_EXACT < value < _EXACT:  # bool is not int's exact type
        return value * 10**exponent
    if kind is str and isinstance(value, str):
        whole, _, fraction = value.partition(".")
        # ASCII digits with no more decimals than the unit has (the usual amount): exact without Decimal.
        plain = 0 < len(whole) < 16 and whole.isdigit() and whole.isascii() and len(fraction) <= exponent
        if plain and (not fraction or (fraction.isdigit() and fraction.isascii())):
            return int(whole + fraction.ljust(exponent, "0"))
    return minor_by_decimal(value, exponent)


MAX_MINOR_DIGITS = 28
"""An amount holds at most this many digits in its currency's minor unit (Decimal's default precision); more
is refused on arrival as invalid data (`money_problem`)."""
MAX_EXPONENT = max(_EXPONENTS.values())
"""The most decimals a minor unit has: an amount that fits with it fits in every currency."""
_MINOR = Context(prec=MAX_MINOR_DIGITS, traps=[InvalidOperation, Overflow, DivisionByZero])
_NUMERAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
_TOO_LONG = f"Input should be an amount of at most {MAX_MINOR_DIGITS} digits in the currency's minor unit"


def minor_by_decimal(value: object, exponent: int) -> object:
    """`to_minor` for every value, through Decimal: the definition the shortcut above must agree with. A value
    that is no amount, or one too long for a minor unit (`money_problem`), is returned unchanged."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        return value
    minor = _minor(value, exponent)
    return value if minor is None else minor


def _minor(value: int | float | str | Decimal, exponent: int) -> int | None:
    try:
        amount = Decimal(str(value))
        if not amount.is_finite():
            return None
        return int(amount.scaleb(exponent, _MINOR).quantize(Decimal(1), ROUND_HALF_EVEN, _MINOR))
    except DecimalException:  # not a numeral, or more digits than MAX_MINOR_DIGITS
        return None


def money_problem(data: Mapping[str, Any], paths: Sequence[str], exponent: int) -> str | None:
    """`data.<path>: <words>` for the first money field at `paths` (dotted; lists walked through) holding a
    number or numeral that no minor unit of `exponent` decimals holds; None when every one converts."""
    for path in paths:
        found = _too_long_at(data, path.split("."), exponent)
        if found is not None:
            return f"{'.'.join(['data', *reversed(found)])}: {_TOO_LONG}"
    return None


def _too_long_at(node: object, parts: list[str], exponent: int) -> list[str] | None:
    """The path (innermost first) of the first value at `parts` below `node` too long for a minor unit."""
    if (type(node) is not dict and not isinstance(node, Mapping)) or (key := parts[0]) not in node:
        return None  # `type` first: the ABC's isinstance costs more than the rest of a usual walk
    value = node[key]
    if len(parts) == 1:
        return None if _fits(value, exponent) else [key]
    if type(value) is list:
        rest = parts[1:]
        for i, element in enumerate(value):
            if (found := _too_long_at(element, rest, exponent)) is not None:
                return [*found, str(i), key]
        return None
    found = _too_long_at(value, parts[1:], exponent)
    return None if found is None else [*found, key]


def _fits(value: object, exponent: int) -> bool:
    """Whether `value` converts to minor units, or is no amount at all (the step's schema judges that); the
    usual amounts are answered without converting them."""
    kind = type(value)
    if kind is int and isinstance(value, int):
        if -_EXACT < value < _EXACT:
            return True
    elif kind is str and isinstance(value, str):
        short = len(value) <= MAX_MINOR_DIGITS - MAX_EXPONENT and "e" not in value and "E" not in value
        if short or _NUMERAL.fullmatch(value) is None:
            return True
    elif kind is float and isinstance(value, float):
        if -_EXACT < value < _EXACT:
            return True
    else:
        return True
    return type(to_minor(value, exponent)) is int


def convert_money(data: Mapping[str, Any], paths: Sequence[str], exponent: int) -> dict[str, Any]:
    """A copy of `data` with the values at `paths` (dotted; lists are walked through) in minor units."""
    out = dict(data)
    for path in paths:
        _convert_path(out, path.split("."), exponent)
    return out


def _convert_path(node: dict[str, Any], parts: list[str], exponent: int) -> None:
    key, rest = parts[0], parts[1:]
    if key not in node:
        return
    value = node[key]
    if not rest:
        node[key] = to_minor(value, exponent)
    elif isinstance(value, dict):
        node[key] = child = dict(value)
        _convert_path(child, rest, exponent)
    elif isinstance(value, list):
        copies = []
        for element in value:
            if isinstance(element, dict):
                element = dict(element)
                _convert_path(element, rest, exponent)
            copies.append(element)
        node[key] = copies


def build_context(variables: Mapping[str, Any], *, with_sum: bool, handles: ListHandles | None = None) -> cel.Context:
    """One evaluation context, shared by every rule of a step: converting Python values into CEL values
    costs more than evaluating a rule, so it is done once per step, for the variables its rules name.
    `handles`: the lists of `variables` held by handle (core/list_handles.py), read by the functions."""
    context = cel.Context()
    if with_sum:
        # CEL has no fold over a list, and this engine's `map`/`filter` copy their result once per item
        # (quadratic): `sum(list[, fields])` and `same_items(a, b[, fields])` (core/cel_functions.py) are the
        # functions checks need beyond the standard library, each one pass; registered for rules that call them.
        functions: dict[str, Callable[..., object]] = {"sum": list_sum, "same_items": same_items}
        for name, function in (functions if handles is None else handles.functions()).items():
            context.add_function(name, function)
    context.update(dict(variables))  # one conversion call: about half the cost of one add_variable per name
    return context


_NAMES = re.compile(r"\b(data|order|step|limits|result)\b")
_FIELDS = re.compile(r"\b(data|order|step|limits|result)\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")
_BARE = re.compile(r"\b(data|order|step|limits|result)\b(?!\s*\.)")


def fields_used(sources: Iterable[str]) -> dict[str, frozenset[str] | None]:
    """For each context variable the rules mention, the first-level fields they read (None: the whole
    value, when a rule uses the variable itself). Only those are converted into CEL values: converting
    is what costs (tens of us for a list of items), evaluating a compiled rule costs a few us."""
    used: dict[str, set[str] | None] = {}
    for source in sources:
        for name in _NAMES.findall(source):
            used.setdefault(name, set())
        for name in _BARE.findall(source):
            used[name] = None
        for name, field in _FIELDS.findall(source):
            fields = used.get(name)
            if fields is not None:
                fields.add(field)
    return {k: (frozenset(v) if v is not None else None) for k, v in used.items()}


_PATH = r"\b(?:data|order|step|limits|result)\s*\.\s*[A-Za-z_][A-Za-z0-9_]*"
_LITERALS = r"""(?:\s*,\s*(?:'[^'\\\n]*'|"[^"\\\n]*"))+"""
# A list passed to `sum` or `same_items` with the names of the fields they read from its maps.
_BY_FIELDS = re.compile(
    rf"\b(?:sum\s*\(\s*(?P<one>{_PATH})|same_items\s*\(\s*(?P<first>{_PATH})\s*,\s*(?P<second>{_PATH}))"
    rf"(?P<fields>{_LITERALS})\s*\)"
)
_HAS = re.compile(rf"\bhas\s*\(\s*(?P<path>{_PATH})\s*\)")
_LITERAL = re.compile(r"'([^']*)'|\"([^\"]*)\"")
_SPLIT = re.compile(r"\s*\.\s*")


def element_fields_used(sources: Iterable[str]) -> dict[str, dict[str, frozenset[str]]]:
    """For each list field (`variable.field`) the rules read only through `sum(list, "a", ...)`,
    `same_items(list, other, "a", ...)` or `has(list)`, the fields of its maps they read. The maps of
    such a list reach CEL with those fields only (`pick`): the binding converts every key and value of
    every map, and an order's items are most of what a step converts. A list read any other way (indexed,
    a macro, `size`, a field name that is not a plain literal) is not here: it is converted whole."""
    reads: dict[tuple[str, str], set[str]] = {}
    whole: set[tuple[str, str]] = set()
    for source in sources:
        covered: dict[int, frozenset[str]] = {}  # start of a path occurrence -> the fields read through it
        for use in _BY_FIELDS.finditer(source):
            fields = frozenset(a or b for a, b in _LITERAL.findall(use["fields"]))
            for group in ("one", "first", "second"):
                if use[group] is not None:
                    covered[use.start(group)] = fields
        for use in _HAS.finditer(source):
            covered[use.start("path")] = frozenset()  # presence only: the elements are not read
        for match in re.finditer(_PATH, source):
            name, field = _SPLIT.split(match.group())
            read = covered.get(match.start())
            if read is None:
                whole.add((name, field))
            else:
                reads.setdefault((name, field), set()).update(read)
    out: dict[str, dict[str, frozenset[str]]] = {}
    for (name, field), names in reads.items():
        if (name, field) not in whole:
            out.setdefault(name, {})[field] = frozenset(names)
    return out


def pick(
    value: Mapping[str, Any], fields: frozenset[str] | None, elements: Mapping[str, frozenset[str]] | None = None
) -> Mapping[str, Any]:
    """The part of a context variable its rules read: its `fields` (None: the whole value), and of the
    lists among them named in `elements`, each map with only the fields named there."""
    if fields is None:
        return value
    if not elements:
        return {k: value[k] for k in fields if k in value}
    return {k: _elements(value[k], elements.get(k)) for k in fields if k in value}


def _elements(value: Any, fields: frozenset[str] | None) -> Any:
    if fields is None or type(value) is not list:
        return value
    return [{f: e[f] for f in fields if f in e} if type(e) is dict else e for e in value]


def pick_money(
    value: Mapping[str, Any],
    fields: frozenset[str] | None,
    elements: Mapping[str, frozenset[str]] | None,
    money: Sequence[str],
    exponent: int,
) -> Mapping[str, Any]:
    """`convert_money(pick(value, fields, elements), money, exponent)`, with each map of a pruned list
    copied once: the money fields of its maps (paths `list.field`) are converted as the map is picked."""
    if fields is None or not elements or not money:
        chosen = pick(value, fields, elements)
        return convert_money(chosen, money, exponent) if money else chosen
    inner: dict[str, list[str]] = {}
    rest: list[str] = []
    for path in money:
        head, _, tail = path.partition(".")
        if tail and "." not in tail and elements.get(head) is not None:
            inner.setdefault(head, []).append(tail)
        else:
            rest.append(path)
    picked: dict[str, Any] = {}
    for k in fields:
        if k in value:
            picked[k] = _money_elements(value[k], k, elements[k], inner[k], exponent) if k in inner else (
                _elements(value[k], elements.get(k))
            )  # fmt: skip
    return convert_money(picked, rest, exponent) if rest else picked


def _money_elements(value: Any, key: str, fields: frozenset[str], money: list[str], exponent: int) -> Any:
    if type(value) is not list:  # not a list of maps: as `convert_money` treats it
        return convert_money({key: value}, [f"{key}.{m}" for m in money], exponent)[key]
    out = []
    for element in value:
        if isinstance(element, dict):
            element = {f: element[f] for f in fields if f in element} if type(element) is dict else dict(element)
            for field in money:
                if field in element:
                    element[field] = to_minor(element[field], exponent)
        out.append(element)
    return out


_SUM = re.compile(r"\b(sum|same_items)\s*\(")


class CheckSyntaxError(ValueError):
    """A check's rule is not valid CEL."""


@dataclasses.dataclass(frozen=True, slots=True)
class CompiledRule:
    """One CEL rule, compiled once."""

    source: str
    program: Any
    names: frozenset[str] = frozenset()
    """The context variables the rule mentions (only those are converted for it)."""
    uses_sum: bool = False

    @classmethod
    def compile(cls, source: str) -> CompiledRule:
        try:
            program = cel.compile(source)
        except Exception as exc:  # the binding raises ValueError, or a Rust panic surfaced as another type
            raise CheckSyntaxError(str(exc).splitlines()[0] if str(exc) else "invalid CEL") from exc
        return cls(source, program, frozenset(_NAMES.findall(source)), bool(_SUM.search(source)))

    def passes(self, context: cel.Context) -> bool:
        """True only if the rule evaluates to exactly true; an error or a missing field denies."""
        try:
            result = self.program.execute(context)
        except Exception:  # noqa: BLE001 -- any failure to evaluate is a denial, by contract
            return False
        return result is True

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        """The rule's value (raises on an evaluation error): for conditions that are not checks."""
        return self.program.execute(build_context(variables, with_sum=self.uses_sum))
