"""deploy/haproxy.cfg as HAProxy reads it, and against the gateway's settings: a draining instance is out of
rotation before it stops, and a long poll or an SSE stream is never cut by the balancer's timeouts."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nexus.settings import Settings
from nexus_lab.balancer import HAPROXY_CFG, balancer_env

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(text: str) -> float:
    value, unit = re.fullmatch(r"(\d+)(ms|s|m|h)?", text).groups()  # type: ignore[union-attr]
    return int(value) * UNITS[unit or "ms"]  # HAProxy's default unit is the millisecond


def _lines() -> list[list[str]]:
    text = Path(HAPROXY_CFG).read_text(encoding="utf-8")
    return [line.split() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _setting(*words: str) -> list[str]:
    found = [line[len(words) :] for line in _lines() if line[: len(words)] == list(words)]
    assert len(found) == 1, f"{' '.join(words)!r} should appear once in {HAPROXY_CFG}: {found}"
    return found[0]


@pytest.mark.processes
def test_haproxy_accepts_the_file_with_the_labs_variables() -> None:
    """`haproxy -c` (Debian's package, `make haproxy`) finds deploy/haproxy.cfg valid once its addresses are set."""
    haproxy = shutil.which("haproxy")
    assert haproxy is not None, "haproxy is not installed: make haproxy"
    env = balancer_env("127.0.0.1:18000", ["127.0.0.1:18081", "127.0.0.1:18082"])
    done = subprocess.run([haproxy, "-c", "-f", str(HAPROXY_CFG)], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_round_robin_with_health_checks_on_readyz() -> None:
    """Requests are spread round robin, and every instance is checked with GET /readyz expecting 200."""
    assert _setting("balance") == ["roundrobin"]
    assert _setting("option", "httpchk") == ["GET", "/readyz"]
    assert _setting("http-check", "expect") == ["status", "200"]
    servers = [line for line in _lines() if line[0] == "server"]
    assert len(servers) == 2 and all(line[-1] == "check" for line in servers)


def test_the_default_drain_grace_outlasts_the_checks_that_take_an_instance_out() -> None:
    """NEXUS_DRAIN_GRACE_S's default is at least two health-check intervals and at least `fall` of them: the
    balancer marks a draining instance down while it still serves."""
    options = _setting("default-server")
    inter = _seconds(options[options.index("inter") + 1])
    fall = int(options[options.index("fall") + 1])
    grace = Settings().drain_grace_s
    assert grace >= 2 * inter and grace >= fall * inter, (grace, inter, fall)
    assert Settings().drain_timeout_s > grace


def test_long_polls_and_streams_outlive_no_balancer_timeout() -> None:
    """The client and server timeouts exceed the longest long poll (NEXUS_WAIT_MAX_S) and an SSE stream's
    keepalive interval, so the balancer cuts neither."""
    settings = Settings()
    for side in ("client", "server"):
        timeout = _seconds(_setting("timeout", side)[0])
        assert timeout > settings.wait_max_s and timeout > settings.stream_keepalive_s, (side, timeout)
