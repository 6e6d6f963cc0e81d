"""Creating and deleting topics for lab runs and tests (the gateway itself never creates topics)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from nexus_wire.kafka import client_kwargs

_TOPIC_ALREADY_EXISTS = 36


async def ensure_topics(bootstrap: str, topics: Sequence[str], *, partitions: int = 4, replication: int = 1) -> None:
    """Create the topics that do not exist yet (replication 1: the local broker is a single node; 3 on a
    three-broker cluster) and wait until every partition has a leader, so the first produce does not bounce."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000, **client_kwargs(None))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [t for t in topics if t not in existing]
        if missing:
            response = await admin.create_topics(
                [NewTopic(t, partitions, replication) for t in missing], timeout_ms=10_000
            )
            for name, code, *_ in response.topic_errors:
                if code not in (0, _TOPIC_ALREADY_EXISTS):
                    raise RuntimeError(f"cannot create topic {name}: error {code}")
        for _ in range(100):
            described = await admin.describe_topics(list(topics))
            if all(
                t.get("error_code", 0) == 0 and t["partitions"] and all(p["leader"] >= 0 for p in t["partitions"])
                for t in described
            ):
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"topics {list(topics)} have no leader yet")
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, topics: Sequence[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000, **client_kwargs(None))
    await admin.start()
    try:
        await admin.delete_topics(list(topics), timeout_ms=10_000)
    finally:
        await admin.close()
