"""The planner's model client against the fake model served over real HTTP (uvicorn in a thread): retries
of 429 (Retry-After) and 500 storms and timeouts within the budget, streaming, the JSON-mode fallback, and
no secret in what the server receives."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from nexus.processes import builtin_catalog, describe
from nexus_lab.llm import tools
from nexus_lab.llm.client import BudgetExhausted, LlmClient, ModelUnavailable, SwitchedToJsonMode
from nexus_lab.llm.fake import FakeModel, Faults, create_app
from nexus_lab.llm.settings import LlmSettings
from nexus_lab.procs import free_port

PROCESS: dict[str, Any] = describe(builtin_catalog().get("order"))  # type: ignore[arg-type]
ORDER = {"order_id": "o-1", "items": [{"product_id": "p", "quantity": 1, "unit_price": "5"}], "total_amount": "5"}
SECRET = "sk-test-do-not-leak-0123456789"  # noqa: S105 - a test value that must never leak


class FakeServer:
    """`nexus fake-llm`'s app on a free port, in a thread."""

    def __init__(self, model: FakeModel) -> None:
        self.model = model
        self.port = free_port()
        config = uvicorn.Config(create_app(model), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the fake model did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    servers: list[FakeServer] = []

    def start(faults: Faults, script: tuple[str, ...] = ("correct",)) -> FakeServer:
        server = FakeServer(FakeModel(list(script), faults, tmp_path / "requests.jsonl")).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__()


def settings(url: str, **changes: Any) -> LlmSettings:
    base = LlmSettings(base_url=url, model="fake", api_key=SECRET, retry_base_ms=1, retry_max_ms=20, timeout_s=5)
    return base.replace(**changes)


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": tools.system_prompt(PROCESS, json_mode=False)},
        {"role": "user", "content": tools.first_user_message(ORDER, tools.state_of(None, 0, PROCESS))},
    ]


async def test_429_and_500_storms_are_retried_within_the_budget(serve: Any, tmp_path: Path) -> None:
    """Four 429s (Retry-After: 0) then four 500s, and the fifth... ninth request answers: one answer, nine
    requests counted, four rate-limited, four server errors, eight retries; the key never reaches the log."""
    server = serve(Faults(storms=((429, 4), (500, 4)), retry_after_s=0))
    client = LlmClient(settings(server.url, max_requests_per_run=9, retry_attempts=9))
    try:
        answer = await client.ask(conversation(), tools.tools_for(PROCESS, None))
    finally:
        await client.aclose()
    assert answer.message["tool_calls"][0]["function"]["name"] == "OrderCreated" and answer.attempts == 9
    b = client.budget
    assert (b.requests, b.rate_limited, b.server_errors, b.retries) == (9, 4, 4, 8)
    assert b.tokens == answer.tokens > 0
    log = (tmp_path / "requests.jsonl").read_text()
    assert SECRET not in log and '"authorization"' in log


async def test_a_storm_longer_than_the_budget_stops_with_budget_exhausted(serve: Any) -> None:
    """A request budget of 3 against a 429 storm of 10: BudgetExhausted after exactly 3 requests."""
    server = serve(Faults(storms=((429, 10),), retry_after_s=0))
    client = LlmClient(settings(server.url, max_requests_per_run=3))
    try:
        with pytest.raises(BudgetExhausted):
            await client.ask(conversation(), tools.tools_for(PROCESS, None))
    finally:
        await client.aclose()
    assert client.budget.requests == 3 == server.model.requests


async def test_retries_end_with_model_unavailable(serve: Any) -> None:
    """With 3 attempts allowed, a 500 storm of 5 ends in ModelUnavailable after 3 requests."""
    server = serve(Faults(storms=((500, 5),)))
    client = LlmClient(settings(server.url, retry_attempts=3))
    try:
        with pytest.raises(ModelUnavailable, match="3 attempts"):
            await client.ask(conversation(), tools.tools_for(PROCESS, None))
    finally:
        await client.aclose()
    assert server.model.requests == 3


async def test_a_timeout_is_retried(serve: Any) -> None:
    """The second request hangs past the client's timeout: it is counted as a timeout and retried."""
    server = serve(Faults(hang_every=2, hang_s=1.2))
    client = LlmClient(settings(server.url, timeout_s=0.3))
    try:
        await client.ask(conversation(), tools.tools_for(PROCESS, None))
        answer = await client.ask(conversation(), tools.tools_for(PROCESS, None))
    finally:
        await client.aclose()
    assert answer.attempts == 2 and client.budget.timeouts == 1 and client.budget.requests == 3


async def test_streaming_gives_the_same_answer_and_usage(serve: Any) -> None:
    """Streamed SSE chunks (tool-call arguments split, usage chunk) accumulate into the non-streamed message."""
    server = serve(Faults(), ("step_after_completion",))
    shipped = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": tools.first_user_message(ORDER, tools.state_of("shipped", 4, PROCESS))},
    ]
    plain, streamed = LlmClient(settings(server.url)), LlmClient(settings(server.url, stream=True))
    try:
        a = await plain.ask(shipped, tools.tools_for(PROCESS, "shipped"))
        b = await streamed.ask(shipped, tools.tools_for(PROCESS, "shipped"))
    finally:
        await plain.aclose()
        await streamed.aclose()

    def calls(message: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]

    assert calls(a.message) == calls(b.message) and [n for n, _ in calls(b.message)] == [
        "OrderCompleted",
        "OrderShipped",
    ]
    assert (a.prompt_tokens, a.completion_tokens) == (b.prompt_tokens, b.completion_tokens) != (0, 0)


async def test_a_server_without_tools_switches_the_run_to_json_mode(serve: Any, tmp_path: Path) -> None:
    """A 400 to a request with tools switches to JSON mode (auto); the next request carries no tools but
    response_format json_object, and its answer reads as a proposal. In `tools` mode the 400 is final."""
    server = serve(Faults(no_tools=True))
    client = LlmClient(settings(server.url))
    strict = LlmClient(settings(server.url, tool_mode="tools"))
    try:
        with pytest.raises(SwitchedToJsonMode):
            await client.ask(conversation(), tools.tools_for(PROCESS, None))
        assert client.json_mode
        answer = await client.ask(conversation(), [])
        with pytest.raises(ModelUnavailable, match="refused"):
            await strict.ask(conversation(), tools.tools_for(PROCESS, None))
    finally:
        await client.aclose()
        await strict.aclose()
    [proposal] = tools.read_answer(answer.message, answer.json_mode)
    assert isinstance(proposal, tools.Proposal) and proposal.step == "OrderCreated"
    second = json.loads((tmp_path / "requests.jsonl").read_text().splitlines()[1])["body"]
    assert "tools" not in second and second["response_format"] == {"type": "json_object"}


async def test_a_secret_inside_the_messages_is_redacted_before_sending(serve: Any, tmp_path: Path) -> None:
    """Even if data carried the API key, the request the server receives does not."""
    server = serve(Faults())
    client = LlmClient(settings(server.url))
    leaky = conversation()
    leaky[1] = {"role": "user", "content": leaky[1]["content"] + f" {SECRET}"}
    try:
        await client.ask(leaky, tools.tools_for(PROCESS, None))
    finally:
        await client.aclose()
    log = (tmp_path / "requests.jsonl").read_text()
    assert SECRET not in log and "[redacted]" in log
