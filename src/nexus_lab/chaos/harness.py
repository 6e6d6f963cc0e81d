"""The real processes a chaos scenario runs on, and the hands that hurt them.

`ChaosSession` owns one embedded PostgreSQL server for a whole `nexus chaos` run (each scenario gets a
fresh database on it) and can stop and resume it as an outage would. `Stack` is one scenario's processes:
a `nexus sink`, one or more `nexus serve` gateways (HTTP, optionally `--kafka`) and optional
`--dispatcher-only` dispatchers, each in its own process group so SIGKILL takes it whole. The command that
starts a gateway or dispatcher can be substituted (`gateway_cmd`): the tests use that to run deliberately
broken variants; it is test plumbing, not a production switch.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import os
import secrets
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import asyncpg

from nexus.delivery.signing import generate_secret
from nexus.settings import Settings, env_name
from nexus.store.database import Database
from nexus.store.embedded import EmbeddedPostgres
from nexus_lab.procs import NEXUS_CMD, Proc, free_port, kafka_script, wait_ready

if TYPE_CHECKING:
    from nexus_lab.balancer import Balancer
    from nexus_lab.chaos.failover import ReplicatedDatabase
    from nexus_lab.chaos.kafka_cluster import KafkaCluster

__all__ = ["ChaosSession", "Stack", "StackSpec"]


# Every interval shrunk so a scenario settles in seconds; the values a scenario may override.
FAST_ENV: dict[str, str] = {
    "NEXUS_RETRY_BASE_MS": "20",
    "NEXUS_RETRY_MAX_MS": "500",
    "NEXUS_MAX_ATTEMPTS": "30",
    "NEXUS_LEASE_S": "2",
    "NEXUS_WEBHOOK_TIMEOUT_S": "0.8",
    "NEXUS_BREAKER_COOLDOWN_S": "1",
    "NEXUS_DISPATCHER_POLL_S": "0.05",
    "NEXUS_BUFFER_SWEEP_INTERVAL_S": "0.5",
    "NEXUS_WEBHOOK_WORKERS": "8",
    "NEXUS_DB_POOL_SIZE": "4",
    "NEXUS_BATCH_WORKERS": "2",
    "NEXUS_LOG_LEVEL": "WARNING",
    "NEXUS_DRAIN_GRACE_S": "0.2",  # no balancer watches these gateways' /readyz (instance-kill sets its own)
}


def clean_env() -> dict[str, str]:
    """This process's environment without any NEXUS_*/SIM_* variable: children get only what we set."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "SIM_"))}


async def register_lab_key(db: Any) -> str:
    """Make this process's API key (NEXUS_API_KEY, generated if unset) valid in a database the lab created
    (`db`: a Database or an asyncpg connection): every role, tenant "default". Children inherit it."""
    from nexus.auth.keys import generate_key, hash_key
    from nexus.store.queries import query
    from nexus_client import ClientConfig

    key = ClientConfig.from_env().api_key
    if key is None:
        key = os.environ["NEXUS_API_KEY"] = generate_key()
    roles = ["admin", "agent", "approver", "operator"]
    await db.execute(query("auth.sql", "insert_key"), "lab", "default", roles, hash_key(key))
    return key


async def wait_for_log(proc: Proc, text: str, timeout_s: float = 60.0) -> None:
    """Wait until the process, since its last start, logged `text`."""
    deadline = time.monotonic() + timeout_s
    while text not in proc.log_since_start():
        if not proc.alive:
            raise RuntimeError(f"{proc.name} exited early:\n{proc.tail()}")
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{proc.name} did not log {text!r} within {timeout_s:g}s:\n{proc.tail()}")
        await asyncio.sleep(0.1)


