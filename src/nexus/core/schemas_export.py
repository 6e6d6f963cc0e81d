"""Write what is generated from the process definitions: ``python -m nexus.core.schemas_export DIR``.

Two outputs, both from `src/nexus/processes/*.yaml`: the JSON Schema of every event type of the default
process (`order`) and of the built-in steps, in DIR (schemas/events/), and `core/shipped.py`, the shapes of
the shipped definitions (what the core and the lab read of them: states, steps, data schemas; not the
checks, effects or approvals, which only the gateway's catalog applies).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from nexus.core import merge_patch

PROCESSES = Path(__file__).resolve().parents[1] / "processes"
SHIPPED = Path(__file__).resolve().parent / "shipped.py"
_SHAPE_KEYS = ("name", "version", "description", "states", "terminal", "max_rejections", "currency_field")
_STEP_KEYS = ("from", "to", "data", "money", "facts", "description")


def render() -> dict[str, str]:
    """File name -> file text, for every event type."""
    # Imported here: the envelope reads shipped.py, which main() writes first.
    from nexus.core.envelope import json_schemas

    return {
        f"{name}.json": json.dumps(schema, indent=2, sort_keys=True) + "\n" for name, schema in json_schemas().items()
    }


def shapes(folder: Path = PROCESSES) -> dict[str, dict[str, Any]]:
    """Each shipped definition, name -> its shape (the keys above), in file-name order."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        shape = {k: raw[k] for k in _SHAPE_KEYS if k in raw}
        shape["steps"] = {name: {k: step[k] for k in _STEP_KEYS if k in step} for name, step in raw["steps"].items()}
        out[raw["name"]] = shape
    return out


def render_shipped(folder: Path = PROCESSES) -> str:
    """The text of `core/shipped.py`: one definition in full (the one the others differ least from), each other
    one in full or as a JSON Merge Patch of an earlier one, whichever is shorter, and a part that then still
    stands in several places (a YAML anchor's schema) written once: what the definitions share is written once."""
    all_shapes = shapes(folder)
    if any(merge_patch.SHARED_KEY in text for text in map(json.dumps, all_shapes.values())):
        raise ValueError(f"a definition uses the key {merge_patch.SHARED_KEY!r}, which core/shipped.py reserves")
    candidates = (_derivations(all_shapes, root) for root in all_shapes)
    derived = min(candidates, key=lambda ds: sum(len(_json(doc)) for _, _, doc in ds))
    parts, docs = _share([doc for _, _, doc in derived])
    lines = [f"SHARED[{json.dumps(name)}] = {_load(part)}\n" for name, part in parts]
    for (name, base, _), doc in zip(derived, docs, strict=True):
        value = _load(doc)
        if base is not None:
            value = f"merge_patch.apply(\n    DEFINITIONS[{json.dumps(base)}],\n    {value},\n)"
        lines.append(f"DEFINITIONS[{json.dumps(name)}] = {value}\n")
    if [name for name, _, _ in derived] != list(all_shapes):
        names = ", ".join(map(json.dumps, all_shapes))
        lines.append(f"DEFINITIONS = {{name: DEFINITIONS[name] for name in ({names})}}\n")
    return (
        '"""The shipped process definitions\' shapes, generated from src/nexus/processes/*.yaml by `make schemas`\n'
        '(nexus.core.schemas_export): do not edit. Read them through `nexus.core.definitions`."""\n\n'
        "import json\nfrom typing import Any\n\nfrom nexus.core import merge_patch\n\n"
        "# What the definitions share is written once: a definition as the patch of another, a part that stands\n"
        '# in several places (a YAML anchor\'s schema) in SHARED and {"$shared": name} where it stands.\n'
        "SHARED: dict[str, Any] = {}\n"
        "DEFINITIONS: dict[str, dict[str, Any]] = {}\n\n\n"
        "def _load(text: str) -> Any:\n"
        "    return merge_patch.expand(json.loads(text), SHARED)\n\n\n" + "".join(lines)
    )


def _derivations(all_shapes: dict[str, dict[str, Any]], root: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(name, base, doc): `root` in full (base None), then the others in file order, each in full or as the
    patch of the earlier one it is shortest from."""
    out: list[tuple[str, str | None, dict[str, Any]]] = []
    done: dict[str, dict[str, Any]] = {}
    for name in sorted(all_shapes, key=lambda n: n != root):
        shape = all_shapes[name]
        doc, base = shape, None
        for earlier, earlier_shape in done.items():
            patch = merge_patch.diff(earlier_shape, shape)
            if patch is not None and len(_json(patch)) < len(_json(doc)):
                doc, base = patch, earlier
        out.append((name, base, doc))
        done[name] = shape
    return out


def _share(docs: list[dict[str, Any]]) -> tuple[list[tuple[str, Any]], list[dict[str, Any]]]:
    """The parts that stand in several places (the largest first, each of at least _MIN_LINES lines that are
    more than punctuation), and the docs with a `{"$shared": name}` in their places; parts in the order they
    can be defined (a part's own parts before it)."""
    parts: dict[str, Any] = {}
    while True:
        seen: dict[str, tuple[str, int]] = {}
        for doc in [*docs, *parts.values()]:
            for key, sub in _subtrees(doc):
                text = json.dumps(sub)
                first, count = seen.get(text, (key, 0))
                seen[text] = (first, count + 1)
        repeated = [t for t, (_, n) in seen.items() if n > 1 and _lines(json.loads(t)) >= _MIN_LINES]
        if not repeated:
            return list(reversed(parts.items())), docs
        text = max(repeated, key=len)
        name = seen[text][0]
        while name in parts:
            name += "_"
        marker = {merge_patch.SHARED_KEY: name}
        docs = [_replaced(d, text, marker) for d in docs]
        parts = {n: _replaced(p, text, marker) for n, p in parts.items()}
        parts[name] = json.loads(text)


_MIN_LINES = 6


def _subtrees(doc: Any) -> Any:
    """(key, object) for every object below `doc` (a list item under its list's key)."""
    items = doc.items() if isinstance(doc, dict) else []
    for key, value in items:
        for inner in value if isinstance(value, list) else [value]:
            if isinstance(inner, dict):
                yield key, inner
                yield from _subtrees(inner)


def _replaced(doc: Any, text: str, marker: dict[str, str]) -> Any:
    if isinstance(doc, dict):
        if json.dumps(doc) == text:
            return marker
        return {k: _replaced(v, text, marker) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_replaced(v, text, marker) for v in doc]
    return doc


def _lines(value: Any) -> int:
    """Lines of its rendering that say more than punctuation."""
    return sum(1 for line in _json(value).splitlines() if line.strip(" {}[],"))


def _load(value: Any) -> str:
    return f'_load(r"""{_json(value)}""")'


def _json(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=False)


def main(argv: list[str]) -> int:
    SHIPPED.write_text(render_shipped(), encoding="utf-8")
    target = Path(argv[0] if argv else "schemas/events")
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.json"):
        old.unlink()
    files = render()
    for name, text in files.items():
        (target / name).write_text(text, encoding="utf-8")
    print(f"wrote {SHIPPED.name} and {len(files)} schemas to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
