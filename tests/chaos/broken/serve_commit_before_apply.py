"""`nexus ...` whose Kafka consumer commits each polled batch's offsets before the gateway applies it.

A consumer killed between the commit and the apply loses those records: its successor starts after
them. To make that window as wide as a slow database makes it, the apply waits a little after the commit.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from nexus.ingress.kafka import KafkaIngress

APPLY_DELAY_S = 1.5

_resolve = KafkaIngress._resolve


async def _commit_then_resolve(self: KafkaIngress, slices: dict[Any, list[Any]]) -> None:
    offsets = {tp: records[-1].offset + 1 for tp, records in slices.items() if tp in self.owned}
    if offsets:
        await self._consumer.commit(offsets)
    await asyncio.sleep(APPLY_DELAY_S)
    await _resolve(self, slices)


def main() -> int:
    KafkaIngress._resolve = _commit_then_resolve  # type: ignore[method-assign]
    from nexus_cli import main as nexus_main

    return nexus_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
