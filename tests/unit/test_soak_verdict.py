"""The soak's memory verdict: the kept processes against minute 5, PostgreSQL at the same phase of each cycle."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nexus_lab.soak import Soak, SoakConfig
from nexus_lab.soak_report import Sample


@pytest.fixture
def soak() -> Iterator[Soak]:
    run = Soak(SoakConfig(minutes=30), say=lambda _line: None)
    yield run
    run.session.close()


def _verdict(soak: Soak) -> dict[str, tuple[bool, str]]:
    return {criterion: (held, detail) for criterion, held, detail in soak.verdict() if criterion.startswith("RSS")}


def test_postgres_between_cycles_is_not_judged_but_its_settled_memory_is(soak: Soak) -> None:
    """PostgreSQL's private memory swinging mid-cycle (it is restarted every cycle) passes while its settled
    samples hold, and a growth of its settled samples fails."""
    soak.samples = [
        Sample(5.0, {"gateway-0": 130.0, "postgres": 150.0}),
        Sample(5.5, {"gateway-0": 130.0, "postgres": 120.0}, settled=True),
        Sample(6.0, {"gateway-0": 131.0, "postgres": 75.0}),
        Sample(29.0, {"gateway-0": 131.0, "postgres": 165.0}),
        Sample(30.0, {"gateway-0": 132.0, "postgres": 125.0}, settled=True),
    ]
    verdict = _verdict(soak)
    assert verdict["RSS of postgres within 10% of minute 5 (settled samples)"] == (True, "120.0 -> 125.0 MB (+4.2%)")
    assert verdict["RSS of gateway-0 within 10% of minute 5"][0]

    soak.samples[-1] = Sample(30.0, {"gateway-0": 132.0, "postgres": 140.0}, settled=True)
    assert not _verdict(soak)["RSS of postgres within 10% of minute 5 (settled samples)"][0]


def test_a_growing_gateway_fails_whatever_the_phase(soak: Soak) -> None:
    """A never-restarted process is judged on every sample: 130 MB at minute 5 and 150 MB at the end fails."""
    soak.samples = [
        Sample(5.0, {"gateway-0": 130.0}),
        Sample(17.0, {"gateway-0": 140.0}, settled=True),
        Sample(30.0, {"gateway-0": 150.0}),
    ]
    held, detail = _verdict(soak)["RSS of gateway-0 within 10% of minute 5"]
    assert not held
    assert detail == "130.0 -> 150.0 MB (+15.4%)"
