"""`nexus sink`: a real webhook receiver for tests and demos. Verifies, records, and injects faults.

It answers every ``POST`` (any path; the path tells subscriptions apart when several point at one
sink), checks the Standard Webhooks signature when given ``--secret``, and writes one JSON line per
request to ``--log``::

    {"ts": 1767225600.123,          unix time of the answer
     "started": 1767225600.101,     unix time the request arrived
     "path": "/hook",
     "idempotency_key": "<outbox id>", "order_id": "o-1", "event_type": "OrderCreated",
     "position": 1, "attempt": 1,   X-Outbox-Position, X-Delivery-Attempt
     "status": 200,                 what the sink answered; null when it hung (never answered)
     "fault": null,                 "status" | "hang" | "fail_first" | "bad_signature" | null
     "signature_valid": true,       null without --secret
     "duplicate": false,            this Idempotency-Key was already answered 2xx on this path
     "out_of_order": false,         a higher position of this order was already answered 2xx on this path
     "concurrent": false,           another request with this Idempotency-Key was in flight meanwhile
     "traceparent": "00-...", "user_agent": "...", "body": {...}}

``GET /stats`` returns the counts: received, accepted (2xx), duplicates, order_violations,
invalid_signatures, concurrent, hung, by_status. Duplicates are judged among accepted requests
only: a retry after a 500 is the same notification, not a duplicate.

Faults (``--fail-rate``, ``--fail-status``, ``--hang-rate``, ``--fail-first``, ``--latency-ms``,
``--retry-after``, restricted to ``--fault-event-type`` when given) are decided from a hash of
``--seed``, the Idempotency-Key and the attempt number, so the same run gets the same faults
whatever the timing. Hangs and failures are drawn independently (hang first).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import json
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import uvicorn
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nexus_lab.procs import serve_in_loop


@dataclasses.dataclass(frozen=True, slots=True)
class Faults:
    """What the sink does wrong, and to which notifications."""

    seed: int | str = 0
    fail_rate: float = 0.0
    fail_status: tuple[int, ...] = (500, 503)
    hang_rate: float = 0.0
    fail_first: int = 0
    latency_ms: float = 0.0
    retry_after: float | None = None
    event_types: frozenset[str] | None = None
    """Only notifications of these types get faults (None: all)."""


def draw(seed: int | str, key: str, attempt: int, purpose: str) -> float:
    """A reproducible uniform draw in [0, 1) for one attempt of one notification."""
    digest = hashlib.sha256(f"{seed}|{key}|{attempt}|{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def decide_fault(faults: Faults, key: str, attempt: int, event_type: str) -> tuple[str | None, int | None]:
    """(fault name, status to answer); status None means hang. (None, 200) when all is well."""
    if faults.event_types is not None and event_type not in faults.event_types:
        return None, 200
    statuses = faults.fail_status or (500,)
    pick = statuses[int(draw(faults.seed, key, attempt, "status") * len(statuses))]
    if attempt <= faults.fail_first:
        return "fail_first", pick
    if draw(faults.seed, key, attempt, "hang") < faults.hang_rate:
        return "hang", None
    if draw(faults.seed, key, attempt, "fail") < faults.fail_rate:
        return "status", pick
    return None, 200


class Sink:
    """The receiver's state and its ASGI app. Mutate `faults` to change behaviour mid-test."""

    def __init__(
        self,
        faults: Faults | None = None,
        secret: str | None = None,
        log_path: Path | None = None,
        *,
        keep_records: bool = True,
    ) -> None:
        self.faults = faults or Faults()
        self.webhook = Webhook(secret) if secret else None
        self.keep_records = keep_records
        self.records: list[dict[str, Any]] = []
        self.counts: Counter[str] = Counter()
        self.by_status: Counter[str] = Counter()
        self._accepted: set[tuple[str, str]] = set()
        self._max_position: dict[tuple[str, str], int] = {}
        self._inflight: defaultdict[tuple[str, str], int] = defaultdict(int)
        self._closing = asyncio.Event()
        self._log: IO[str] | None = log_path.open("a", encoding="utf-8", buffering=1) if log_path else None
        self.app = Starlette(
            routes=[
                Route("/stats", self._stats, methods=["GET"]),
                Route("/healthz", self._health, methods=["GET"]),
                Route("/{path:path}", self._receive, methods=["POST"]),
            ]
        )

    def stats(self) -> dict[str, Any]:
        keys = ("received", "accepted", "duplicates", "order_violations", "invalid_signatures", "concurrent", "hung")
        return {**{k: self.counts[k] for k in keys}, "by_status": dict(self.by_status)}

    def in_flight(self) -> set[str]:
        """Idempotency-Keys of requests received and not answered yet."""
        return {key for (_, key), n in self._inflight.items() if n > 0}

    def close(self) -> None:
        """Release hanging requests and close the log."""
        self._closing.set()
        if self._log is not None:
            self._log.close()
            self._log = None

    async def _stats(self, _: Request) -> JSONResponse:
        return JSONResponse(self.stats())

    async def _health(self, _: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def _receive(self, request: Request) -> Response:
        started = time.time()
        body = await request.body()
        h = request.headers
        path = request.url.path
        key = h.get("idempotency-key", "")
        order_id = h.get("x-aggregate-id", "")
        event_type = h.get("x-event-type", "")
        position = _int(h.get("x-outbox-position"))
        attempt = _int(h.get("x-delivery-attempt")) or 1
        self.counts["received"] += 1
        valid = self._verify(body, dict(h))
        concurrent = self._inflight[(path, key)] > 0
        self._inflight[(path, key)] += 1
        seen = _Seen(started, path, key, order_id, event_type, position, attempt, valid, concurrent, h, body)
        try:
            fault, status = decide_fault(self.faults, key, attempt, event_type)
            if valid is False:
                fault, status = "bad_signature", 401
            if self.faults.latency_ms > 0:
                await asyncio.sleep(self.faults.latency_ms / 1000.0)
            if status is None:
                self.counts["hung"] += 1
                self._record(seen, None, fault)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(3600):
                        await self._closing.wait()
                return Response(status_code=503)
        finally:
            self._inflight[(path, key)] -= 1
        duplicate = out_of_order = False
        if 200 <= status < 300:
            self.counts["accepted"] += 1
            duplicate = (path, key) in self._accepted
            self._accepted.add((path, key))
            top = self._max_position.get((path, order_id), 0)
            out_of_order = position is not None and top > position
            if position is not None:
                self._max_position[(path, order_id)] = max(top, position)
        self._record(seen, status, fault, duplicate=duplicate, out_of_order=out_of_order)
        headers = {}
        if self.faults.retry_after is not None and status in (429, 503):
            headers["retry-after"] = f"{self.faults.retry_after:g}"
        return Response(status_code=status, headers=headers)

    def _verify(self, body: bytes, headers: dict[str, str]) -> bool | None:
        if self.webhook is None:
            return None
        try:
            self.webhook.verify(body, headers, json_parse=False)
        except (WebhookVerificationError, ValueError):
            self.counts["invalid_signatures"] += 1
            return False
        return True

    def _record(
        self, seen: _Seen, status: int | None, fault: str | None, *, duplicate: bool = False, out_of_order: bool = False
    ) -> None:
        self.by_status[str(status) if status is not None else "hang"] += 1
        self.counts["duplicates"] += duplicate
        self.counts["order_violations"] += out_of_order
        self.counts["concurrent"] += seen.concurrent
        try:
            parsed: Any = json.loads(seen.body)
        except ValueError:
            parsed = seen.body.decode("utf-8", "replace")
        record = {
            "ts": time.time(),
            "started": seen.started,
            "path": seen.path,
            "idempotency_key": seen.key,
            "order_id": seen.order_id,
            "event_type": seen.event_type,
            "position": seen.position,
            "attempt": seen.attempt,
            "status": status,
            "fault": fault,
            "signature_valid": seen.valid,
            "duplicate": duplicate,
            "out_of_order": out_of_order,
            "concurrent": seen.concurrent,
            "traceparent": seen.headers.get("traceparent"),
            "user_agent": seen.headers.get("user-agent"),
            "body": parsed,
        }
        if self.keep_records:
            self.records.append(record)
        if self._log is not None:
            self._log.write(json.dumps(record, separators=(",", ":")) + "\n")


@dataclasses.dataclass(frozen=True, slots=True)
class _Seen:
    """What the sink read off one request, before deciding how to answer it."""

    started: float
    path: str
    key: str
    order_id: str
    event_type: str
    position: int | None
    attempt: int
    valid: bool | None
    concurrent: bool
    headers: Mapping[str, str]
    body: bytes


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


@dataclasses.dataclass
class RunningSink:
    """A sink served by uvicorn in the current event loop (for tests and benchmarks)."""

    sink: Sink
    server: uvicorn.Server
    task: asyncio.Task[None]
    url: str

    async def aclose(self) -> None:
        self.sink.close()
        self.server.should_exit = True
        await self.task


async def start_sink(
    faults: Faults | None = None,
    *,
    secret: str | None = None,
    log_path: Path | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
) -> RunningSink:
    """Start a sink on `host:port` (0: any free port) in this event loop; `url` is its base URL."""
    sink = Sink(faults, secret, log_path)
    server, task, bound_port = await serve_in_loop(sink.app, host, port)
    return RunningSink(sink, server, task, f"http://{host}:{bound_port}")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--log", type=Path, default=None, help="append one JSON line per request here")
    parser.add_argument("--secret", default=None, help="whsec_... to verify signatures (401 when invalid)")
    parser.add_argument("--seed", default="0", help="seed of the fault decisions (any string, like the agent's)")
    parser.add_argument("--fail-rate", type=float, default=0.0, help="share of attempts answered with a failure")
    parser.add_argument(
        "--fail-status",
        action="append",
        default=None,
        help="status codes of failures, repeatable or comma list (default 500,503)",
    )
    parser.add_argument("--hang-rate", type=float, default=0.0, help="share of attempts never answered")
    parser.add_argument("--fail-first", type=int, default=0, help="fail the first N attempts of each notification")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every answer")
    parser.add_argument("--retry-after", type=float, default=None, help="Retry-After seconds on 429/503")
    parser.add_argument("--fault-event-type", action="append", default=None, help="faults only for these types")


_READ_APART = ("fail_status", "event_types")


def faults_from(args: argparse.Namespace) -> Faults:
    """The faults the flags ask for: each field from the flag of its name, but the status list and the types."""
    statuses = tuple(int(s) for item in (args.fail_status or ["500,503"]) for s in item.split(",") if s.strip())
    event_types = frozenset(args.fault_event_type) if args.fault_event_type else None
    named = {f.name: getattr(args, f.name) for f in dataclasses.fields(Faults) if f.name not in _READ_APART}
    return Faults(**named, fail_status=statuses, event_types=event_types)


def run(args: argparse.Namespace) -> int:
    sink = Sink(faults_from(args), args.secret, args.log, keep_records=False)
    print(f"sink listening on http://{args.host}:{args.port}", flush=True)
    try:
        uvicorn.run(
            sink.app,
            host=args.host,
            port=args.port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
            http="httptools",
            loop="uvloop",
        )
    finally:
        sink.close()
    return 0