class ChaosSession:
    """One PostgreSQL server for a chaos run, a scratch directory, and the Kafka broker's address."""

    def __init__(self, *, kafka_bootstrap: str | None = None, keep: bool = False) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="nexus-chaos-"))
        self.keep = keep
        self.kafka_bootstrap = kafka_bootstrap or os.environ.get(
            "NEXUS_KAFKA_BOOTSTRAP", f"127.0.0.1:{os.environ.get('NEXUS_KAFKA_PORT', '9092')}"
        )
        self.pg = EmbeddedPostgres(self.tmp / "pg", cleanup_mode="stop" if keep else "delete")
        self.admin_url = ""
        self.pg_restarts = 0
        self.replicas: dict[str, ReplicatedDatabase] = {}
        """Scenarios' own primaries with a standby (`StackSpec.replicated`), by their multi-host URL."""
        self.kafka_clusters: dict[str, KafkaCluster] = {}
        """Scenarios' own three-broker clusters (`StackSpec.kafka_brokers`), by their bootstrap."""

    def start(self) -> ChaosSession:
        self.admin_url = self.pg.start()
        return self

    async def new_database(self, label: str) -> str:
        """A fresh, migrated database for one scenario; returns its URL."""
        name = f"chaos_{label.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        url = self.pg.url(name)
        db = await Database(Settings(database_url=url)).open(migrate=True)
        try:
            await register_lab_key(db)
        finally:
            await db.close()
        return url

    async def new_replicated_database(self, label: str, *, synchronous: bool = True) -> str:
        """A primary of its own with a standby (synchronous unless said) for one scenario; returns their
        multi-host URL."""
        from nexus_lab.chaos.failover import ReplicatedDatabase

        replica = ReplicatedDatabase(self.tmp / f"replicated-{label}", clean_env(), synchronous=synchronous)
        try:
            url = await replica.start(register_lab_key)
        except BaseException:
            replica.close()
            raise
        self.replicas[url] = replica
        return url

    async def new_kafka_cluster(self, label: str, *, brokers: int = 3) -> str:
        """A Kafka cluster of its own (three brokers, or `brokers`) for one scenario (a scratch home, free ports);
        returns its bootstrap. Stopped by `close`."""
        from nexus_lab.chaos.kafka_cluster import KafkaCluster

        cluster = KafkaCluster(self.tmp / f"kafka-{label}", brokers=brokers)
        self.kafka_clusters[cluster.bootstrap] = cluster
        await cluster.up()
        return cluster.bootstrap

    async def stop_pg(self) -> None:
        await asyncio.to_thread(self.pg.stop_server)

    async def resume_pg(self) -> None:
        await asyncio.to_thread(self.pg.resume)
        self.pg_restarts += 1

    async def restart_kafka(self) -> None:
        """`scripts/kafka.sh restart` on the session's broker (only that one: a cluster of the session's own, see
        `new_kafka_cluster`, or the broker on its port); returns once it answers again."""
        own = self.kafka_clusters.get(self.kafka_bootstrap)
        if own is not None:
            await own.restart()
            return
        port = self.kafka_bootstrap.rsplit(":", 1)[-1]
        env = {**os.environ, "NEXUS_KAFKA_PORT": port}
        await asyncio.to_thread(kafka_script, "restart", env, 180)

    def close(self) -> None:
        for replica in self.replicas.values():
            replica.close()
        for cluster in self.kafka_clusters.values():
            cluster.close()
        self.pg.close()
        if not self.keep:
            import shutil

            shutil.rmtree(self.tmp, ignore_errors=True)


@dataclasses.dataclass
class StackSpec:
    """What processes one scenario runs."""

    gateways: int = 1
    dispatchers: int = 0
    """Separate `--dispatcher-only` processes; when > 0 the gateways do not dispatch."""
    kafka: bool = False
    """Gateways also consume the scenario's topic (`--kafka`); they log at INFO to say when they own partitions."""
    sink_args: tuple[str, ...] = ()
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    replicated: bool = False
    """A database of its own on a primary with a synchronous standby (`nexus_lab.chaos.failover`)."""
    balancer: bool = False
    """Two gateway instances, each with a data directory of its own and one shared audit signing key,
    behind HAProxy (deploy/haproxy.cfg): the agent and the MCP agents reach them only through it."""
    kafka_brokers: int = 1
    """3: a Kafka cluster of its own (`nexus_lab.chaos.kafka_cluster`) instead of the session's broker."""


