"""What a refused wait costs the event loop, in-process: CPU microseconds per 429 TOO_MANY_WAITS.

The waits pattern of the noisy neighbour (benchmarks/noisy_neighbour.py --patterns waits) has tenant A open
about 1,120 long polls a second, nearly all of them refused because its key's and tenant's waits are all
held. This times one refusal through the whole ASGI app (`create_app`, as `nexus serve` runs it, without the
HTTP server's accept, parse and close) with the key known to the auth cache and the database unreachable
(nothing is read), and, for the parts: the key check alone (`Gatekeeper.admit` and `release`). Run it with
either tree first on PYTHONPATH to compare two versions of the code (it uses only names both have).

Usage: ``PYTHONPATH=src .venv/bin/python benchmarks/wait_refusal_cost.py [--requests 20000] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

KEY = "nxk_wait-refusal-bench"
TARGET = ("/v1/orders/a-wait", b"wait=60&after_seq=5")


def _app() -> Any:
    from nexus.auth.keys import hash_key
    from nexus.auth.roles import Principal, Role
    from nexus.gateway import Gateway
    from nexus.ingress.http import create_app
    from nexus.lifecycle.waiting import CLIENT, WaitingClient
    from nexus.settings import Settings
    from nexus.store.database import Database

    settings = Settings(
        database_url="postgresql://nexus@127.0.0.1:9/unreachable", rate_limit_agent=0, rate_limit_tenant=0
    )
    db = Database(settings)
    app = create_app(db, Gateway(db), settings=settings)
    app.state.keys._entries[hash_key(KEY)] = (float("inf"), Principal(1, "acme", frozenset({Role.AGENT})))
    token = CLIENT.set(WaitingClient(tenant="acme"))
    try:
        for _ in range(settings.max_waits_per_key):  # the key holds every wait it may
            app.state.wait_slots.take(1)
    finally:
        CLIENT.reset(token)
    return app


def _scope() -> dict[str, Any]:
    path, query = TARGET
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [(b"host", b"gateway"), (b"authorization", f"Bearer {KEY}".encode())],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "extensions": {},
    }


async def _per_request_us(call: Any, n: int) -> float:
    """CPU microseconds per call of `call()` (process time: the event loop's work, not waiting)."""
    for _ in range(min(n, 500)):  # warm up
        await call()
    started = time.process_time()
    for _ in range(n):
        await call()
    return (time.process_time() - started) / n * 1e6


async def measure(n: int) -> dict[str, float]:
    from nexus.auth.roles import required_roles

    app = _app()
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def refusal() -> None:
        await app(_scope(), receive, send)

    async def key_check() -> None:
        principal = await gate.admit(_scope(), send, roles)
        if principal is not None:
            gate.release(principal)

    await refusal()
    assert statuses == [429], statuses
    gate, roles = app.state.gate, required_roles("GET", TARGET[0])
    return {"refusal_us": await _per_request_us(refusal, n), "key_check_us": await _per_request_us(key_check, n)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    import nexus

    rounds = [asyncio.run(measure(args.requests)) for _ in range(args.rounds)]
    result = {
        "code": str(Path(nexus.__file__).parent),
        "requests": args.requests,
        "rounds": rounds,
        "median": {k: round(statistics.median(r[k] for r in rounds), 2) for k in rounds[0]},
    }
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
