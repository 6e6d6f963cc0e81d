"""Each HTTP answer of a real `nexus serve` reaches the client's socket as one TCP segment (head and body in
one write), counted by the kernel's TCP_INFO of the client's socket."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import uuid
from typing import Any

import pytest

from tests.conftest import api_headers
from tests.factories import plan_json

pytestmark = pytest.mark.slow

# struct tcp_info (linux/tcp.h): __u32 tcpi_data_segs_in, the segments received that carried data.
_DATA_SEGS_IN = 152


def _data_segments_in(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return int(struct.unpack_from("I", info, _DATA_SEGS_IN)[0])


async def _answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


async def test_each_answer_is_one_segment_on_a_kept_alive_connection(start_gateway: Any) -> None:
    """Ten events posted and ten probes on one kept-alive connection: twenty answers in twenty data segments
    (uvicorn alone writes each head and body separately: forty)."""
    _, base = start_gateway("--no-dispatcher")
    port = int(base.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sock = writer.get_extra_info("socket")
    before = _data_segments_in(sock)
    auth = api_headers()["Authorization"].encode()
    order = f"o-{uuid.uuid4().hex[:8]}"
    steps = plan_json(order, f"p-{order}") * 2  # the second five are duplicates: answered too
    for step in steps:
        body = json.dumps(step).encode()
        writer.write(
            b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: " + auth
            + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )  # fmt: skip
        head, answer = await _answer(reader)
        decision = json.loads(answer)["results"][0]["decision"]
        assert head.startswith(b"HTTP/1.1 200 ") and decision in {"APPLY", "DUPLICATE"}
    for _ in range(10):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head, _ = await _answer(reader)
        assert head.startswith(b"HTTP/1.1 200 ")
    segments = _data_segments_in(sock) - before
    writer.close()
    assert segments == 20
