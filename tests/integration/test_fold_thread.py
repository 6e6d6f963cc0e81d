"""The fold thread: a heavy transaction's fold runs on one worker thread while the event loop answers other
requests; light transactions fold inline; `serve` lowers the switch interval and gives it back."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any

import pytest

from nexus import app
from nexus.core.decide.answers import Outcome
from nexus.core.decide.items import Incoming
from nexus.core.decide.validation import StepChecks
from nexus.core.process_model import CompiledProcess, Verdict
from nexus.fold_thread import FoldThread
from nexus.gateway import Gateway
from nexus.ingress.batcher import GroupCommitter
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_wire.codes import Decision
from tests.conftest import free_port
from tests.factories import step_json


class SpinningChecks(StepChecks):
    """The real checks, which also record the thread each order's step is judged on; a step of an order named
    `heavy-*` spins the CPU in Python (holding the GIL between switches) until `release` is set."""

    def __init__(self) -> None:
        self.threads: dict[str, str] = {}
        self.spinning = threading.Event()
        self.release = threading.Event()
        self.deadline = 0.0

    def verdict(
        self, process: CompiledProcess | None, name: str, status: str | None, facts: Mapping[str, Any],
        event_type: str, seq_id: int | None, data: Mapping[str, Any], limits: Mapping[str, Any],
        *, data_checked: bool = False,
    ) -> Verdict | None:  # fmt: skip
        order = str(data.get("user_id", ""))
        self.threads[order] = threading.current_thread().name
        if order.startswith("heavy-"):
            if not self.spinning.is_set():  # a fold on the loop (the old code) ends the spin itself, once
                self.deadline = time.monotonic() + 5.0
                self.spinning.set()
            while not self.release.is_set() and time.monotonic() < self.deadline:
                pass
        return super().verdict(
            process, name, status, facts, event_type, seq_id, data, limits, data_checked=data_checked
        )


def _items(prefix: str, n: int) -> list[Incoming]:
    steps = [step_json(f"{prefix}{i}", f"p-{prefix}{i}", 1) for i in range(n)]
    for step in steps:
        step["data"]["user_id"] = step["order_id"]
    return [Incoming.parse(step) for step in steps]


async def _light_while_heavy_spins(
    checks: SpinningChecks, submit: Callable[[list[Incoming]], Coroutine[Any, Any, list[Outcome]]], name: str
) -> tuple[Outcome, bool, list[Outcome]]:
    """Submits 40 items of orders `heavy-<name>N`, waits until their fold spins, submits one of `light-<name>0`,
    then releases the spin: the light outcome, whether the heavy request had ended first, the heavy outcomes."""
    heavy = asyncio.create_task(submit(_items(f"heavy-{name}", 40)))
    try:
        while not checks.spinning.is_set() and not heavy.done():
            await asyncio.sleep(0.01)
        [light] = await submit(_items(f"light-{name}", 1))
        heavy_done_first = heavy.done()
    finally:
        checks.release.set()
    return light, heavy_done_first, await heavy


async def test_a_heavy_fold_runs_on_the_worker_thread_while_the_loop_answers_a_light_transaction(db: Database) -> None:
    """A 40-item transaction (weight 40 >= 32) is folded on the `nexus-fold` thread; while it spins, a one-item
    transaction is locked, read, folded inline on the loop's thread and written, and answered first (on the
    code before the fold thread, the heavy fold held the loop until it gave up spinning)."""
    checks = SpinningChecks()
    folds = FoldThread(weight=32)
    folds.start()
    gateway = Gateway(db, checks=checks, folds=folds)
    try:
        light, heavy_done_first, outcomes = await _light_while_heavy_spins(checks, gateway.submit, "")
    finally:
        folds.close()
    assert light.decision is Decision.APPLY
    assert not heavy_done_first
    assert {o.decision for o in outcomes} == {Decision.APPLY}
    assert checks.threads["heavy-0"].startswith("nexus-fold")
    assert checks.threads["light-0"] == threading.main_thread().name


async def test_light_transactions_and_a_fold_thread_that_is_off_fold_inline(db: Database) -> None:
    """Under the weight (31 items) the fold stays on the loop's thread; with weight 0 (off) even a heavy one
    does, and no thread is started."""
    checks = SpinningChecks()
    on, off = FoldThread(weight=32), FoldThread(weight=0)
    on.start()
    off.start()
    try:
        await Gateway(db, checks=checks, folds=on).submit(_items("under-", 31))
        await Gateway(db, checks=checks, folds=off).submit(_items("off-", 40))
    finally:
        on.close()
        off.close()
    assert checks.threads["under-0"] == threading.main_thread().name
    assert checks.threads["off-0"] == threading.main_thread().name
    assert not off.running


async def test_close_ends_the_worker_thread_and_gives_the_switch_interval_back(db: Database) -> None:
    """`start` sets the switch interval to `switch_ms`; `close` ends the worker thread (after its fold) and
    restores the interval it found."""
    before = sys.getswitchinterval()
    folds = FoldThread(weight=1, switch_ms=0.5)
    folds.start()
    try:
        assert sys.getswitchinterval() == pytest.approx(0.0005)
        await Gateway(db, folds=folds).submit(_items("closing-", 2))
        assert any(t.name.startswith("nexus-fold") for t in threading.enumerate())
    finally:
        folds.close()
    assert not any(t.name.startswith("nexus-fold") for t in threading.enumerate())
    assert sys.getswitchinterval() == pytest.approx(before)
    assert not folds.running


async def test_serve_lowers_the_switch_interval_while_it_runs_and_restores_it(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A serving process runs with `NEXUS_FOLD_THREAD_SWITCH_MS` (here 0.5) as its switch interval and gives the
    interval back when it stops (a sweeper that fails stops it, as in test_app_supervision)."""
    before = sys.getswitchinterval()
    seen: list[float] = []

    async def failing_sweeper(gateway: Gateway, settings: Settings) -> None:
        await asyncio.sleep(0.5)
        raise RuntimeError("stop the test's serve")

    monkeypatch.setattr(app, "sweep_buffer", failing_sweeper)
    serving = settings.replace(http_port=free_port(), fold_thread_weight=32, fold_thread_switch_ms=0.5)
    with pytest.raises(app.ServiceFailed):
        async with asyncio.timeout(30):
            await app.serve(serving, dispatcher=False, on_ready=lambda _: seen.append(sys.getswitchinterval()))
    assert seen == [pytest.approx(0.0005)]
    assert sys.getswitchinterval() == pytest.approx(before)


