"""`nexus services`: the inventory, payment, shipping and invoice services the gateway's sagas call.

Real HTTP servers (one process, one path prefix per service) for tests and demos, each with a ledger an
outside checker can read (`GET /<service>/ledger`, or every ledger at `GET /ledgers`):

    POST /inventory/reservations   {order_id, quantity?}  -> {reservation_id}   compensation: /inventory/releases
    POST /payment/charges          {order_id, amount}     -> {charge_id}        compensation: /payment/refunds
    POST /shipping/shipments       {order_id}             -> {shipment_id}      (the pivot: no compensation)
    POST /invoice/invoices         {order_id, amount?}    -> {invoice_id}       (retriable)

Every call carries an `Idempotency-Key`; a replay of a key returns the first answer and changes nothing.
A compensation (release, refund) names the forward call it undoes by that call's key in the header
`Compensates` (or the body field `compensates`). It may arrive before its forward call, or without one
ever arriving: the forward key is then marked cancelled and a forward call arriving afterwards is refused
(409 `cancelled`), so a call whose outcome was unknown (a timeout) is settled by its compensation without
guessing. A compensation of a recorded forward call writes the reversing ledger entry once.

Faults are reproducible from `--seed`: `--fail-rate` answers 503 (transient; nothing recorded, a retry may
pass), `--permanent-fail-rate` refuses the key for good (422, recorded as the key's answer),
`--latency-ms` delays every answer, `--hang-rate` records the effect and answers only after `--hang-ms`
(the client has timed out: its outcome is unknown). `POST /_faults` changes them at run time, per service
(`{"service": "payment", "permanent_fail_rate": 1}`, `"down": true` answers 503 to everything).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import itertools
import random
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nexus_lab.procs import serve_in_loop

# service -> forward path -> (kind, id field); compensation path -> (kind of the reversing entry)
FORWARD: dict[str, tuple[str, str, str]] = {
    "inventory": ("reservations", "reserve", "reservation_id"),
    "payment": ("charges", "charge", "charge_id"),
    "shipping": ("shipments", "ship", "shipment_id"),
    "invoice": ("invoices", "invoice", "invoice_id"),
}
COMPENSATION: dict[str, tuple[str, str]] = {
    "inventory": ("releases", "release"),
    "payment": ("refunds", "refund"),
}
SERVICES = tuple(FORWARD)


@dataclasses.dataclass
class Faults:
    """One service's faults; every random draw comes from (seed, service, key, attempt): reproducible."""

    fail_rate: float = 0.0
    permanent_fail_rate: float = 0.0
    latency_ms: float = 0.0
    hang_rate: float = 0.0
    hang_ms: float = 30_000.0
    down: bool = False
    hang_compensations: bool = True
    """False: only forward calls hang (a late answer to a call its compensation then settles)."""
    hang_forwards: bool = True
    """False: only compensations hang (a release recorded but answered late, for a kill during compensation)."""
    down_compensations: bool = False
    """True: compensations are answered 503 (an outage while sagas compensate); forward calls go on."""


@dataclasses.dataclass
class Ledger:
    """One service's book: entries in order, the first answer of every key, cancelled forward keys."""

    entries: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    answers: dict[str, tuple[int, dict[str, Any]]] = dataclasses.field(default_factory=dict)
    forward_by_key: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    cancelled: set[str] = dataclasses.field(default_factory=set)
    attempts: dict[str, int] = dataclasses.field(default_factory=dict)
    inflight: int = 0
    """Requests being answered now; `max_inflight` the most at once (how concurrently the service is called)."""
    max_inflight: int = 0


