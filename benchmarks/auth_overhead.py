"""Cost of authentication per request: the same gateway with keys on and off, same run, under wrk.

Two servers run side by side on one database, built by the same `create_app`: "on" is the product
(Authorization checked: SHA-256 of the key, cache lookup, role check, rate-limit bucket); "off" swaps
the AuthMiddleware for one that attaches a fixed all-tenant principal (what routes would see with no
authentication at all). wrk drives each in turn (A/B/A/B...) with the same load:

* ``GET /v1/orders/o-1``: a read of one order (one indexed query), the path where auth weighs most;
* ``POST /v1/events``: the same envelope again (a DUPLICATE: lock, read, decide, commit).

It also times the middleware alone in-process (cache hit) in microseconds per request.

Usage: ``.venv/bin/python benchmarks/auth_overhead.py [--seconds 8] [--rounds 3] [--connections 16]``.
PostgreSQL: NEXUS_DATABASE_URL (a database to use), else an embedded pgserver in a temp dir. Needs wrk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

ORDER_STEP = {
    "event_type": "OrderCreated",
    "plan_id": "p-1",
    "order_id": "o-1",
    "seq_id": 1,
    "timestamp": "2026-01-01T00:00:00Z",
    "schema_version": "1.0",
    "data": {"user_id": "u", "items": [{"product_id": "p", "quantity": 1, "unit_price": 10}], "total_amount": 10,
             "currency": "USD"},
}  # fmt: skip


def serve(mode: str, port: int, url: str) -> None:
    """Child process: one gateway HTTP server (no dispatcher), auth on or off."""
    import uvicorn

    from nexus.auth.middleware import AuthMiddleware
    from nexus.auth.roles import Principal, Role
    from nexus.cli import event_loop_factory
    from nexus.gateway import Gateway
    from nexus.ingress.batcher import GroupCommitter
    from nexus.ingress.http import create_app
    from nexus.settings import Settings
    from nexus.store.database import Database

    class FixedPrincipal:
        """'Auth off': every request is an all-tenant principal with every role, nothing checked."""

        def __init__(self, app: Any, **_: Any) -> None:
            self.app = app
            self.principal = Principal(0, None, frozenset(Role))

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                scope.setdefault("state", {})["principal"] = self.principal
            await self.app(scope, receive, send)

    async def main() -> None:
        settings = Settings(database_url=url, db_pool_size=10)
        db = await Database(settings).open(migrate=False)
        gateway = Gateway(db)
        committer = GroupCommitter(gateway, workers=settings.batch_workers, max_events=500)
        committer.start()
        app = create_app(db, gateway, committer)
        if mode == "off":
            for i, m in enumerate(app.user_middleware):
                if m.cls is AuthMiddleware:
                    app.user_middleware[i] = type(m)(FixedPrincipal)
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                                access_log=False, http="httptools")  # fmt: skip
        await uvicorn.Server(config).serve()

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(main())


def wrk(url: str, key: str, seconds: int, connections: int, lua: Path | None) -> float:
    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-H", f"Authorization: Bearer {key}"]
    if lua is not None:
        cmd += ["-s", str(lua)]
    out = subprocess.run([*cmd, url], capture_output=True, text=True, check=True).stdout
    if re.search(r"Non-2xx or 3xx responses", out):
        raise RuntimeError(f"wrk saw errors:\n{out}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert match, out
    return float(match.group(1))


async def middleware_us(url: str, key: str, n: int = 20000) -> dict[str, float]:
    """The middleware alone (cache hit): µs per request, against a no-op app."""
    from nexus.auth.keys import KeyCache
    from nexus.auth.middleware import AuthMiddleware
    from nexus.settings import Settings
    from nexus.store.database import Database

    db = await Database(Settings(database_url=url, db_pool_size=2)).open(migrate=False)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        return None

    middleware = AuthMiddleware(app, KeyCache(db, ttl_s=3600))
    scope = {"type": "http", "method": "GET", "path": "/v1/orders/o-1",
             "headers": [(b"host", b"x"), (b"authorization", f"Bearer {key}".encode())]}  # fmt: skip
    await middleware(dict(scope), None, None)  # warm the cache
    started = time.perf_counter()
    for _ in range(n):
        await middleware(dict(scope), None, None)
    with_auth = (time.perf_counter() - started) / n * 1e6
    started = time.perf_counter()
    for _ in range(n):
        await app(dict(scope), None, None)
    bare = (time.perf_counter() - started) / n * 1e6
    await db.close()
    return {"middleware_us": round(with_auth - bare, 2)}


async def prepare(url: str) -> str:
    from nexus.auth.keys import create_key
    from nexus.auth.roles import Role
    from nexus.core.decide.items import Incoming
    from nexus.gateway import Gateway
    from nexus.settings import Settings
    from nexus.store.database import Database

    db = await Database(Settings(database_url=url)).open(migrate=True)
    try:
        _, key = await create_key(db, "default", frozenset({Role.AGENT, Role.OPERATOR}), name="bench")
        await Gateway(db).submit([Incoming.parse({**ORDER_STEP, "event_id": str(uuid.uuid4())})])
    finally:
        await db.close()
    return key


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/auth_overhead.json"))
    parser.add_argument("_serve", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._serve:
        mode, port, url = args._serve
        serve(mode, int(port), url)
        return 0

    embedded = None
    url = os.environ.get("NEXUS_DATABASE_URL")
    if url is None:
        from nexus.store.embedded import EmbeddedPostgres

        embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="nexus-authbench-")), cleanup_mode="delete")
        url = embedded.start()
    key = asyncio.run(prepare(url))
    ports = {"on": 18431, "off": 18432}
    procs = {m: subprocess.Popen([sys.executable, __file__, m, str(p), url]) for m, p in ports.items()}
    try:
        for port in ports.values():
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.1)
        lua = Path(tempfile.mkdtemp()) / "post.lua"
        body = json.dumps({**ORDER_STEP, "event_id": str(uuid.uuid4())})
        lua.write_text(f'wrk.method = "POST"\nwrk.body = {json.dumps(body)}\n'
                       'wrk.headers["Content-Type"] = "application/json"\n')  # fmt: skip
        results: dict[str, dict[str, list[float]]] = {"GET order": {"on": [], "off": []},
                                                       "POST duplicate": {"on": [], "off": []}}  # fmt: skip
        for name, path, script in (("GET order", "/v1/orders/o-1", None), ("POST duplicate", "/v1/events", lua)):
            wrk(f"http://127.0.0.1:{ports['on']}{path}", key, 2, args.connections, script)  # warm up
            wrk(f"http://127.0.0.1:{ports['off']}{path}", key, 2, args.connections, script)
            for r in range(args.rounds):
                order = ("on", "off") if r % 2 == 0 else ("off", "on")
                for mode in order:
                    rps = wrk(f"http://127.0.0.1:{ports[mode]}{path}", key, args.seconds, args.connections, script)
                    results[name][mode].append(rps)
                    print(f"{name:15} {mode:3} round {r + 1}: {rps:8.0f} req/s", flush=True)
        micro = asyncio.run(middleware_us(url, key))
    finally:
        for p in procs.values():
            p.terminate()
            p.wait(10)
        if embedded is not None:
            embedded.close()
    summary: dict[str, Any] = {"load": os.getloadavg(), "connections": args.connections, **micro, "paths": {}}
    print()
    for name, by_mode in results.items():
        on, off = statistics.median(by_mode["on"]), statistics.median(by_mode["off"])
        overhead = (off - on) / off * 100
        summary["paths"][name] = {"on_rps": on, "off_rps": off, "overhead_pct": round(overhead, 1), "runs": by_mode}
        print(f"{name:15} median on {on:8.0f}  off {off:8.0f}  overhead {overhead:5.1f} %  "
              f"(per request: {1e6 / on - 1e6 / off:6.1f} µs)")  # fmt: skip
    print(f"middleware alone (cache hit): {micro['middleware_us']} µs per request")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
