"""The dispatcher's webhook client alone: CPU per signed request, this build's `Sender` against another's.

Sends N claimed deliveries (signed, every contract header) from `concurrency` tasks through
`nexus.delivery.sender.Sender` to the bench's receiver (`nexus_lab.bench.receiver`, started here in its
own process) and prints requests/s and CPU milliseconds per request of this process. Which `Sender` is
measured is whichever `nexus` is imported: run it twice, e.g. with ``PYTHONPATH=<other checkout>/src``
for the other build, interleaved (httpx before, aiohttp after).

Run: ``.venv/bin/python benchmarks/webhook_client.py --requests 5000 --concurrency 64``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid

from nexus.delivery.claims import Claimed
from nexus.delivery.sender import Sender
from nexus.delivery.signing import generate_secret, parse_secret
from nexus.settings import Settings
from nexus_lab.bench.external import start_receiver
from nexus_lab.procs import free_port, wait_http


async def main(args: argparse.Namespace) -> None:
    port = free_port()
    receiver = start_receiver(port, args.receiver_processes, dict(os.environ))
    try:
        await asyncio.to_thread(wait_http, f"http://127.0.0.1:{port}/healthz", 120)
        settings = Settings(allow_private_urls="127.0.0.0/8")
        sender = Sender(args.concurrency, 5.0, "bench", settings)
        key = parse_secret(generate_secret())
        body = json.dumps({"order_id": "o-1", "event_type": "OrderCreated", "data": {"x": "y" * 300}}).encode()
        queue = list(range(args.requests))
        statuses: dict[int | None, int] = {}

        async def worker(slot: int) -> None:
            while queue:
                n = queue.pop()
                c = Claimed(uuid.uuid4(), 1, f"o-{n}", 1, 1, "OrderCreated", body, None,
                            f"http://127.0.0.1:{port}/hook", key)  # fmt: skip
                r = await sender.send(c, slot)
                statuses[r.status] = statuses.get(r.status, 0) + 1

        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(args.concurrency)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        await sender.aclose()
        client = (
            Sender.__module__ + " " + ("aiohttp" if "aiohttp" in str(Sender.__init__.__code__.co_names) else "httpx")
        )
        print(json.dumps({"client": client, "requests": args.requests, "requests_per_s": round(args.requests / wall),
                          "cpu_ms_per_request": round(cpu / args.requests * 1000, 3), "statuses": statuses,
                          "load": os.getloadavg()[0]}))  # fmt: skip
    finally:
        receiver.kill()
        receiver.wait(10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--receiver-processes", type=int, default=1)
    import uvloop

    uvloop.run(main(parser.parse_args()))
