"""Write docs/settings.md from src/nexus/settings.py: every setting's variable, default and meaning.

Usage: `python scripts/settings_doc.py [PATH]` (default docs/settings.md), or `make settings-doc`.
tests/unit/test_settings_doc.py renders the page again and compares, so a setting added without running
this fails there; a setting without a docstring (its meaning) makes this script fail, naming it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nexus.settings import OTHER_VARIABLES, Settings, env_name

ROOT = Path(__file__).resolve().parent.parent
HEADER = """# Settings

Generated from `src/nexus/settings.py` by `make settings-doc` (`scripts/settings_doc.py`); do not edit by
hand: `tests/unit/test_settings_doc.py` renders it again and compares.

Every setting of the gateway is a `NEXUS_*` environment variable, read once when a `nexus` command starts
(flags such as `--http-port` or `--database-url` win over the variable). An empty variable counts as unset.
A malformed value stops the command with one line naming the variable (exit 2). `nexus serve` logs one
WARNING at start for each `NEXUS_*` variable that nobody reads, with the nearest known name (a misspelt
name would otherwise be ignored in silence).

Beside the table: `NEXUS_SERVICE_<NAME>_URL` (any name) sets the base URL of the effect service `<name>`
(merged into `NEXUS_SERVICE_URLS`); the standard `OTEL_*` variables configure tracing (see
[observability](observability.md)).

| variable | default | meaning |
|---|---|---|
"""


def default_text(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if value == "":
        return '`""`'
    return f"`{value}`"


def meaning(name: str) -> str:
    description = Settings.model_fields[name].description
    if not description:
        raise SystemExit(f"settings_doc: setting {name} has no docstring (its meaning in docs/settings.md)")
    return " ".join(description.split()).replace("|", "\\|")


def render() -> str:
    rows = [
        f"| `{env_name(name)}` | {default_text(field.default)} | {meaning(name)} |"
        for name, field in Settings.model_fields.items()
    ]
    others = ", ".join(f"`{name}`" for name in sorted(OTHER_VARIABLES))
    footer = (
        "\nRead by other tools, not by the gateway (known, so `nexus serve` does not warn about them): the SDK's "
        "and `nexus mcp --stdio`'s `NEXUS_API_KEY` and `NEXUS_GATEWAY_URL` ([sdk](sdk.md)), the lab's LLM planner's "
        "`NEXUS_LLM_*` ([llm-planner](llm-planner.md)), and the scripts' and tests' names. The whole list "
        f"(`OTHER_VARIABLES` in `settings.py`): {others}.\n"
    )
    return HEADER + "\n".join(rows) + "\n" + footer


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else ROOT / "docs" / "settings.md"
    path.write_text(render(), encoding="utf-8")
    print(f"wrote {path} ({len(Settings.model_fields)} settings)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
