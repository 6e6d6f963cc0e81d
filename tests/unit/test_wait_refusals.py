"""A wait over its key's or tenant's share is answered 429 TOO_MANY_WAITS right behind the key check, byte for
byte as the route answers it, without reaching the app behind (no processing slot, routing or database);
every other request, and every wait the route must judge itself, goes on to the app."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from nexus.auth.keys import hash_key
from nexus.auth.roles import Principal, Role
from nexus.error_shape import reset_request_id, use_request_id
from nexus.errors import ErrorCode
from nexus.ingress.http_errors import error_response
from nexus.ingress.wait_refusals import PrebuiltRefusal, WaitRefusals
from nexus.lifecycle.waiting import CLIENT, WaitingClient, WaitSlots

ACME_1 = Principal(1, "acme", frozenset({Role.AGENT}))
ACME_2 = Principal(2, "acme", frozenset({Role.AGENT}))
GLOBEX = Principal(3, "globex", frozenset({Role.AGENT}))


class _Behind:
    """The app behind the middleware: answers 204 and counts the requests that reached it."""

    def __init__(self) -> None:
        self.reached = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.reached += 1
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def _client(slots: WaitSlots, behind: _Behind, principal: Principal) -> httpx.AsyncClient:
    refusals = WaitRefusals(behind, slots)

    async def authenticated(scope: Any, receive: Any, send: Any) -> None:  # as AuthMiddleware leaves the scope
        scope.setdefault("state", {})["principal"] = principal
        await refusals(scope, receive, send)

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=authenticated), base_url="http://gateway")


async def test_the_prebuilt_refusal_is_the_routes_answer_byte_for_byte() -> None:
    """The early 429's status, headers (order included) and body are those the framework's handler renders
    for TooManyWaitsError, with the request's own id."""
    message = WaitSlots(16, 64).refusal_messages()[0]
    token = use_request_id("rid-1")
    try:
        framework = error_response(429, ErrorCode.TOO_MANY_WAITS, message, retryable=False)
    finally:
        reset_request_id(token)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "headers": [(b"x-request-id", b"rid-1")], "state": {}}
    await PrebuiltRefusal(429, ErrorCode.TOO_MANY_WAITS, message).send(scope, send)
    assert sent[0]["status"] == framework.status_code == 429
    assert sent[0]["headers"] == [*framework.raw_headers, (b"x-request-id", b"rid-1")]
    assert sent[1]["body"] == framework.body
    assert b'"code":"TOO_MANY_WAITS"' in framework.body and b'"request_id":"rid-1"' in framework.body


@pytest.mark.parametrize("target", ["/v1/orders/o-1?wait=60&after_seq=5", "/v1/orders/o-1/stream?after=3"])
async def test_a_wait_past_its_keys_cap_never_reaches_the_app(target: str) -> None:
    """With the key holding all its waits, a long poll or stream is 429 TOO_MANY_WAITS with Retry-After and
    the one error shape, and the app behind (routing, slot, database) is not reached."""
    slots, behind = WaitSlots(2, 64), _Behind()
    slots.take(ACME_1.key_id)
    slots.take(ACME_1.key_id)
    async with _client(slots, behind, ACME_1) as api:
        refused = await api.get(target, headers={"X-Request-ID": "abc"})
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert refused.json() == {
        "code": "TOO_MANY_WAITS",
        "message": "this key already holds 2 open streams and long polls",
        "request_id": "abc",
        "retryable": False,
    }
    assert refused.headers["x-request-id"] == "abc" and behind.reached == 0
    assert slots.held(ACME_1.key_id) == 2


async def test_a_tenants_waits_past_its_share_are_refused_for_every_key_of_it() -> None:
    """Another key of a tenant whose waits are all held is refused early; another tenant's wait goes on."""
    slots, behind = WaitSlots(16, 1), _Behind()
    token = CLIENT.set(WaitingClient(tenant="acme"))  # as a request of acme's key takes its wait
    try:
        slots.take(ACME_1.key_id)
    finally:
        CLIENT.reset(token)
    async with _client(slots, behind, ACME_2) as api:
        refused = await api.get("/v1/orders/o-1?wait=5")
    assert refused.status_code == 429
    assert refused.json()["message"] == "this tenant's keys already hold 1 open streams and long polls"
    async with _client(slots, behind, GLOBEX) as api:
        assert (await api.get("/v1/orders/o-1?wait=5")).status_code == 204
    assert behind.reached == 1


