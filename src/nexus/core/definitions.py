"""What the rest of Nexus reads of a process definition: its step names, states, plans and data schemas.

Nothing here is written per process: every answer is read from a `CompiledProcess` handed in (the
gateway's catalog; the shipped definitions, `src/nexus/processes/*.yaml`, are loaded and compiled by the
registry, `nexus.processes.shipped`, as a user's are). A *plan* is a path through a definition's steps:
from a step allowed before the order exists to a terminal state other than `aborted`, each step allowed
from the state the previous one led to; `plans()` lists them in the order the definition declares its steps.

The step data schemas are JSON Schemas with two Nexus readings (`core/step_data.py`).
"""

from __future__ import annotations

from collections.abc import Iterable

from nexus.core.process_model import ABORTED, CompiledProcess, ProcessCatalog
from nexus_wire.codes import ABORT_STEP, REPLAN_STEP

DEFAULT_PROCESS = "order"
"""The process of an order whose first step names none."""
MAX_PLANS = 64
"""A definition with loops has endless paths: the lab's plans are the first ones (loops not taken)."""


def step_names(process: CompiledProcess) -> tuple[str, ...]:
    """The step types of a process, in the order its definition declares them (built-in steps excluded)."""
    return tuple(process.steps)


def terminal_states(process: CompiledProcess) -> frozenset[str]:
    return frozenset({*process.definition.terminal, ABORTED})


def plans(process: CompiledProcess, limit: int = MAX_PLANS) -> tuple[tuple[str, ...], ...]:
    """Every path through the process's steps to a terminal state other than aborted (at most `limit`)."""
    terminal = terminal_states(process)
    found: list[tuple[str, ...]] = []

    def walk(state: str | None, path: tuple[str, ...], seen: frozenset[str | None]) -> None:
        for name in process.allowed.get(state, ()):
            if len(found) >= limit:
                return
            after = process.steps[name].step.to
            if after in terminal:
                if after != ABORTED:
                    found.append((*path, name))
            elif after not in seen:
                walk(after, (*path, name), seen | {after})

    walk(None, (), frozenset({None}))
    return tuple(found)


def main_plan(process: CompiledProcess) -> tuple[str, ...]:
    """The first plan: the path an honest agent takes when every branch goes the first declared way."""
    return plans(process, limit=1)[0]


def status_after(process: CompiledProcess, path: Iterable[str]) -> str | None:
    """The state an order is in once the steps of `path` applied (None: no step)."""
    status: str | None = None
    for name in path:
        status = ABORTED if name == ABORT_STEP else process.steps[name].step.to
    return status


def event_kinds(catalog: ProcessCatalog) -> tuple[str, ...]:
    """Every step type of every definition in the catalog, then the built-in steps: the metrics' `kind`s."""
    return _kinds(sorted(catalog.versions.values(), key=lambda p: (p.name, p.version)))


def catalog_kinds(catalog: ProcessCatalog) -> tuple[str, ...]:
    """`event_kinds` with the default process's steps first, then the others' by name (latest versions)."""
    names = sorted(catalog.latest, key=lambda n: (n != DEFAULT_PROCESS, n))
    return _kinds([catalog.latest[n] for n in names])


def _kinds(processes: Iterable[CompiledProcess]) -> tuple[str, ...]:
    names: dict[str, None] = {}
    for process in processes:
        names.update(dict.fromkeys(step_names(process)))
    return (*names, ABORT_STEP, REPLAN_STEP)
