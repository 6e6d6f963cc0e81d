"""The saga checker (nexus_lab.saga_checker) reports each invariant's violation, and nothing when all hold."""

from __future__ import annotations

import datetime as dt
from typing import Any

from nexus_lab.saga_checker import check_sagas

T = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _step(
    seq: int, service: str, status: str, key: str, *, comp: bool = True, pivot: bool = False, at: int = 0
) -> dict[str, Any]:
    return {"order_id": "o", "seq": seq, "service": service, "status": status, "compensable": comp, "pivot": pivot,
            "forward_key": key, "compensated_at": T + dt.timedelta(seconds=at)}  # fmt: skip


def _fwd(kind: str, key: str) -> dict[str, Any]:
    return {"kind": kind, "key": key, "order_id": "o"}


def _undo(kind: str, key: str, target: str) -> dict[str, Any]:
    return {"kind": kind, "key": key, "compensates": target, "order_id": "o"}


SAGA = [{"tenant_id": "default", "order_id": "o", "status": "COMPENSATED"}]


def test_an_honest_compensated_saga_passes() -> None:
    """Reserve and charge, then refund and release in reverse order: no problem."""
    steps = [_step(2, "inventory", "COMPENSATED", "r", at=2), _step(3, "payment", "COMPENSATED", "c", at=1)]
    ledgers = {"inventory": {"entries": [_fwd("reserve", "r"), _undo("release", "x", "r")]},
               "payment": {"entries": [_fwd("charge", "c"), _undo("refund", "y", "c")]}}  # fmt: skip
    assert check_sagas(SAGA, steps, ledgers) == []


def test_each_violation_is_reported() -> None:
    """Two charges in effect, a compensation in forward order, a compensated pivot, a refund of nothing
    and a charge after its cancellation are each reported."""
    steps = [_step(2, "inventory", "COMPENSATED", "r", at=1), _step(3, "payment", "COMPENSATED", "c", at=2),
             _step(4, "shipping", "COMPENSATED", "s", comp=False, pivot=True, at=3)]  # fmt: skip
    ledgers = {
        "inventory": {"entries": [_fwd("reserve", "r"), _undo("release", "x", "r")]},
        "payment": {"entries": [_fwd("charge", "c"), _fwd("charge", "c2"), _undo("refund", "y", "nothing")]},
        "shipping": {"entries": [_undo("void", "v", "s"), _fwd("ship", "s")]},
    }
    problems = "\n".join(check_sagas(SAGA, steps, ledgers))
    assert "2 effects in effect" in problems
    assert "not in reverse order" in problems
    assert "after the pivot was compensated" in problems
    assert "refund" in problems and "without its forward call" in problems
    assert "recorded after its cancellation" in problems
    assert "key the saga never recorded" in problems
    assert "compensated saga left charge standing" in problems


def test_a_recorded_result_that_is_not_the_ledgers_first_answer_is_reported() -> None:
    """A completed step whose recorded result names another charge than the ledger's entry for its key (a
    repeated call answered anew) is reported; the first answer recorded passes."""
    saga = [{"tenant_id": "default", "order_id": "o", "status": "COMPLETED"}]
    ledgers = {"payment": {"entries": [{**_fwd("charge", "c"), "ref": "charges-1"}]}}
    first = {**_step(3, "payment", "COMPLETED", "c"), "result": {"charge_id": "charges-1"}}
    other = {**first, "result": {"charge_id": "charges-2"}}
    assert check_sagas(saga, [first], ledgers) == []
    assert any("the ledger holds charges-1" in p for p in check_sagas(saga, [other], ledgers))
