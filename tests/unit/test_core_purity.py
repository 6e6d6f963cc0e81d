"""The core stays pure: no I/O library, no asyncio, nothing from the adapters."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "src" / "nexus" / "core"
# The list of the import-linter contract `core-no-io` (pyproject.toml), plus what a pure function taking
# `now` has no use for (os, time); this test also sees imports that grimp would not (e.g. inside functions
# of a file never imported) and submodules (urllib.request).
FORBIDDEN = {
    "asyncio",
    "socket",
    "ssl",
    "selectors",
    "subprocess",
    "threading",
    "asyncpg",
    "psycopg",
    "psycopg2",
    "aiokafka",
    "kafka",
    "confluent_kafka",
    "httpx",
    "aiohttp",
    "requests",
    "urllib3",
    "uvicorn",
    "fastapi",
    "starlette",
    "http",
    "urllib",
    "prometheus_client",
    "langgraph",
    "os",
    "time",
}
ALLOWED_NEXUS = ("nexus.core", "nexus.errors")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_core_imports_no_io_and_no_adapters() -> None:
    """Every module of nexus.core imports neither I/O libraries nor the rest of Nexus."""
    offenders = []
    for path in sorted(CORE.glob("*.py")):
        for name in _imports(path):
            top = name.split(".")[0]
            if top in FORBIDDEN or (top == "nexus" and not name.startswith(ALLOWED_NEXUS)):
                offenders.append(f"{path.name}: {name}")
    assert offenders == []
