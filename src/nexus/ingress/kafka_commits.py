"""The Kafka ingress's offset commits: a partition's offset moves only past records the gateway has resolved, one
commit at a time, off the lanes' path; none for partitions this consumer no longer owns (why: `nexus.ingress.kafka`)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from aiokafka import TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from nexus.ingress.kafka_lanes import retry_policy
from nexus.retrying import Retrying

if TYPE_CHECKING:
    from nexus.ingress.kafka import KafkaIngress

log = logging.getLogger("nexus.ingress.kafka")  # the ingress's one logger: its parts log under its name


class OffsetCommits:
    """The offsets resolved and not yet committed, and those committed, of one `KafkaIngress`."""

    def __init__(self, ingress: KafkaIngress) -> None:
        self._ingress = ingress
        self.committed: dict[TopicPartition, int] = {}
        """The last offsets this consumer committed, per partition."""
        self.to_commit: dict[TopicPartition, int] = {}
        self.wanted = asyncio.Event()

    def resolved(self, tp: TopicPartition, next_offset: int) -> None:
        """The records of `tp` before `next_offset` are resolved: commit them soon."""
        self.to_commit[tp] = next_offset
        self.wanted.set()

    async def loop(self) -> None:
        """Commit resolved offsets as they appear, one commit at a time, off the workers' path."""
        retrying = Retrying(retry_policy(self._ingress.settings))
        while True:
            await self.wanted.wait()
            self.wanted.clear()
            if await self.commit():
                retrying.reset()
                continue
            self.wanted.set()
            await retrying.wait()

    async def commit(self) -> bool:
        """Commit what is resolved in partitions we own; False if the broker should be asked again."""
        offsets = {tp: off for tp, off in self.to_commit.items() if tp in self._ingress.owned}
        for tp in set(self.to_commit) - set(offsets):
            del self.to_commit[tp]
        if not offsets:
            return True
        try:
            await self._ingress._consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            # The group moved on: whoever owns these partitions now re-reads from the last commit.
            log.info("commit refused after rebalance: %s", exc, extra={"action": "kafka_commit_refused"})
            for tp, off in offsets.items():
                if self.to_commit.get(tp) == off:
                    del self.to_commit[tp]
            return True
        except KafkaError as exc:
            log.warning("commit failed, will retry: %s", exc, extra={"action": "kafka_commit_retry"})
            return False
        for tp, off in offsets.items():
            self.committed[tp] = off
            if self.to_commit.get(tp) == off:
                del self.to_commit[tp]
        return True

    async def before_revocation(self, revoked: set[TopicPartition]) -> None:
        """Commit what is resolved in the revoked partitions, once; their offsets are not committed afterwards."""
        offsets = {tp: off for tp, off in self.to_commit.items() if tp in revoked}
        if offsets:
            try:
                await self._ingress._consumer.commit(offsets)
                self.committed.update(offsets)
            except KafkaError as exc:
                log.info("commit before revocation failed: %s", exc, extra={"action": "kafka_commit_refused"})
        for tp in revoked:
            self.to_commit.pop(tp, None)
