"""Waiting for a child server: the answer must come from that child, not from whoever holds its port."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nexus_lab.procs import Proc, free_port, wait_http

pytestmark = pytest.mark.processes


def test_a_port_answered_by_another_process_is_not_the_childs(tmp_path: Path) -> None:
    """Another test worker's server on the port `free_port` handed out answers /healthz; waiting for our child
    (which never listens) must time out instead of returning (the CI flake: a key checked by the wrong
    gateway, 401). The same wait returns for the process that does listen."""
    port = free_port()
    other = Proc(
        "other", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], {}, tmp_path / "o.log"
    )
    ours = Proc("ours", [sys.executable, "-c", "import time; time.sleep(30)"], {}, tmp_path / "ours.log")
    other.start()
    ours.start()
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_http(url, timeout=15, proc=other)
        with pytest.raises(TimeoutError):
            wait_http(url, timeout=2, proc=ours)
    finally:
        ours.stop(5.0)
        other.stop(5.0)
