"""One LISTEN connection kept open for as long as its task runs: the wake-up shortcut of the dispatcher
(`nexus_outbox`), the saga executors (`nexus_sagas`) and the long polls (`nexus_orders`).

Each is only a shortcut: its user also polls (or re-reads on every reconnection), so a lost connection
(PostgreSQL restarting) costs latency, never work. The connection is opened again on the schedule its
caller gives (nexus_wire/backoff.py through `Retrying`), and a dead connection is noticed by its termination
callback or, at the latest, every `check_s`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import asyncpg

from nexus.retrying import Retrying, sleep_until_set

log = logging.getLogger(__name__)


def _nothing() -> None:
    return None


async def listen_forever(
    url: str,
    channel: str,
    on_notify: Callable[[str], None],
    retrying: Retrying,
    *,
    on_connect: Callable[[], None] = _nothing,
    on_disconnect: Callable[[], None] = _nothing,
    check_s: float,
) -> None:
    """LISTEN on `channel` until cancelled, calling `on_notify(payload)` for each notification;
    `on_connect` once listening (notifications sent while away are lost: look again then), and
    `on_disconnect` when the connection is gone, before waiting to reconnect."""
    while True:
        conn: asyncpg.Connection | None = None
        try:
            conn = await asyncpg.connect(url, timeout=10)
            closed = asyncio.Event()
            conn.add_termination_listener(lambda *_, closed=closed: closed.set())
            await conn.add_listener(channel, lambda _conn, _pid, _channel, payload: on_notify(payload))
            retrying.reset()
            on_connect()
            while not conn.is_closed():
                await sleep_until_set(closed, check_s)
        except Exception:  # a shortcut must never take its user down with it
            log.info("listener lost its connection", exc_info=True, extra={"action": "listen", "channel": channel})
        finally:
            if conn is not None:
                conn.terminate()
        on_disconnect()
        await retrying.wait()
