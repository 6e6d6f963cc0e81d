"""`GET /v1/orders/{id}` reads an order, its buffered steps and its saga in one statement per part: an order with
only buffered steps, one with both, and none at all."""

from __future__ import annotations

import httpx

from tests.factories import plan_json


async def test_an_order_known_only_by_its_buffered_steps(api: httpx.AsyncClient) -> None:
    """Steps waiting for an earlier one, before the order exists: no status, last_seq 0, the buffered seqs and
    the plan of the first of them."""
    _, s2, s3 = plan_json("o-early", "p-early", 3)
    for step in (s3, s2):
        assert (await api.post("/v1/events", json=step)).json()["results"][0]["decision"] == "BUFFER"
    order = (await api.get("/v1/orders/o-early")).json()
    assert order == {
        "order_id": "o-early",
        "plan_id": "p-early",
        "status": None,
        "last_seq": 0,
        "buffered": [2, 3],
        "notifications": 0,
        "tombstone": False,
    }


async def test_an_order_with_steps_applied_and_buffered(api: httpx.AsyncClient) -> None:
    """An applied step and a buffered one: the order's own columns beside the buffered seq."""
    s1, _, s3 = plan_json("o-both", "p-both", 3)
    await api.post("/v1/events", json=s1)
    await api.post("/v1/events", json=s3)
    order = (await api.get("/v1/orders/o-both")).json()
    assert (order["plan_id"], order["last_seq"], order["buffered"], order["notifications"]) == ("p-both", 1, [3], 1)
    assert order["status"] is not None and order["tombstone"] is False


async def test_nothing_known_is_not_found(api: httpx.AsyncClient) -> None:
    """No order and no buffered step: 404."""
    assert (await api.get("/v1/orders/o-none")).status_code == 404