@contextlib.asynccontextmanager
async def _group_commit(db: Database, checks: SpinningChecks) -> AsyncIterator[GroupCommitter]:
    """A started group commit (one worker per lane, heavy lanes from weight 32) over a gateway with a started fold
    thread; both stopped on leaving."""
    folds = FoldThread(weight=32)
    folds.start()
    committer = GroupCommitter(Gateway(db, checks=checks, folds=folds), workers=1, heavy_weight=32)
    committer.start()
    try:
        yield committer
    finally:
        await committer.stop()
        folds.close()


async def test_a_light_request_is_answered_while_a_heavy_request_of_the_group_commit_is_folded(db: Database) -> None:
    """Through the group commit (one worker per lane): a 40-item request goes to the heavy lane and spins on the
    fold thread; a one-item request queued after it is decided in the light lane and answered first (in one lane
    it waited for the heavy transaction to end)."""
    checks = SpinningChecks()
    async with _group_commit(db, checks) as committer:
        light, heavy_done_first, outcomes = await _light_while_heavy_spins(checks, committer.submit, "lane-")
    assert light.decision is Decision.APPLY
    assert not heavy_done_first
    assert [o.decision for o in outcomes] == [Decision.APPLY] * 40


async def test_one_event_requests_pooled_in_a_light_lane_fold_inline_however_many(db: Database) -> None:
    """Forty one-item requests pooled by the group commit make one light-lane transaction of 40 items: the lane
    has weighed them, so it folds on the loop's thread (weighed again by item count it went to the fold thread)."""
    checks = SpinningChecks()
    async with _group_commit(db, checks) as committer:
        outcomes = await asyncio.gather(*(committer.submit([item]) for item in _items("pooled-", 40)))
    assert [o.decision for [o] in outcomes] == [Decision.APPLY] * 40
    assert {checks.threads[f"pooled-{i}"] for i in range(40)} == {threading.main_thread().name}
