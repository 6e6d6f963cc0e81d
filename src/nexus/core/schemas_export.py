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
    one in full or as a JSON Merge Patch of an earlier one, whichever is shorter: what they share is written once."""
    all_shapes = shapes(folder)
    lines = min((_derivations(all_shapes, root) for root in all_shapes), key=lambda ls: sum(map(len, ls)))
    if [line.split('"')[1] for line in lines] != list(all_shapes):
        names = ", ".join(map(json.dumps, all_shapes))
        lines.append(f"DEFINITIONS = {{name: DEFINITIONS[name] for name in ({names})}}\n")
    return (
        '"""The shipped process definitions\' shapes, generated from src/nexus/processes/*.yaml by `make schemas`\n'
        '(nexus.core.schemas_export): do not edit. Read them through `nexus.core.definitions`."""\n\n'
        "import json\nfrom typing import Any\n\nfrom nexus.core import merge_patch\n\n"
        "# What two definitions share is written once (a patch of the other); a schema a definition repeats\n"
        "# (a YAML anchor such as the order's item) is written at each use: JSON has no anchors, and the\n"
        "# catalog reads each step's data schema whole.\n"
        "DEFINITIONS: dict[str, dict[str, Any]] = {}\n" + "".join(lines)
    )


def _derivations(all_shapes: dict[str, dict[str, Any]], root: str) -> list[str]:
    """`root` in full, then the others in file order, each from the earlier one its patch is shortest from."""
    lines: list[str] = []
    done: dict[str, dict[str, Any]] = {}
    for name in sorted(all_shapes, key=lambda n: n != root):
        shape = all_shapes[name]
        text, base = _json(shape), None
        for earlier, earlier_shape in done.items():
            patch = merge_patch.diff(earlier_shape, shape)
            if patch is not None and len(_json(patch)) < len(text):
                text, base = _json(patch), earlier
        value = f'json.loads(r"""{text}""")'
        if base is not None:
            value = f"merge_patch.apply(\n    DEFINITIONS[{json.dumps(base)}],\n    {value},\n)"
        lines.append(f"DEFINITIONS[{json.dumps(name)}] = {value}\n")
        done[name] = shape
    return lines


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
