"""The webhook sink as a real process and in-process: verifies, records, deduplicates, injects faults."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx
import pytest

from nexus.delivery.signing import delivery_headers, generate_secret, parse_secret
from nexus_lab.sink import Faults, decide_fault, start_sink
from tests.conftest import NexusProcess, free_port, wait_http

SECRET = generate_secret()
FIELDS = {"ts", "idempotency_key", "order_id", "event_type", "position", "attempt", "status",
          "signature_valid", "duplicate", "out_of_order", "body"}  # fmt: skip


def _request(key: str, position: int, attempt: int, secret: str = SECRET) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"notification_id": key, "position": position}).encode()
    headers = delivery_headers(
        key=parse_secret(secret), outbox_id=key, order_id="o-1", event_type="OrderCreated", position=position,
        attempt=attempt, timestamp=int(time.time()), body=body, traceparent=None,
    )  # fmt: skip
    return body, headers


async def _post(client: httpx.AsyncClient, url: str, key: str, position: int, attempt: int, **kw: str) -> int:
    body, headers = _request(key, position, attempt, **kw)
    return (await client.post(url, content=body, headers=headers)).status_code


@pytest.mark.processes
async def test_sink_process_verifies_records_and_flags_duplicates_and_disorder(tmp_path: Path) -> None:
    """`nexus sink` fails first attempts as asked, refuses bad signatures, flags duplicate keys and
    positions accepted after a higher one, counts it all in /stats and logs one JSON line per request."""
    port, log = free_port(), tmp_path / "sink.jsonl"
    args = ["sink", "--port", str(port), "--log", str(log), "--secret", SECRET, "--fail-first", "1",
            "--fail-status", "503", "--retry-after", "2"]  # fmt: skip
    proc = NexusProcess(args, {"PATH": "/usr/bin:/bin"}, tmp_path / "sink.out").start()
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", proc=proc)
        k1, k2 = str(uuid.uuid4()), str(uuid.uuid4())
        async with httpx.AsyncClient() as client:
            body, headers = _request(k2, 2, 1)
            first = await client.post(base + "/hook", content=body, headers=headers)
            assert first.status_code == 503 and first.headers["retry-after"] == "2"
            assert await _post(client, base + "/hook", k2, 2, 2) == 200
            assert await _post(client, base + "/hook", k1, 1, 2) == 200  # position 1 after 2: out of order
            assert await _post(client, base + "/hook", k1, 1, 3) == 200  # the same key again: duplicate
            assert await _post(client, base + "/hook", k1, 1, 4, secret=generate_secret()) == 401
            stats = (await client.get(base + "/stats")).json()
    finally:
        proc.terminate()
    assert stats == {"received": 5, "accepted": 3, "duplicates": 1, "order_violations": 2,
                     "invalid_signatures": 1, "concurrent": 0, "hung": 0,
                     "by_status": {"503": 1, "200": 3, "401": 1}}  # fmt: skip
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 5 and all(set(line) >= FIELDS for line in lines)
    assert [line["status"] for line in lines] == [503, 200, 200, 200, 401]
    assert [line["duplicate"] for line in lines] == [False, False, False, True, False]
    assert lines[0]["fault"] == "fail_first" and lines[4]["signature_valid"] is False
    assert lines[1]["body"] == {"notification_id": k2, "position": 2}


async def test_hanging_sink_never_answers_until_closed() -> None:
    """With --hang-rate 1 a request gets no answer (the client times out) and is recorded as hung."""
    sink = await start_sink(Faults(hang_rate=1.0))
    try:
        async with httpx.AsyncClient(timeout=0.3) as client:
            with pytest.raises(httpx.TimeoutException):
                await _post(client, sink.url + "/hook", str(uuid.uuid4()), 1, 1)
        assert sink.sink.stats()["hung"] == 1 and sink.sink.records[0]["status"] is None
    finally:
        await sink.aclose()


def test_fault_decisions_are_reproducible_from_the_seed() -> None:
    """The same seed gives the same faults for the same (key, attempt); rates come out as asked."""
    faults = Faults(seed=7, fail_rate=0.3, hang_rate=0.1, fail_status=(500, 503, 408, 429, 400))
    keys = [str(uuid.UUID(int=i)) for i in range(4000)]
    first = [decide_fault(faults, k, 1, "OrderCreated") for k in keys]
    assert first == [decide_fault(faults, k, 1, "OrderCreated") for k in keys]
    assert first != [decide_fault(Faults(seed=8, fail_rate=0.3, hang_rate=0.1), k, 1, "X") for k in keys]
    hung = sum(1 for fault, _ in first if fault == "hang") / len(keys)
    failed = sum(1 for fault, _ in first if fault == "status") / len(keys)
    assert 0.08 < hung < 0.12 and 0.24 < failed < 0.30  # 0.3 of the 90 % not hung
    assert {s for f, s in first if f == "status"} == {500, 503, 408, 429, 400}
    only = Faults(fail_rate=1.0, event_types=frozenset({"OrderShipped"}))
    assert decide_fault(only, keys[0], 1, "OrderCreated") == (None, 200)
    assert decide_fault(only, keys[0], 1, "OrderShipped")[0] == "status"
