"""The saga records' processes with effects, computed once per process catalog (not once per transaction),
and computed again for another catalog."""

from __future__ import annotations

from nexus.core.process_model import ProcessCatalog
from nexus.processes import builtin_catalog
from nexus.store import sagas


def test_each_catalog_gets_its_own_processes_with_effects() -> None:
    """The same catalog's answer is the one computed for it; another catalog (without the processes with
    effects) gets its own, and the first again its own after it."""
    shipped = builtin_catalog()
    without = ProcessCatalog.of([p for p in shipped.versions.values() if p.name not in sagas.effect_processes(shipped)])
    expected = sagas.effect_processes(shipped)
    assert expected and not sagas.effect_processes(without)
    first = sagas._effect_processes_of(shipped)
    assert first == expected and sagas._effect_processes_of(shipped) is first
    assert sagas._effect_processes_of(without) == frozenset()
    assert sagas._effect_processes_of(shipped) == expected
