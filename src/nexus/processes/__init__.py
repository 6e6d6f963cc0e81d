"""The process registry: definitions shipped in this package and found in `NEXUS_PROCESS_DIR`, registered
in PostgreSQL by (name, version) with their content hash, compiled into the catalog the gateway decides
with. Orders stay pinned to the version they started with, so every registered version stays loadable; a
file changed without a new version is refused at start (`ProcessChangedError`)."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path
from typing import Any

from nexus.core.definitions import DEFAULT_PROCESS, catalog_kinds
from nexus.core.process_compile import compile_definition, definition_schema
from nexus.core.process_model import CompiledProcess, DefinitionError, ProcessCatalog, content_hash
from nexus.errors import ConfigurationError
from nexus.store.database import Database
from nexus.store.queries import query


class ProcessChangedError(ConfigurationError):
    """A process definition changed without raising its version."""


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    """A definition's text and where it came from (a package file or a path)."""

    origin: str
    text: str


def builtin_sources() -> list[Source]:
    folder = resources.files("nexus.processes")
    return [
        Source(f"nexus/processes/{entry.name}", entry.read_text(encoding="utf-8"))
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".yaml")
    ]


def dir_sources(process_dir: Path | None) -> list[Source]:
    if process_dir is None:
        return []
    if not process_dir.is_dir():
        raise ConfigurationError(f"NEXUS_PROCESS_DIR={process_dir} is not a directory")
    return [Source(str(p), p.read_text(encoding="utf-8")) for p in sorted(process_dir.glob("*.y*ml"))]


def compile_sources(sources: list[Source]) -> list[CompiledProcess]:
    """Compile every source; a refused definition names its file and line; two files may not share a
    (name, version)."""
    compiled: dict[tuple[str, int], tuple[str, CompiledProcess]] = {}
    for source in sources:
        try:
            process = compile_definition(source.text)
        except DefinitionError as exc:
            raise ConfigurationError(f"{source.origin}: {exc}") from exc
        key = (process.name, process.version)
        if key in compiled and compiled[key][1].content_hash != process.content_hash:
            raise ConfigurationError(f"{source.origin} and {compiled[key][0]} both define {key[0]} v{key[1]}")
        compiled[key] = (source.origin, process)
    return [p for _, p in compiled.values()]


_BUILTIN: ProcessCatalog | None = None


def builtin_catalog() -> ProcessCatalog:
    """The package's definitions, compiled once per interpreter (for gateways built without a registry)."""
    global _BUILTIN
    if _BUILTIN is None:
        _BUILTIN = ProcessCatalog.of(compile_sources(builtin_sources()))
    return _BUILTIN


def shipped(name: str = DEFAULT_PROCESS) -> CompiledProcess:
    """A shipped definition, loaded and compiled as a user's is (its latest version); KeyError if none."""
    process = builtin_catalog().get(name)
    if process is None:
        raise KeyError(f"no shipped process {name!r}")
    return process


def shipped_names() -> tuple[str, ...]:
    """The shipped definitions' names, in file-name order."""
    return tuple(builtin_catalog().latest)


def shipped_kinds() -> tuple[str, ...]:
    """Every step type of the shipped definitions (the default process's first), then the built-in steps."""
    return catalog_kinds(builtin_catalog())


async def register(db: Database, process_dir: Path | None = None) -> ProcessCatalog:
    """Register the package's and `process_dir`'s definitions; return the catalog of every registered
    version. Raise `ProcessChangedError` if a (name, version) is registered with other content."""
    sources = [*builtin_sources(), *dir_sources(process_dir)]
    origins = {}
    for process in compile_sources(sources):
        origins[(process.name, process.version)] = process
    async with db.pool.acquire() as conn, conn.transaction():
        for (name, version), process in origins.items():
            await conn.execute(
                query("processes.sql", "register_process"),
                name,
                version,
                process.content_hash,
                _text_of(sources, process),
            )
            # the live_orders quota's triggers (migration 0023) tell a finished order by these
            terminal = sorted(str(state) for state in process.definition.terminal)
            await conn.execute(query("quotas.sql", "set_process_terminal"), name, version, terminal)
        rows = await conn.fetch(query("processes.sql", "all_processes"))
    known: list[CompiledProcess] = []
    for row in rows:
        current = origins.get((row["name"], row["version"]))
        if current is not None and current.content_hash != row["content_hash"]:
            raise ProcessChangedError(
                f"process {row['name']} v{row['version']} changed since it was registered "
                f"(hash {row['content_hash'][:12]} -> {current.content_hash[:12]}): raise its version to change it"
            )
        # A version registered before rules were judged for cost stays loadable: its orders are pinned to it.
        known.append(current or compile_definition(row["body"], judge_cost=False))
    return ProcessCatalog.of(known)


def _text_of(sources: list[Source], process: CompiledProcess) -> str:
    return next(s.text for s in sources if content_hash(s.text) == process.content_hash)


def schema_text() -> str:
    return json.dumps(definition_schema(), indent=2, sort_keys=True) + "\n"


def describe(process: CompiledProcess) -> dict[str, Any]:
    """A definition as the API and `nexus processes show` present it."""
    d = process.definition
    return {
        "name": d.name,
        "version": d.version,
        "content_hash": process.content_hash,
        "description": d.description,
        "states": d.states,
        "terminal": d.terminal,
        "initial": list(process.allowed.get(None, ())),
        "max_rejections": d.max_rejections,
        "steps": {
            name: {
                "from": s.step.from_,
                "to": s.step.to,
                "checks": [{"id": c.id, "rule": c.rule, "code": c.code, "message": c.message} for c in s.step.checks],
                **({"effect": s.step.effect.model_dump()} if s.step.effect else {}),
                **({"approval": s.step.approval.model_dump()} if s.step.approval else {}),
                **({"pivot": True} if s.step.pivot else {}),
                "data_schema": data_schema(process, name),
            }
            for name, s in process.steps.items()
        },
    }


def data_schema(process: CompiledProcess, step: str) -> dict[str, Any]:
    """The JSON Schema of a step's data: the definition's own `data` (a process is only its YAML)."""
    declared = process.steps[step].step.data
    return dict(declared) if declared else {"type": "object"}


def mermaid(process: CompiledProcess) -> str:
    """A Mermaid state diagram of the process (ABORT_PLAN from every non-terminal state)."""
    lines = ["stateDiagram-v2"]
    for name, s in process.steps.items():
        for origin in s.step.from_:
            lines.append(f"    {'[*]' if origin is None else origin} --> {s.step.to}: {name}")
    terminal = set(process.definition.terminal) | {"aborted"}
    for state in process.definition.states:
        if state not in terminal:
            lines.append(f"    {state} --> aborted: ABORT_PLAN")
    for state in sorted(terminal):
        lines.append(f"    {state} --> [*]")
    return "\n".join(lines) + "\n"