class Stack:
    """One scenario's processes against its own database: sink, gateways, dispatchers."""

    def __init__(
        self,
        session: ChaosSession,
        name: str,
        spec: StackSpec,
        database_url: str,
        *,
        gateway_cmd: Sequence[str] | None = None,
        kafka_bootstrap: str | None = None,
    ) -> None:
        self.session = session
        self.kafka_bootstrap = kafka_bootstrap or session.kafka_bootstrap
        self.name = name
        self.spec = spec
        self.database_url = database_url
        self.gateway_cmd = list(gateway_cmd or NEXUS_CMD)
        self.dir = session.tmp / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sink_log = self.dir / "sink.log"
        self.secret = generate_secret()
        self.sink_port = free_port()
        tag = uuid.uuid4().hex[:10]
        self.kafka_topic = f"nexus.chaos.{tag}"
        self.kafka_dlq_topic = f"nexus.chaos.{tag}.dlq"
        self.kafka_group = f"nexus-chaos-{tag}"
        self.sink: Proc | None = None
        self.gateways: list[Proc] = []
        self.gateway_urls: list[str] = []
        self.dispatchers: list[Proc] = []
        self.balancer: Balancer | None = None
        self.signing_key = base64.b64encode(secrets.token_bytes(32)).decode()  # the instances' shared one
        self._out: IO[str] | None = None

    def _own(self) -> dict[str, str]:
        """The settings that make the stack its own: its database, broker, topics and consumer group."""
        return {
            "database_url": self.database_url,
            "kafka_bootstrap": self.kafka_bootstrap,
            "kafka_topic": self.kafka_topic,
            "kafka_dlq_topic": self.kafka_dlq_topic,
            "kafka_group": self.kafka_group,
        }

    def settings(self) -> Settings:
        return Settings.model_validate(self._own())

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **clean_env(),
            **FAST_ENV,
            **{env_name(field): value for field, value in self._own().items()},
            "NEXUS_WEBHOOK_URL": f"http://127.0.0.1:{self.sink_port}/hook",
            "NEXUS_WEBHOOK_SECRET": self.secret,
            **({"NEXUS_LOG_LEVEL": "INFO"} if self.spec.kafka else {}),
            **self.spec.env,
            **extra,
        }

    async def start(self) -> None:
        if self.spec.kafka:
            from nexus_lab.kafka_admin import ensure_topics

            topics = [self.kafka_topic, self.kafka_dlq_topic]
            await ensure_topics(self.kafka_bootstrap, topics, partitions=4, replication=self.spec.kafka_brokers)
        sink_cmd = [*NEXUS_CMD, "sink", "--port", str(self.sink_port), "--log", str(self.sink_log)]
        sink_cmd += ["--secret", self.secret, *self.spec.sink_args]
        self.sink = Proc("sink", sink_cmd, clean_env(), self.dir / "sink.out").start()
        serve_flags = ["--kafka"] if self.spec.kafka else []
        if self.spec.dispatchers:
            serve_flags.append("--no-dispatcher")
        for i in range(self.spec.gateways):
            port = free_port()
            cmd = [*self.gateway_cmd, "serve", *serve_flags]
            env = self.env(NEXUS_HTTP_PORT=str(port), **self._instance_env(i))
            self.gateways.append(Proc(f"gateway-{i}", cmd, env, self.dir / f"gateway-{i}.log").start())
            self.gateway_urls.append(f"http://127.0.0.1:{port}")
        for i in range(self.spec.dispatchers):
            cmd = [*self.gateway_cmd, "serve", "--dispatcher-only"]
            self.dispatchers.append(Proc(f"dispatcher-{i}", cmd, self.env(), self.dir / f"dispatcher-{i}.log").start())
        await wait_ready(self.sink, f"http://127.0.0.1:{self.sink_port}/healthz")
        await asyncio.gather(
            *(wait_ready(g, url + "/readyz") for g, url in zip(self.gateways, self.gateway_urls, strict=True)),
            *(wait_ready(d, None) for d in self.dispatchers),
        )
        if self.spec.balancer:
            from nexus_lab.balancer import Balancer

            backends = [url.removeprefix("http://") for url in self.gateway_urls]
            self.balancer = await Balancer(backends, self.dir / "haproxy.log").start()
        if self.spec.kafka:
            # The consumers must own their partitions before the agent produces, or a fault injected in
            # the first seconds would hit a consumer that has not read anything yet.
            await asyncio.gather(*(wait_for_log(g, "partitions assigned") for g in self.gateways))

    async def restart(self, proc: Proc, *, attempts: int = 10) -> None:
        """Start a killed process again and wait until it serves.

        A gateway cannot start while PostgreSQL is down (another fault of the same scenario may be
        under way): it exits, and is started again a moment later, as a supervisor would.
        """
        url = None
        if proc in self.gateways:
            url = self.gateway_urls[self.gateways.index(proc)] + "/readyz"
        elif proc is self.sink:
            url = f"http://127.0.0.1:{self.sink_port}/healthz"
        for attempt in range(1, attempts + 1):
            proc.start()
            try:
                await wait_ready(proc, url)
            except RuntimeError:
                if attempt == attempts:
                    raise
                await asyncio.sleep(1.0)
            else:
                return

    @property
    def client_urls(self) -> list[str]:
        """Where the agents send: the balancer when there is one, else the gateways themselves."""
        return [self.balancer.url] if self.balancer is not None else self.gateway_urls

    def _instance_env(self, index: int) -> dict[str, str]:
        """Behind a balancer a gateway stands for a machine: no local state shared with the others."""
        if not self.spec.balancer:
            return {}
        data = self.dir / f"instance-{index}"
        return {"NEXUS_DATA_DIR": str(data), "NEXUS_AUDIT_SIGNING_KEY": self.signing_key}

    def processes(self) -> list[Proc]:
        balancer = [self.balancer.proc] if self.balancer is not None else []
        return [*balancer, *self.dispatchers, *self.gateways, *([self.sink] if self.sink else [])]

    async def close(self) -> None:
        # All at once: each stop (SIGTERM, SIGKILL after 10 s) waits for its own process only, so the stack
        # is down in the time of its slowest process rather than the sum of them (a hanging sink's alone ~1 s).
        await asyncio.gather(*(asyncio.to_thread(proc.stop) for proc in self.processes()))
        if self.spec.kafka:
            from nexus_lab.kafka_admin import delete_topics

            with contextlib.suppress(Exception):
                await delete_topics(self.kafka_bootstrap, [self.kafka_topic, self.kafka_dlq_topic])

    def logs_tail(self) -> str:
        return "\n".join(f"--- {p.name} ({p.log_path})\n{p.tail(1500)}" for p in self.processes())
