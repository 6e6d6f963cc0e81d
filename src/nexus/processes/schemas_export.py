"""Write the JSON Schema of every event type: ``python -m nexus.processes.schemas_export DIR``.

The schemas are the envelope's, one per step type of the shipped definitions (`src/nexus/processes/*.yaml`,
loaded and compiled by the registry as a user's are) and per built-in step, written to DIR (schemas/events/).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nexus.core.envelope import json_schemas
from nexus.core.process_model import ProcessCatalog
from nexus.processes import builtin_catalog


def render(catalog: ProcessCatalog | None = None) -> dict[str, str]:
    """File name -> file text, for every event type of `catalog` (default: the shipped definitions)."""
    schemas = json_schemas(catalog or builtin_catalog())
    return {f"{name}.json": json.dumps(schema, indent=2, sort_keys=True) + "\n" for name, schema in schemas.items()}


def main(argv: list[str]) -> int:
    target = Path(argv[0] if argv else "schemas/events")
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.json"):
        old.unlink()
    files = render()
    for name, text in files.items():
        (target / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(files)} schemas to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
