"""A large body is decoded, checked and weighed in a worker thread, not on the event loop (issue 34: a 1,000-line
step, about 56 KB, decoded on the loop held it about 3 ms in one piece, behind which every other tenant waited)."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest

from nexus.auth.roles import Principal, Role
from nexus.core.decide.items import Incoming
from nexus.fold_thread import weight_of
from nexus.ingress import fast_events, request_guard
from nexus.ingress.events_body import limits_of
from nexus.ingress.fast_events import _parse_bound, answer_events
from nexus.ingress.request_guard import RequestGuard
from nexus.settings import Settings

AGENT = Principal(1, "acme", frozenset({Role.AGENT}), "agent")


def _step(lines: int) -> dict[str, Any]:
    items = [{"product_id": f"p{i}", "quantity": 1, "unit_price": 1} for i in range(lines)]
    return {
        "event_id": str(uuid.uuid4()), "event_type": "OrderCreated", "plan_id": "p", "order_id": "o", "seq_id": 1,
        "timestamp": "2026-01-01T00:00:00Z", "data": {"items": items, "total_amount": lines},
    }  # fmt: skip


def _threads_of(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[str]:
    """The names of the threads `module.name` runs in from now on."""
    seen: list[str] = []
    original = getattr(module, name)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, recorded)
    return seen


@pytest.mark.parametrize(("lines", "off_the_loop"), [(10, False), (200, True)])
async def test_an_events_body_of_8_kib_or_more_is_decoded_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch, lines: int, off_the_loop: bool
) -> None:
    """With the default settings: a 10-line step (under 1 KB) is decoded on the loop, a 200-line one (about
    11 KB, 0.6 ms of decoding) in a worker thread. (The body names another tenant: answered 403 before any
    transaction.)"""
    seen = _threads_of(monkeypatch, fast_events, "parse_body")
    body = json.dumps(_step(lines) | {"tenant_id": "globex"}).encode()
    status, _, _ = await answer_events(body, None, AGENT, Settings(), submitter=None)  # type: ignore[arg-type]  # refused before the group commit
    assert status == 403
    assert (seen != [threading.main_thread().name]) is off_the_loop, seen


def test_a_large_bodys_items_are_weighed_where_it_was_decoded() -> None:
    """`weigh`: each item carries its weight (the group commit does not walk its 1,000 lines on the loop), the
    weight the walk finds."""
    body = json.dumps([_step(1000), _step(1)]).encode()
    _, weighed = _parse_bound(body, None, limits_of(Settings()), AGENT, weigh=True)
    _, unweighed = _parse_bound(body, None, limits_of(Settings()), AGENT)
    assert [item.weight for item in weighed if item] == [1 + 1000 // 16, 1]
    assert [item.weight for item in unweighed if item] == [0, 0]
    assert [weight_of(item) for item in unweighed if item] == [63, 1]


def test_an_items_own_weight_is_not_walked_again() -> None:
    assert weight_of(Incoming({"data": {"items": list(range(160))}})) == 11
    assert weight_of(Incoming({"data": {"items": list(range(160))}}, weight=3)) == 3


@pytest.mark.parametrize(("lines", "off_the_loop"), [(10, False), (200, True)])
async def test_a_large_json_body_is_checked_strictly_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch, lines: int, off_the_loop: bool
) -> None:
    """The steps API's and MCP's bodies (every JSON body but /v1/events'): the strict check of a body of 8 KiB or
    more runs in a worker thread, and its refusal is the same (an integer beyond 64 bits: 422 INVALID_EVENT)."""
    seen = _threads_of(monkeypatch, request_guard, "_refusal_of")
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    guard = RequestGuard(None, Settings())
    step = {"step": "OrderCreated", "data": _step(lines)["data"] | {"total_amount": 2**70}}
    scope = {"type": "http", "path": "/v1/orders/o/steps", "method": "POST", "headers": []}
    assert not await guard._strict(json.dumps(step).encode(), scope, receive, send)
    assert sent[0]["status"] == 422
    assert json.loads(sent[1]["body"])["code"] == "INVALID_EVENT"
    assert (seen != [threading.main_thread().name]) is off_the_loop, seen
