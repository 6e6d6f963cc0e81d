"""`nexus ...` whose Kafka consumer commits each polled slice's offsets before the gateway applies it.

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


async def _commit_then_resolve(self: KafkaIngress, tp: Any, records: list[Any]) -> None:
    if tp in self.owned:
        await self._consumer.commit({tp: records[-1].offset + 1})
    await asyncio.sleep(APPLY_DELAY_S)
    await _resolve(self, tp, records)


def main() -> int:
    KafkaIngress._resolve = _commit_then_resolve  # type: ignore[method-assign]
    from nexus_cli import main as nexus_main

    return nexus_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
