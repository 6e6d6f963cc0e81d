"""The noisy neighbour's tenant C: how a request's time is split between the gateway and C's own client."""

from __future__ import annotations

import socket
import threading
import time

from nexus_lab.bench.noisy import phases
from nexus_lab.bench.noisy_tenant_c import Sample, split


def test_an_answer_left_unread_counts_as_c_clients_time_not_the_servers() -> None:
    """A server that answers after 0.2 s and a client that reads the answer 0.3 s after it came: the kernel's
    record of the connection puts about 0.2 s on the server and 0.3 s after the receipt."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    try:
        started = time.perf_counter()
        client.sendall(b"GET / HTTP/1.1\r\n\r\n")
        server.recv(100)
        threading.Timer(0.2, server.sendall, (b"HTTP/1.1 200 OK\r\n\r\n",)).start()
        time.sleep(0.5)  # the answer waits in the kernel from 0.2 s on
        client.recv(100)
        before_send, on_server, after_receipt = split(time.perf_counter() - started, client) or (0, 0, 0)
    finally:
        for sock in (server, client, listener):
            sock.close()
    assert before_send < 0.05
    assert 0.15 < on_server < 0.3
    assert 0.25 < after_receipt < 0.4


def test_the_tail_is_the_mean_of_each_part_over_the_slowest_hundredth() -> None:
    """Of 200 requests the two slowest make the tail, each part the mean of theirs in ms."""
    sample = Sample()
    sample.parts = [(0.01, (0.0, 0.01, 0.0))] * 198 + [(0.3, (0.1, 0.2, 0.0)), (0.5, (0.0, 0.4, 0.1))]
    assert sample.tail() == {"n": 2, "before_send": 50.0, "server": 300.0, "after_receipt": 50.0}


def test_each_pattern_runs_once_per_niceness_of_as_generator_after_the_baseline() -> None:
    """The default (niceness 0) keeps the rows' names; another niceness is named in its row."""
    assert phases(["waits", "plans"], [0]) == [("baseline", None, 0), ("waits", "waits", 0), ("plans", "plans", 0)]
    assert [name for name, _, _ in phases(["waits"], [0, 10])] == ["baseline", "waits", "waits (nice 10)"]
