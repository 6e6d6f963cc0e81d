"""`nexus dlq` lists and redrives dead webhook deliveries, next to dead letters."""

from __future__ import annotations

import json
import subprocess
import sys

from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import ROOT, settings_env
from tests.factories import plan_json


def nexus_dlq(settings: Settings, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "nexus_cli", "dlq", *args],
        env=settings_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


async def test_dead_delivery_listed_and_redriven_as_the_new_head(db: Database, settings: Settings) -> None:
    """A dead delivery shows in `nexus dlq list`, and `redrive-delivery` makes it pending and its order's head."""
    sub_id = await db.fetchval(
        "INSERT INTO subscriptions (name, url, secret) VALUES ('s', 'http://127.0.0.1:9/', "
        "'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw') RETURNING id"
    )
    await Gateway(db).submit([Incoming.parse(e) for e in plan_json("o-dlq", "p", 2)])
    first = await db.fetchval("SELECT outbox_id FROM deliveries WHERE order_id = 'o-dlq' AND position = 1")
    # The subscriber rejected the first notification: dead, and the second became the head.
    await db.execute(
        "UPDATE deliveries SET state = 'dead', head = false, dead_at = now(), dead_reason = 'rejected: HTTP 400'"
        " WHERE outbox_id = $1",
        first,
    )
    await db.execute("UPDATE deliveries SET head = true WHERE order_id = 'o-dlq' AND position = 2")

    listed = json.loads(nexus_dlq(settings, "list", "--source", "deliveries", "--json"))["deliveries"]
    assert [(d["outbox_id"], d["position"], d["dead_reason"]) for d in listed] == [
        (str(first), 1, "rejected: HTTP 400")
    ]

    redriven = json.loads(nexus_dlq(settings, "redrive-delivery", str(first), str(sub_id)))
    assert redriven["state"] == "pending"
    rows = await db.fetch("SELECT position, state, head FROM deliveries WHERE order_id = 'o-dlq' ORDER BY position")
    assert [tuple(r) for r in rows] == [(1, "pending", True), (2, "pending", False)]
    assert json.loads(nexus_dlq(settings, "list", "--source", "deliveries", "--json"))["deliveries"] == []
