"""Write the JSON Schema of every event type to a folder: ``python -m nexus.core.schemas_export DIR``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nexus.core.envelope import json_schemas


def render() -> dict[str, str]:
    """File name -> file text, for every event type."""
    return {
        f"{name}.json": json.dumps(schema, indent=2, sort_keys=True) + "\n" for name, schema in json_schemas().items()
    }


def main(argv: list[str]) -> int:
    target = Path(argv[0] if argv else "schemas/events")
    target.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (target / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(render())} schemas to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
