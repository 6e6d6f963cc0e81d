"""The soak's memory verdict: the kept processes against minute 5, PostgreSQL at the same phase of each cycle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nexus_lab.soak import PHASE_MARGIN_S, Soak, SoakConfig
from nexus_lab.soak_memory import steady_mb
from nexus_lab.soak_report import Sample, write_report


@pytest.fixture
def soak() -> Iterator[Soak]:
    run = Soak(SoakConfig(minutes=30), say=lambda _line: None)
    yield run
    run.session.close()


def _verdict(soak: Soak) -> dict[str, tuple[bool, str]]:
    return {
        criterion: (held, detail)
        for criterion, held, detail in soak.verdict()
        if criterion.startswith(("RSS", "PostgreSQL"))
    }


POSTGRES = "PostgreSQL's own memory at most 10% or 5 MB above minute 5 (trend of the settled samples)"


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
    assert verdict[POSTGRES] == (True, "120.0 -> 125.0 MB (+4.2%), trend of 2 settled samples (120.0, 125.0)")
    assert verdict["RSS of gateway-0 at most 10% above minute 5"][0]

    soak.samples[-1] = Sample(30.0, {"gateway-0": 132.0, "postgres": 140.0}, settled=True)
    assert not _verdict(soak)[POSTGRES][0]


def test_a_growing_gateway_fails_whatever_the_phase(soak: Soak) -> None:
    """A never-restarted process is judged on every sample: 130 MB at minute 5 and 150 MB at the end fails."""
    soak.samples = [
        Sample(5.0, {"gateway-0": 130.0}),
        Sample(17.0, {"gateway-0": 140.0}, settled=True),
        Sample(30.0, {"gateway-0": 150.0}),
    ]
    held, detail = _verdict(soak)["RSS of gateway-0 at most 10% above minute 5"]
    assert not held
    assert detail == "130.0 -> 150.0 MB (+15.4%)"


def test_memory_that_falls_is_not_a_leak(soak: Soak) -> None:
    """Only growth fails: PostgreSQL's settled memory falling 149 -> 120 MB (run 2 of round 14) passes, and so does
    a gateway that shrank; a growth past 10 % still fails."""
    soak.samples = [
        Sample(5.0, {"gateway-0": 130.0}),
        Sample(5.5, {"gateway-0": 130.0, "postgres": 149.2}, settled=True),
        Sample(30.0, {"gateway-0": 100.0, "postgres": 120.0}, settled=True),
    ]
    verdict = _verdict(soak)
    assert verdict[POSTGRES] == (True, "149.2 -> 120.0 MB (-19.6%), trend of 2 settled samples (149.2, 120.0)")
    assert verdict["RSS of gateway-0 at most 10% above minute 5"] == (True, "130.0 -> 100.0 MB (-23.1%)")
    soak.samples[-1] = Sample(30.0, {"gateway-0": 144.0, "postgres": 120.0}, settled=True)
    assert not _verdict(soak)["RSS of gateway-0 at most 10% above minute 5"][0]


RUN3_MINUTES = (5.3, 10.5, 15.8, 21.0, 26.3, 31.9)


def _settled(values: tuple[float, ...]) -> list[Sample]:
    return [Sample(m, {"postgres": mb}, settled=True) for m, mb in zip(RUN3_MINUTES, values, strict=True)]


def test_postgres_is_judged_by_the_trend_of_its_settled_samples(soak: Soak) -> None:
    """Round 14 run 3's swing (105.7, 130.1, 103.5, 105.4, 112.3, 120.8 MB: last vs first +14.3 %) passes on its
    trend; a steady climb between the same first and last figures fails, and so does one of 10 MB on ~10 MB."""
    soak.samples = _settled((105.7, 130.1, 103.5, 105.4, 112.3, 120.8))
    held, detail = _verdict(soak)[POSTGRES]
    assert held, detail
    assert detail.startswith("105.2 -> 114.9 MB (+9.2%), trend of 6 settled samples")
    soak.samples = _settled((105.7, 108.7, 111.7, 114.7, 117.7, 120.8))
    held, detail = _verdict(soak)[POSTGRES]
    assert not held
    assert detail.startswith("105.7 -> 120.9 MB (+14.3%)")
    soak.samples = _settled((10.0, 12.0, 14.0, 16.0, 18.0, 20.0))
    assert not _verdict(soak)[POSTGRES][0]


def test_a_small_figure_may_grow_by_the_floor(soak: Soak) -> None:
    """The judged figure of ~10 MB may grow 3 MB (a backend's caches filling), not 6 MB."""
    soak.samples = _settled((10.0, 10.6, 11.2, 11.8, 12.4, 13.0))
    assert _verdict(soak)[POSTGRES][0]
    soak.samples = _settled((10.0, 11.2, 12.4, 13.6, 14.8, 16.0))
    assert not _verdict(soak)[POSTGRES][0]


def test_postgres_memory_counts_its_own_processes_outside_shared_memory() -> None:
    """The judged figure sums the postmaster's and its server processes' own memory with the median worked
    backend's: another backend, unused pool connections (~1 MB) or an autovacuum worker do not move it, a growth
    of every worked connection does."""
    by_kind = {"postmaster": [0.3], "checkpointer": [0.6], "walwriter": [0.4], "client backend": [7.0, 8.0, 9.0]}
    assert steady_mb(by_kind) == pytest.approx(9.3)
    unused = [1.1] * 6
    more = {**by_kind, "client backend": [7.0, 8.0, 8.0, 9.0, *unused], "autovacuum worker": [30.0]}
    assert steady_mb(more) == pytest.approx(9.3)
    assert steady_mb({**by_kind, "client backend": [12.0, 13.0, 14.0, *unused]}) == pytest.approx(14.3)
    assert steady_mb({"postmaster": [0.3]}) == pytest.approx(0.3)


def test_markers_are_kept_one_cycle_and_the_sample_waits_for_the_retention(soak: Soak) -> None:
    """The soak keeps removal markers for the retention plus the sample's margin (a cycle's shortest length, not
    twice the retention), and a settled sample of a judged run is taken that long after the cycle's load began,
    however early the cycle's checks end."""
    soak.config = SoakConfig(minutes=30, retention_s=1)
    env = soak._retention_env(soak.session.tmp)
    assert env["NEXUS_RETENTION_S"] == "1"
    assert env["NEXUS_REMOVED_ORDER_MEMORY_S"] == str(round(1 + PHASE_MARGIN_S))
    taken: list[float] = []

    async def count() -> dict[str, int]:
        taken.append(time.monotonic())
        return {"orders": 1}

    soak.config.retention_s = 0
    checked = asyncio.Event()
    checked.set()  # the checks ended at once
    soak.started = began = time.monotonic() - PHASE_MARGIN_S + 0.3
    asyncio.run(soak.settled_at_phase(began, count, checked))
    assert taken[0] >= began + soak.phase_s()
    assert soak.samples[-1].settled and soak.samples[-1].tables == {"orders": 1}


def _flat(soak: Soak) -> tuple[bool, str]:
    [(held, detail)] = [(h, d) for c, h, d in soak.verdict() if c.startswith("tables with")]
    return held, detail


def test_tables_are_judged_flat_from_minute_10_on_settled_samples(soak: Soak) -> None:
    """A table of >= 1,000 rows at minute 10 may end within 10 % or 1,000 rows; one that doubled fails; small
    tables and unsettled samples are not judged."""
    soak.samples = [
        Sample(10.5, {}, settled=True, tables={"orders": 20_000, "outbox": 100_000, "plans": 300}),
        Sample(20.0, {}, tables={"orders": 90_000}),
        Sample(30.0, {}, settled=True, tables={"orders": 21_500, "outbox": 108_000, "plans": 5_000}),
    ]
    assert _flat(soak) == (True, "minute 10.5 -> 30.0: 2 tables judged, flat")
    soak.samples[-1] = Sample(30.0, {}, settled=True, tables={"orders": 40_000, "outbox": 100_500})
    assert _flat(soak) == (False, "minute 10.5 -> 30.0: orders 20000 -> 40000")


def test_a_run_under_15_minutes_says_its_tables_are_not_judged(soak: Soak) -> None:
    """`make test`'s short soak prints the flatness criterion as not judged."""
    soak.config = SoakConfig(minutes=2)
    soak.samples = [Sample(1.0, {}, settled=True, tables={"orders": 5_000})]
    assert _flat(soak) == (True, "not judged: a run shorter than 15 minutes")


def test_the_report_draws_and_lists_each_table_of_1000_rows(soak: Soak, tmp_path: Path) -> None:
    """soak-tables.png is drawn beside soak.json, and soak.md lists each table of >= 1,000 rows at minute 10
    and at the end (a smaller table is left out)."""
    soak.config = SoakConfig(minutes=30, out=tmp_path)
    soak.samples = [
        Sample(10.5, {}, settled=True, tables={"orders": 20_000, "outbox": 100_000, "plans": 300}),
        Sample(30.0, {}, settled=True, tables={"orders": 21_500, "outbox": 108_000, "plans": 400}),
    ]
    write_report(soak.config, [], soak.samples, [], soak.verdict())
    assert (tmp_path / "soak-tables.png").stat().st_size > 0 and (tmp_path / "soak.json").exists()
    text = (tmp_path / "soak.md").read_text()
    assert "orders        20000        21500   +1500" in text, text
    assert "outbox       100000       108000   +8000" in text, text
    assert "plans " not in text, text