@pytest.mark.parametrize(
    "target",
    [
        "/v1/orders/o-1",  # not a wait
        "/v1/orders/o-1?wait=abc",  # the route's 422
        "/v1/orders/o-1?wait=1e3",  # a valid float, not plainly one: the route decides
        "/v1/orders/o-1?wait=90000",  # beyond the route's limit: its 422
        "/v1/orders/o-1?wait=5&after_seq=-1",
        "/v1/orders/o-1?wait=5&tenant=globex",  # the tenant's check comes first in the route
        "/v1/orders/o-1?wait=5&after_status=%00",  # the request guard's 422
        "/v1/orders/o%20x?wait=5",  # the route's INVALID_IDENTIFIER
        "/v1/orders/o-1/stream?after=x",
        "/v1/orders/o-1/history",
        "/v1/plans/p-1",
    ],
)
async def test_what_the_route_must_judge_goes_on_to_it(target: str) -> None:
    """A request that is not a plain wait reaches the app even with the key's waits all held, so the route's
    own answer (422, 403, 404, ...) is unchanged."""
    slots, behind = WaitSlots(1, 64), _Behind()
    slots.take(ACME_1.key_id)
    async with _client(slots, behind, ACME_1) as api:
        assert (await api.get(target)).status_code == 204
    assert behind.reached == 1


async def test_a_wait_within_its_share_goes_on_to_the_route() -> None:
    """A key with a wait left is not refused here: the route takes the slot."""
    slots, behind = WaitSlots(2, 64), _Behind()
    slots.take(ACME_1.key_id)
    async with _client(slots, behind, ACME_1) as api:
        assert (await api.get("/v1/orders/o-1?wait=60&after_seq=5")).status_code == 204
        assert (await api.post("/v1/orders/o-1?wait=60")).status_code == 204
    assert behind.reached == 2


def test_asking_takes_nothing() -> None:
    """`refusal` only reads: asked at the cap it names the cap, and a wait given back can be taken again."""
    slots = WaitSlots(1, 64)
    assert slots.refusal(5, "acme") is None
    slots.take(5)
    assert slots.refusal(5, "acme") == "this key already holds 1 open streams and long polls"
    assert slots.held(5) == 1
    slots.give_back(5)
    assert slots.refusal(5, "acme") is None


def _gateway_app(**overrides: Any) -> Any:
    """The whole app (`create_app`) over a database that cannot be reached, with one key of acme's known to
    the auth cache (as a key checked a moment ago is)."""
    from nexus.gateway import Gateway
    from nexus.ingress.http import create_app
    from nexus.settings import Settings
    from nexus.store.database import Database

    settings = Settings(database_url="postgresql://nexus@127.0.0.1:9/unreachable", **overrides)
    db = Database(settings)
    app = create_app(db, Gateway(db), settings=settings)
    app.state.keys._entries[hash_key(_KEY)] = (float("inf"), ACME_1)
    return app


_KEY = "nxk_wait-refusals-test-key"


async def test_refused_waits_take_no_processing_slot_and_no_database() -> None:
    """Through the whole app, with the database unreachable and every processing slot held by acme's other
    work, a wait over acme's share is still answered 429 TOO_MANY_WAITS (it used to queue for a slot)."""
    app = _gateway_app(processing_slots=1, max_waits_per_tenant=1)
    token = CLIENT.set(WaitingClient(tenant="acme"))
    try:
        app.state.wait_slots.take(ACME_2.key_id)  # acme's one wait, held by its other key
    finally:
        CLIENT.reset(token)
    held = await app.state.processing_slots.acquire("acme")  # acme's work holds the one slot
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway", timeout=5) as api:
        async with asyncio.timeout(5):  # generous: the old path waited for the slot forever
            refused = await api.get("/v1/orders/o-1?wait=60&after_seq=5", headers={"Authorization": f"Bearer {_KEY}"})
    held.release()
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    body = refused.json()
    assert (body["code"], body["retryable"]) == ("TOO_MANY_WAITS", False)
    assert body["request_id"] == refused.headers["x-request-id"]
