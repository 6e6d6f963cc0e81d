"""The client SDK (`nexus_client`) against a real `nexus serve` and PostgreSQL: submit, read, wait, errors."""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from nexus_client import (
    ApiError,
    AsyncNexusClient,
    ClientConfig,
    GatewayUnreachable,
    NexusClient,
    NotFound,
    WaitTimeout,
)
from nexus_client.config import DEFAULT_GATEWAY_URL
from nexus_wire.codes import Decision
from tests.conftest import api_headers, free_port
from tests.factories import step

pytestmark = pytest.mark.slow


def config_for(base: str, **overrides: Any) -> ClientConfig:
    """The SDK's configuration for the test gateway, with the key the tests' API headers carry."""
    headers = {k.lower(): v for k, v in api_headers().items()}
    key = headers.get("authorization", "").removeprefix("Bearer ") or None
    return ClientConfig(gateway_url=base, api_key=key, **overrides)


@pytest.fixture
def base(start_gateway: Any) -> str:
    _, url = start_gateway("--no-dispatcher")
    return str(url)


def test_sync_client_submits_reads_and_waits(base: str) -> None:
    """One step, then a batch, are decided; the order and its plan read back typed; wait sees last_seq move."""
    with NexusClient(config_for(base)) as client:
        first = client.submit(step("sdk-o1", "sdk-p1", 1))
        assert first.http_status == 200
        assert first.first.decision is Decision.APPLY
        assert first.first.order is not None and first.first.order.last_seq == 1
        batch = client.submit([step("sdk-o1", "sdk-p1", 3), step("sdk-o1", "sdk-p1", 2)])
        assert [r.decision for r in batch.results] == [Decision.BUFFER, Decision.APPLY]
        order = client.order("sdk-o1")
        assert (order.order_id, order.plan_id, order.status, order.last_seq) == (
            "sdk-o1",
            "sdk-p1",
            "payment_processed",
            3,
        )
        plan = client.plan("sdk-p1")
        assert plan.plan_id == "sdk-p1" and not plan.terminal
        assert [o.order_id for o in plan.orders] == ["sdk-o1"]
        assert client.wait("sdk-o1", after_seq=2, timeout=5).last_seq == 3


async def test_async_wait_returns_once_the_order_moves(base: str) -> None:
    """`wait(after_status=...)` returns the order once another client's step changed its status."""
    async with AsyncNexusClient(config_for(base)) as client:
        await client.submit(step("sdk-o2", "sdk-p2", 1))
        waiter = asyncio.create_task(client.wait("sdk-o2", after_status="created", timeout=10))
        await asyncio.sleep(0.3)
        assert not waiter.done()  # nothing changed yet: it is polling
        await client.submit(step("sdk-o2", "sdk-p2", 2))
        order = await waiter
        assert (order.status, order.last_seq) == ("inventory_validated", 2)


async def test_wait_times_out_with_a_typed_error(base: str) -> None:
    """An order that does not change within the timeout raises WaitTimeout (after polling, not at once)."""
    async with AsyncNexusClient(config_for(base)) as client:
        await client.submit(step("sdk-o3", "sdk-p3", 1))
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(WaitTimeout):
            await client.wait("sdk-o3", after_seq=1, timeout=0.5)
        assert loop.time() - started >= 0.5


def test_errors_carry_the_api_code_and_message(base: str) -> None:
    """A missing order is NotFound with the API's code; an invalid envelope is a recorded decision, not raised."""
    with NexusClient(config_for(base)) as client:
        with pytest.raises(NotFound) as missing:
            client.order("sdk-nobody")
        assert (missing.value.status, missing.value.code) == (404, "NOT_FOUND")
        assert "not found" in missing.value.message and "sdk-nobody" not in missing.value.message  # no echo
        invalid = client.submit_raw(b'{"event_type": "OrderCreated"}')
        assert invalid.http_status >= 400
        assert invalid.first.decision is Decision.DEAD_LETTER and invalid.first.code == "INVALID_EVENT"


