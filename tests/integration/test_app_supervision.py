"""A gateway process whose background service dies stops and reports it, instead of living on half-dead."""

from __future__ import annotations

import asyncio

import pytest

from nexus import app
from nexus.gateway import Gateway
from nexus.settings import Settings
from tests.conftest import free_port


@pytest.mark.parametrize("http", [True, False])
async def test_a_dead_service_stops_the_process(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, http: bool
) -> None:
    """When a service task raises, serve() shuts the HTTP server (or the wait) down and raises ServiceFailed."""

    async def broken_sweeper(gateway: Gateway, settings: Settings) -> None:
        await asyncio.sleep(0.2)
        raise RuntimeError("sweeper blew up")

    monkeypatch.setattr(app, "sweep_buffer", broken_sweeper)
    with pytest.raises(app.ServiceFailed, match=r"buffer-sweeper.*sweeper blew up"):
        await asyncio.wait_for(
            app.serve(settings.replace(http_port=free_port()), http=http, dispatcher=False), timeout=20
        )
