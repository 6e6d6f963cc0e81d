"""The soak's constant load: every cycle runs the same rounds of plans, paced over its faults' schedule."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from nexus_lab.agent.runner import PlanRun
from nexus_lab.chaos.transports import http_transports
from nexus_lab.soak import CYCLE, ROUNDS_PER_CYCLE, Soak, SoakConfig, round_starts


@pytest.fixture
def soak() -> Iterator[Soak]:
    run = Soak(SoakConfig(minutes=30), say=lambda _line: None)
    yield run
    run.session.close()


def test_two_cycles_send_the_same_plans_under_other_order_ids(soak: Soak) -> None:
    """Cycles 1 and 2 give each round the same agent seeds (same plans, outcomes, hostile modes) and their
    orders disjoint ids: the agent's are drawn fresh, the sagas' carry the cycle's number."""
    transport = http_transports(["http://127.0.0.1:9"])[0]
    ids: dict[int, set[str]] = {1: set(), 2: set()}
    for k in range(3):
        first, second = soak.round_work(1, k), soak.round_work(2, k)
        assert first[:2] == second[:2]
        assert first[2] != second[2]
        for n, work in ((1, first), (2, second)):
            runs = [PlanRun(i, config, transport) for config in work[:2] for i in range(config.orders)]
            ids[n] |= {run.order_id for run in runs} | {f"{work[2]}s{i}" for i in range(soak.config.saga_plans)}
    assert ids[1] and ids[2] and not ids[1] & ids[2]
    assert len({soak.round_work(1, k)[0].seed for k in range(3)}) == 3


def test_rounds_start_evenly_over_the_faults_schedule(soak: Soak) -> None:
    """Round k may start k x schedule / rounds after the load began: the first at once, the last one interval
    before the faults' nominal end, so every fault meets load and every cycle runs the same number of rounds."""
    schedule = soak.schedule_s()
    assert schedule == len(CYCLE) * (5.0 + soak.config.phase_s)
    starts = round_starts(ROUNDS_PER_CYCLE, schedule)
    assert len(starts) == soak.config.rounds_per_cycle == ROUNDS_PER_CYCLE
    assert starts[0] == 0.0
    assert starts[-1] == pytest.approx(schedule - schedule / ROUNDS_PER_CYCLE)
    gaps = {round(b - a, 9) for a, b in itertools.pairwise(starts)}
    assert gaps == {round(schedule / ROUNDS_PER_CYCLE, 9)}
