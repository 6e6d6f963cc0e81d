"""The MCP `wait_for_order` tool counts toward the key's wait cap (`NEXUS_MAX_WAITS_PER_KEY`) as the REST
long poll and the SSE stream do: past the cap it is refused with 429 TOO_MANY_WAITS before it waits."""

from __future__ import annotations

from typing import Any

import pytest

from nexus.auth.roles import Principal, Role
from nexus.ingress.mcp_api import GatewayBackend
from nexus.lifecycle.waiting import WaitSlots
from nexus.mcp.backend import BackendError
from nexus.settings import Settings


def _backend(slots: WaitSlots, key_id: int) -> GatewayBackend:
    principal = Principal(key_id, "acme", frozenset({Role.AGENT}))
    nothing: Any = None
    return GatewayBackend(nothing, nothing, Settings(), nothing, principal, nothing, nothing, slots)


async def test_wait_for_order_past_the_keys_cap_is_too_many_waits() -> None:
    """A key holding all its slots (streams or long polls) gets 429 TOO_MANY_WAITS from wait_for_order,
    and the refused call holds no slot afterwards."""
    slots = WaitSlots(2)
    slots.take(7)
    slots.take(7)
    with pytest.raises(BackendError) as refused:
        await _backend(slots, 7).wait_for_order("o-1", None, 1.0)
    assert (refused.value.status, refused.value.code) == (429, "TOO_MANY_WAITS")
    assert slots.held(7) == 2


async def test_a_finished_wait_gives_its_slot_back() -> None:
    """A wait that ends (here: the read fails) gives its slot back, so the key's count returns to zero."""
    slots = WaitSlots(1)
    with pytest.raises(Exception):  # noqa: B017 - no listener: the wait itself fails
        await _backend(slots, 8).wait_for_order("o-1", None, 0.1)
    assert slots.held(8) == 0