class Services:
    """The four services and their ledgers, in one ASGI app."""

    def __init__(self, seed: str = "0", faults: Faults | None = None) -> None:
        self.seed = seed
        self.faults = {name: dataclasses.replace(faults or Faults()) for name in SERVICES}
        self.ledgers = {name: Ledger() for name in SERVICES}
        self._ids = itertools.count(1)
        routes = [Route("/ledgers", self._all_ledgers), Route("/health", self._health)]
        routes.append(Route("/_faults", self._set_faults, methods=["POST", "GET"]))
        for name, (path, _, _) in FORWARD.items():
            routes.append(Route(f"/{name}/{path}", self._counted(name, self._forward(name)), methods=["POST"]))
            routes.append(Route(f"/{name}/ledger", self._ledger(name)))
        for name, (path, _) in COMPENSATION.items():
            routes.append(Route(f"/{name}/{path}", self._counted(name, self._compensate(name)), methods=["POST"]))
        self.app = Starlette(routes=routes)

    # -- faults -------------------------------------------------------------------------------------------
    def _draw(self, service: str, key: str, what: str, attempt: int = 0) -> float:
        digest = hashlib.sha256(f"{self.seed}\x1f{service}\x1f{key}\x1f{what}\x1f{attempt}".encode()).digest()
        return random.Random(digest).random()

    def _counted(self, service: str, handle: Any) -> Any:
        """`handle` counting the requests in flight to `service` (its ledger's `inflight`, `max_inflight`)."""
        ledger = self.ledgers[service]

        async def counted(request: Request) -> Response:
            ledger.inflight += 1
            ledger.max_inflight = max(ledger.max_inflight, ledger.inflight)
            try:
                response: Response = await handle(request)
                return response
            finally:
                ledger.inflight -= 1

        return counted

    async def _before(self, service: str, key: str, *, compensation: bool = False) -> Response | None:
        """A transient fault, or None to go on (after the configured latency)."""
        faults = self.faults[service]
        ledger = self.ledgers[service]
        attempt = ledger.attempts.get(key, 0)
        ledger.attempts[key] = attempt + 1
        if faults.latency_ms:
            await asyncio.sleep(faults.latency_ms / 1000)
        if faults.down or (compensation and faults.down_compensations):
            return JSONResponse({"error": "unavailable", "service": service}, status_code=503)
        if (
            key not in ledger.answers
            and faults.fail_rate
            and self._draw(service, key, "fail", attempt) < faults.fail_rate
        ):
            return JSONResponse({"error": "transient", "service": service}, status_code=503)
        return None

    async def _answer(
        self, service: str, key: str, status: int, body: dict[str, Any], *, compensation: bool = False
    ) -> Response:
        faults = self.faults[service]
        attempt = self.ledgers[service].attempts.get(key, 1) - 1
        hangs = faults.hang_compensations if compensation else faults.hang_forwards
        if hangs and faults.hang_rate and self._draw(service, key, "hang", attempt) < faults.hang_rate:
            await asyncio.sleep(faults.hang_ms / 1000)
        return JSONResponse(body, status_code=status)

    # -- handlers -----------------------------------------------------------------------------------------
    def _forward(self, service: str) -> Any:
        kind, id_field = FORWARD[service][1], FORWARD[service][2]

        async def handle(request: Request) -> Response:
            key = request.headers.get("idempotency-key")
            if not key:
                return JSONResponse({"error": "an Idempotency-Key header is required"}, status_code=400)
            body = await _json(request)
            fault = await self._before(service, key)
            if fault is not None:
                return fault
            ledger = self.ledgers[service]
            if key not in ledger.answers:
                # No await between the check and the write: one event loop, so a key is recorded once.
                if key in ledger.cancelled:
                    ledger.answers[key] = (409, {"error": "cancelled", "detail": "compensated before it arrived"})
                elif self._draw(service, key, "permanent") < self.faults[service].permanent_fail_rate:
                    ledger.answers[key] = (422, {"error": "declined", "service": service})
                else:
                    ref = f"{kind}-{next(self._ids)}"
                    entry = {
                        "seq": len(ledger.entries) + 1,
                        "kind": kind,
                        "key": key,
                        "ref": ref,
                        "order_id": body.get("order_id"),
                        "amount": body.get("amount"),
                        "traceparent": request.headers.get("traceparent"),
                        "at": time.time(),
                    }
                    ledger.entries.append(entry)
                    ledger.forward_by_key[key] = entry
                    ledger.answers[key] = (201, {id_field: ref, "order_id": body.get("order_id"), "status": "done"})
            status, answer = ledger.answers[key]
            return await self._answer(service, key, status, answer)

        return handle

    def _compensate(self, service: str) -> Any:
        kind = COMPENSATION[service][1]

        async def handle(request: Request) -> Response:
            key = request.headers.get("idempotency-key")
            body = await _json(request)
            target = request.headers.get("compensates") or body.get("compensates")
            if not key or not target:
                return JSONResponse({"error": "Idempotency-Key and Compensates are required"}, status_code=400)
            fault = await self._before(service, key, compensation=True)
            if fault is not None:
                return fault
            ledger = self.ledgers[service]
            if key not in ledger.answers:
                forward = ledger.forward_by_key.get(str(target))
                already = any(e["kind"] in (kind, "void") and e["compensates"] == target for e in ledger.entries)
                if already:
                    ledger.answers[key] = (200, {"status": "already_compensated", "compensates": target})
                elif forward is None:
                    ledger.cancelled.add(str(target))
                    ledger.entries.append(_entry(ledger, "void", key, str(target), None, body))
                    ledger.answers[key] = (200, {"status": "cancelled_before_forward", "compensates": target})
                else:
                    ledger.entries.append(_entry(ledger, kind, key, str(target), forward, body))
                    ledger.answers[key] = (200, {"status": "compensated", "compensates": target, "ref": forward["ref"]})
            status, answer = ledger.answers[key]
            return await self._answer(service, key, status, answer, compensation=True)

        return handle

    def _ledger(self, service: str) -> Any:
        async def handle(_: Request) -> Response:
            return JSONResponse(self.ledger_view(service))

        return handle

    def ledger_view(self, service: str) -> dict[str, Any]:
        ledger = self.ledgers[service]
        return {
            "service": service,
            "entries": ledger.entries,
            "cancelled": sorted(ledger.cancelled),
            "attempts": dict(ledger.attempts),  # requests per key: a call repeated after a crash shows here
            "max_inflight": ledger.max_inflight,
        }

    async def _all_ledgers(self, _: Request) -> Response:
        return JSONResponse({name: self.ledger_view(name) for name in SERVICES})

    async def _health(self, _: Request) -> Response:
        return JSONResponse({"status": "ok", "services": list(SERVICES)})

    async def _set_faults(self, request: Request) -> Response:
        if request.method == "POST":
            body = await _json(request)
            names = [body["service"]] if body.get("service") else list(SERVICES)
            for name in names:
                if name not in self.faults:
                    return JSONResponse({"error": f"unknown service {name!r}"}, status_code=404)
                fields = {f.name for f in dataclasses.fields(Faults)}
                self.faults[name] = dataclasses.replace(
                    self.faults[name], **{k: v for k, v in body.items() if k in fields}
                )
        return JSONResponse({name: dataclasses.asdict(f) for name, f in self.faults.items()})