def test_unreachable_gateway_is_retried_then_typed() -> None:
    """Nothing listening: the submission is retried on the config's schedule, then GatewayUnreachable."""
    from nexus_wire.backoff import Jitter, RetryPolicy

    retry = RetryPolicy(base_ms=10, max_ms=10, max_attempts=3, jitter=Jitter.NONE)
    with (
        NexusClient(ClientConfig(gateway_url=f"http://127.0.0.1:{free_port()}", retry=retry)) as client,
        pytest.raises(GatewayUnreachable),
    ):
        client.submit(step("sdk-o4", "sdk-p4", 1))


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        _Recorder.seen.append({k.lower(): v for k, v in self.headers.items()})
        body = b'{"code": "NOT_FOUND", "message": "nothing here", "request_id": "r-1"}'
        self.send_response(404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[str]:
    """A real HTTP server that records request headers and answers a 404 error body."""
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_key_from_the_environment_is_sent_as_bearer(recorder: str) -> None:
    """NEXUS_API_KEY and NEXUS_GATEWAY_URL, read by ClientConfig.from_env, give the URL and the Bearer header."""
    config = ClientConfig.from_env({"NEXUS_API_KEY": "k-123", "NEXUS_GATEWAY_URL": recorder})
    with NexusClient(config) as client, pytest.raises(ApiError) as err:
        client.order("o")
    assert _Recorder.seen[0]["authorization"] == "Bearer k-123"
    assert err.value.request_id == "r-1"


def test_no_key_no_authorization_header(recorder: str) -> None:
    """Without NEXUS_API_KEY no Authorization header is sent; without NEXUS_GATEWAY_URL the default URL holds."""
    assert ClientConfig.from_env({}).gateway_url == DEFAULT_GATEWAY_URL
    with NexusClient(ClientConfig.from_env({"NEXUS_GATEWAY_URL": recorder})) as client, pytest.raises(NotFound):
        client.order("o")
    assert "authorization" not in _Recorder.seen[0]


def reviewed(order: str, seq: int, amount: int = 1500) -> Any:
    """A step of an `order_reviewed` order above 1000.00 (its payment is HELD)."""
    if seq == 1:
        items = [{"product_id": "p", "quantity": 1, "unit_price": amount}]
        return step(order, "sdk-rv", 1, process="order_reviewed", data={"items": items, "total_amount": amount,
                                                                          "currency": "USD"})  # fmt: skip
    if seq == 3:
        return step(order, "sdk-rv", 3, data={"payment_id": "pay", "amount": amount, "currency": "USD"})
    return step(order, "sdk-rv", seq)


async def test_async_client_lists_and_answers_approvals(base: str) -> None:
    """A held payment is listed by `approvals()`; `answer_approval` approves it (APPLY, the waiting
    successor drains) or denies it (REJECTED APPROVAL_DENIED); answering twice is an ApiError 409."""
    async with AsyncNexusClient(config_for(base)) as client:
        held = {}
        for order in ("sdk-a1", "sdk-a2"):
            answers = [await client.submit(reviewed(order, s)) for s in (1, 2, 3, 4)]
            assert [(a.http_status, a.first.decision) for a in answers[2:]] == [
                (202, Decision.HELD), (200, Decision.BUFFER)
            ]  # fmt: skip
            held[order] = answers[2].first.approval_id
        listed = {a.approval_id: a for a in await client.approvals()}
        assert set(held.values()) <= set(listed) and listed[held["sdk-a1"]].order_id == "sdk-a1"
        approved = await client.answer_approval(held["sdk-a1"], approve=True)
        assert (approved.status, approved.result.decision) == ("approved", Decision.APPLY)
        assert (await client.order("sdk-a1")).last_seq == 4
        denied = await client.answer_approval(held["sdk-a2"], approve=False)
        assert (denied.status, denied.result.decision, denied.result.code) == (
            "denied", Decision.REJECTED, "APPROVAL_DENIED"
        )  # fmt: skip
        assert (await client.order("sdk-a2")).last_seq == 2
        with pytest.raises(ApiError) as again:
            await client.answer_approval(held["sdk-a2"], approve=True)
        assert again.value.status == 409


def test_sync_client_answers_an_approval(base: str) -> None:
    """The sync client lists and approves a held payment the same way."""
    with NexusClient(config_for(base)) as client:
        for s in (1, 2, 3):
            answer = client.submit(reviewed("sdk-a3", s))
        approval_id = answer.first.approval_id
        assert approval_id in {a.approval_id for a in client.approvals()}
        assert client.answer_approval(approval_id, approve=True).result.decision is Decision.APPLY
        assert client.order("sdk-a3").status == "payment_processed"
