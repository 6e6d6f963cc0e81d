"""A webhook receiver that is not the bottleneck of the delivery bench.

`nexus sink` verifies, records and injects faults, in Python on Starlette: on 2 cores it would cap the
measurement near the dispatcher's own rate. This one only parses HTTP (httptools, the parser uvicorn uses)
and answers ``200`` with keep-alive, from `processes` processes sharing the port (SO_REUSEPORT), and
counts what it answered. Its ceiling is measured with wrk in benchmarks/RESULTS.md.

Run: ``python -m nexus_lab.bench.receiver --port 9100 --processes 2``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import socket
from typing import Any

import httptools
import uvloop

_OK = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"


class _Protocol(asyncio.Protocol):
    def __init__(self, counter: list[int]) -> None:
        self._counter = counter
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.close()

    def on_message_complete(self) -> None:
        self._counter[0] += 1
        if self._transport is not None:
            self._transport.write(_OK)


def _serve(host: str, port: int) -> None:
    counter = [0]

    async def main() -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Protocol(counter), sock=sock, backlog=1024)
        parent = os.getppid()
        async with server:
            while os.getppid() == parent:  # noqa: ASYNC110 - a receiver whose parent is gone goes too
                await asyncio.sleep(1.0)

    # Nothing to flush or close cleanly: a bench receiver just goes.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    uvloop.run(main())


def serve(host: str, port: int, processes: int) -> list[multiprocessing.Process]:
    """Start the receiver in `processes` processes; each is a `multiprocessing.Process` to terminate."""
    procs = [multiprocessing.Process(target=_serve, args=(host, port), daemon=True) for _ in range(processes)]
    for p in procs:
        p.start()
    return procs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--processes", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    args = parser.parse_args()
    if args.processes <= 1:
        _serve(args.host, args.port)
        return
    procs = serve(args.host, args.port, args.processes)

    def stop(*_: object) -> None:
        for p in procs:
            p.terminate()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    for p in procs:
        p.join()


if __name__ == "__main__":
    main()