def _entry(
    ledger: Ledger, kind: str, key: str, target: str, forward: dict[str, Any] | None, body: dict[str, Any]
) -> dict[str, Any]:
    return {
        "seq": len(ledger.entries) + 1,
        "kind": kind,
        "key": key,
        "compensates": target,
        "ref": forward["ref"] if forward else None,
        "order_id": (forward or {}).get("order_id", body.get("order_id")),
        "amount": forward.get("amount") if forward else None,
        "at": time.time(),
    }


async def _json(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


@dataclasses.dataclass
class RunningServices:
    """Services served by uvicorn in the current event loop (tests and benchmarks)."""

    services: Services
    server: uvicorn.Server
    task: asyncio.Task[None]
    url: str

    def url_of(self, service: str) -> str:
        return f"{self.url}/{service}"

    async def aclose(self) -> None:
        self.server.should_exit = True
        await self.task


async def start_services(
    faults: Faults | None = None, *, seed: str = "0", host: str = "127.0.0.1", port: int = 0
) -> RunningServices:
    """Start the services on `host:port` (0: any free port) in this event loop."""
    services = Services(seed, faults)
    server, task, bound_port = await serve_in_loop(services.app, host, port)
    return RunningServices(services, server, task, f"http://{host}:{bound_port}")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--seed", default="0", help="seed of the fault draws (any string)")
    parser.add_argument("--fail-rate", type=float, default=0.0, help="share of attempts answered 503 (transient)")
    parser.add_argument("--permanent-fail-rate", type=float, default=0.0, help="share of keys refused for good (422)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every answer")
    parser.add_argument("--hang-rate", type=float, default=0.0, help="share of attempts answered after --hang-ms")
    parser.add_argument("--hang-ms", type=float, default=30_000.0, help="how late a hanging answer comes")


def run(args: argparse.Namespace) -> int:
    faults = Faults(args.fail_rate, args.permanent_fail_rate, args.latency_ms, args.hang_rate, args.hang_ms)
    services = Services(args.seed, faults)
    base = f"http://{args.host}:{args.port}"
    print(f"services listening on {base} ({', '.join(f'{base}/{s}' for s in SERVICES)})", flush=True)
    uvicorn.run(services.app, host=args.host, port=args.port, log_level="warning", access_log=False, lifespan="off")
    return 0
