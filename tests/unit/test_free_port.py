"""The lab's `free_port` never hands out a port twice in one process, even if the kernel offers it again."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from nexus_lab import procs


class _Offering:
    """A socket whose bind to port 0 gets the kernel's next offer from a fixed list (the kernel may offer a
    port it offered before, once that socket is closed and nobody has bound it yet)."""

    offers: list[int] = []

    def __init__(self, *args: Any) -> None:
        self.port = 0

    def __enter__(self) -> _Offering:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def bind(self, address: tuple[str, int]) -> None:
        self.port = self.offers.pop(0)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


def test_a_port_offered_again_is_not_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A harness's sink port, then its gateway's port before the sink has bound: different ports."""
    monkeypatch.setattr(procs, "_HANDED_OUT", set())
    monkeypatch.setattr(_Offering, "offers", [41001, 41001, 41001, 41002])
    monkeypatch.setattr(procs.socket, "socket", _Offering)
    assert [procs.free_port(), procs.free_port()] == [41001, 41002]


def test_a_free_port_can_be_bound() -> None:
    port = procs.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
    assert port not in {procs.free_port() for _ in range(20)}
