"""Losing a Kafka machine: a scenario's own three-broker cluster, and the fault that SIGKILLs one broker.

`KafkaCluster` runs `scripts/kafka.sh up` with `NEXUS_KAFKA_BROKERS=3` in a scratch `NEXUS_KAFKA_HOME` on ports
of its own (never the broker the tests share), sharing the jars of the repository's cache. Every topic has
three replicas and `min.insync.replicas` 2, so an `acks=all` write the agent was told succeeded is on two
machines. `BrokerKill` SIGKILLs one broker while the agent produces and the gateways consume (and relay
their decisions), starts it again with the same `kafka.sh up`, and then waits for the consumer group's lag
to come back to zero: only then does it count its proof.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from nexus_lab.procs import REPO_ROOT, kafka_script

if TYPE_CHECKING:
    from nexus_lab.chaos.faults import FaultContext

Range = tuple[float, float]

BROKERS = 3
LAG_ZERO = "consumer lag back to zero after the kill"
"""The proof of `broker-kill`: counted only once a broker was killed and restarted and the lag reached 0."""


def _free_base(first: int = 20_000, last: int = 32_000) -> int:
    """A base port whose nine ports (up to three brokers, controllers, SASL_SSL listeners) are free, below the
    ephemeral range (a port there can be taken by any client's outgoing connection between check and bind)."""
    for base in range(first + (os.getpid() % 500) * 20, last, 20):
        try:
            with contextlib.ExitStack() as stack:
                for port in range(base, base + 3 * BROKERS):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free ports for a Kafka cluster")


def _shared_home() -> Path:
    """The home of the broker the tests share (`make kafka-up`): its jars are reused, read only."""
    return Path(os.environ.get("NEXUS_KAFKA_HOME", str(REPO_ROOT / ".cache" / "kafka")))


class KafkaCluster:
    """Three KRaft brokers (or one, `brokers`) in `directory` for one scenario or bench, started and stopped with
    `scripts/kafka.sh`."""

    def __init__(self, directory: Path, topics: tuple[str, ...] = ("nexus.decisions",), brokers: int = BROKERS) -> None:
        self.directory = directory
        self.port = _free_base()
        self.bootstrap = ",".join(f"127.0.0.1:{self.port + 2 * n}" for n in range(brokers))
        self.env = {
            **os.environ,
            "NEXUS_KAFKA_BROKERS": str(brokers),
            "NEXUS_KAFKA_HOME": str(directory),
            "NEXUS_KAFKA_PORT": str(self.port),
            "NEXUS_KAFKA_LIBS": os.environ.get("NEXUS_KAFKA_LIBS", str(_shared_home() / "libs")),
            "NEXUS_KAFKA_TOPICS": " ".join(topics),
            # three JVMs on a shared machine: small heaps, and the quick compiler only (they start in half the CPU)
            "NEXUS_KAFKA_HEAP_OPTS": "-Xms128m -Xmx384m",
            "NEXUS_KAFKA_JVM_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
            "NEXUS_KAFKA_START_TIMEOUT": "120",
            "NEXUS_KAFKA_STOP_TIMEOUT": "10",
        }
        self.started = False

    def _script(self, command: str) -> None:
        kafka_script(command, self.env, 240, f" ({self.bootstrap})")

    async def up(self) -> None:
        """Start every broker that is not running (all three the first time) and wait until they answer."""
        self.started = True
        await asyncio.to_thread(self._script, "up")

    async def restart(self) -> None:
        """`kafka.sh restart`: every broker of this cluster stopped and started again (data kept), and only
        them; returns once they answer."""
        self.started = True
        await asyncio.to_thread(self._script, "restart")

    def kill(self, broker: int) -> int:
        """SIGKILL broker `broker` (0-based); returns its pid."""
        pid = int((self.directory / f"node-{self.port + 2 * broker}" / "kafka.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        return pid

    def close(self) -> None:
        if self.started:
            with contextlib.suppress(Exception):
                self._script("down")


async def consumer_lag(bootstrap: str, group: str, topic: str) -> int:
    """Records of `topic` not yet committed by `group`: the sum over partitions of end offset - committed."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await consumer.start()
    try:
        await admin.start()
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        ends = await consumer.end_offsets(partitions)
        committed = await admin.list_consumer_group_offsets(group, partitions=partitions)
        return sum(max(0, end - (committed[tp].offset if tp in committed else 0)) for tp, end in ends.items())
    finally:
        await admin.close()
        await consumer.stop()


WRITABLE = "partitions writable with a broker down"
PARTITIONS = "partitions"


async def writable_partitions(bootstrap: str, topics: list[str], dead: int) -> tuple[int, int]:
    """(partitions of `topics` an acks=all write can reach without broker node `dead`, all their partitions):
    led by another broker, with `dead` out of the in-sync replicas (an acks=all write waits for every one of
    them) and at least two left (min.insync.replicas)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        partitions = [p for t in await admin.describe_topics(topics) for p in t["partitions"]]
    finally:
        await admin.close()
    ok = [p for p in partitions if p["leader"] not in (-1, dead) and dead not in p["isr"] and len(p["isr"]) >= 2]
    return len(ok), len(partitions)


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerKill:
    """SIGKILL one broker of the scenario's cluster while plans run, start it again after `down_s`, then wait
    (up to `lag_timeout_s` once the agent is done) for the consumer group's lag to reach zero."""

    first_s: Range = (1.0, 2.0)
    down_s: Range = (12.0, 15.0)
    """Longer than `broker.session.timeout.ms` (9 s): the controller fences the dead broker only then, moving
    its leaderships and dropping it from the in-sync replicas; until then writes to its partitions wait."""
    lag_timeout_s: float = 90.0

    async def run(self, ctx: FaultContext) -> None:
        cluster = ctx.session.kafka_clusters[ctx.stack.kafka_bootstrap]
        victim, wait_s, down_s = (
            ctx.rng.randrange(BROKERS),
            ctx.rng.uniform(*self.first_s),
            ctx.rng.uniform(*self.down_s),
        )
        await asyncio.sleep(wait_s)
        pid = cluster.kill(victim)
        ctx.count("broker SIGKILLed")
        ctx.progress(f"broker {victim + 1} (pid {pid}) SIGKILLed at {ctx.elapsed():.1f}s")
        down_until = asyncio.get_running_loop().time() + down_s
        await self._writable(ctx, victim + 1, down_s)
        await asyncio.sleep(max(0.0, down_until - asyncio.get_running_loop().time()))
        await cluster.up()
        ctx.count("broker restarted")
        ctx.progress(f"broker {victim + 1} answers again at {ctx.elapsed():.1f}s")
        await ctx.agent_done.wait()
        lag = -1
        for _ in range(int(self.lag_timeout_s * 2)):
            with contextlib.suppress(Exception):  # a metadata refresh racing the restart: asked again
                lag = await consumer_lag(ctx.stack.kafka_bootstrap, ctx.stack.kafka_group, ctx.stack.kafka_topic)
            if lag == 0:
                ctx.count(LAG_ZERO)
                ctx.progress(f"consumer lag 0 at {ctx.elapsed():.1f}s")
                return
            await asyncio.sleep(0.5)
        ctx.progress(f"consumer lag still {lag} after {self.lag_timeout_s:g}s")

    @staticmethod
    async def _writable(ctx: FaultContext, dead: int, within_s: float) -> None:
        """Count the partitions of the scenario's and the decisions topic that take writes while `dead` is down
        (its partitions' leadership moves within seconds); the run's proof that ingress did not stop."""
        topics = [ctx.stack.kafka_topic, "nexus.decisions"]
        writable = total = 0
        for _ in range(int(within_s * 4)):
            with contextlib.suppress(Exception):  # the cluster's metadata moving under the question: asked again
                writable, total = await writable_partitions(ctx.stack.kafka_bootstrap, topics, dead)
            if total and writable == total:
                break
            await asyncio.sleep(0.25)
        ctx.count(WRITABLE, writable)
        ctx.count(PARTITIONS, total)
        ctx.progress(f"{writable} of {total} partitions writable with broker {dead} down at {ctx.elapsed():.1f}s")
