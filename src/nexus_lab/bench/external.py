"""The Kafka-ingress and delivery scenarios, borrowed from `benchmarks/kafka_ingress.py` and
`benchmarks/delivery.py` (their own scripts, with their own notes) rather than written twice.

Those scripts live beside the package in the repository, so they are loaded by path; when a script, the
module it measures or the Kafka broker is missing, the scenario is skipped with a note saying which.

- kafka: `kafka_run` (produce -> applied, end to end) with `concurrency` partitions, the producer in a
  process of its own, keying each step by its order_id as agents do; CPU seconds per 1,000 events of the
  consumer, PostgreSQL and the producer; with `--kafka-consumers N` (N > 1) or `--kafka-consumer-cmd` the
  consumer group is N gateway processes of their own (`kafka_group.py`, `kafka_consumer.py`), their CPU
  summed, and latency is a lane batch's from the poll that fetched its oldest record to the commit that
  covers it (`submit_p50_ms`/`submit_p99_ms`: its `Gateway.submit` alone); with one consumer in this
  process, latency is that of one `Gateway.submit` of a lane's batch;
- delivery: `run_one` with `concurrency` webhook workers in each of 1 and 2 `nexus serve --dispatcher-only`
  processes delivering to the bench's receiver (`bench/receiver.py`); throughput from the span of
  `delivered_at`; latency from `outbox.created_at` to `delivered_at` at a steady offered load of half
  that throughput; CPU seconds per 1,000 deliveries of the dispatchers, the receiver and PostgreSQL.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import subprocess
import sys
import types
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nexus.settings import Settings
from nexus.store.embedded import EmbeddedPostgres
from nexus_lab.bench.cpu import ProducerProcess
from nexus_lab.bench.kafka_group import TimedGateway
from nexus_lab.bench.scenarios import Row, row

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


class Skipped(Exception):
    """A scenario that cannot run here; the message says why."""


def load(script: str, needs: str) -> types.ModuleType:
    """Import `benchmarks/<script>.py`, or say why not."""
    path = BENCHMARKS / f"{script}.py"
    if not path.exists():
        raise Skipped(f"{path} not found")
    try:
        importlib.import_module(needs)
    except ImportError as exc:
        raise Skipped(f"{needs} not available ({exc})") from exc
    spec = importlib.util.spec_from_file_location(f"nexus_bench_{script}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise Skipped(f"{path.name} does not import ({type(exc).__name__}: {exc})") from exc
    return module


def broker_up(bootstrap: str) -> bool:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=2):
            return True
    except OSError:
        return False


async def bench_kafka(
    admin_url: str, plans: int, concurrencies: Sequence[int], poll: int, on_row: Callable[[Row], None],
    consumers: Sequence[int] = (1,), consumer_cmd: Sequence[str] | None = None,
) -> list[Row]:  # fmt: skip
    """Each partition count (`concurrencies`) with each number of gateway processes in the consumer group
    (`consumers`; 1 is this process, more are processes of their own, as `nexus serve --kafka` would be;
    with `consumer_cmd`, every count is processes of their own started with that Python command)."""
    module: Any = load("kafka_ingress", "nexus.ingress.kafka")
    settings = Settings.from_env(db_pool_size=max(concurrencies) + 4)
    if not broker_up(settings.kafka_bootstrap):
        raise Skipped(f"no Kafka broker at {settings.kafka_bootstrap} (make kafka-up)")
    # A fresh topic answers NotLeaderForPartition until its leaders are elected; aiokafka retries and
    # logs each retry, which would bury the progress lines.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    # The script's knobs are module constants: partitions, and the Gateway its ingress is built with.
    module.Gateway = TimedGateway
    dbs = module.Databases(admin_url)
    rows: list[Row] = []
    async with ProducerProcess() as producer:
        for conc in concurrencies:
            for procs in consumers:
                module.PARTITIONS = conc
                TimedGateway.latencies = []
                records = module.plan_bytes(plans, f"k{conc}-{uuid.uuid4().hex[:6]}")
                if procs == 1 and consumer_cmd is None:
                    result: dict[str, Any] = await module.kafka_run(
                        settings, dbs, records, prefill=False, poll=poll, producer=producer
                    )
                    latencies = TimedGateway.latencies
                else:
                    result = await module.kafka_run_processes(
                        settings, dbs, records, poll=poll, producer=producer, consumers=procs,
                        command=list(consumer_cmd) if consumer_cmd else None,
                    )  # fmt: skip
                    latencies = result["latencies"]
                out = _kafka_row(result, len(records), conc, procs, consumer_cmd is not None, latencies)
                rows.append(out)
                on_row(out)
    return rows


def _kafka_row(
    result: dict[str, Any], events: int, conc: int, procs: int, own_processes: bool, latencies: list[float]
) -> Row:
    """One run's row: its latencies, the submits' if measured, the time split and CPU per 1,000 events."""
    name = "Kafka produce -> applied (lane batch)"
    if procs > 1 or own_processes:
        name = "Kafka produce -> applied (lane batch, poll to commit)"
    out = row(
        "kafka",
        name if procs == 1 else f"{name}, {procs} gateway processes",
        conc,
        events,
        result["seconds"],
        latencies,
        "batch",
    )
    if "submit_latencies" in result:
        submits = row("kafka", name, conc, events, result["seconds"], result["submit_latencies"])
        out["submit_p50_ms"], out["submit_p99_ms"] = submits["p50_ms"], submits["p99_ms"]
    if result.get("split"):
        out["split"] = result["split"]
    # CPU seconds per 1,000 events; the producer (the agents) runs in a process of its own
    per_k = 1000 / events
    out["cpu_s_per_1000"] = {
        "gateway": round(result["cpu_consumer_s"] * per_k, 3),
        "postgres": round(result["cpu_postgres_s"] * per_k, 3),
        "producer": round(result["cpu_producer_s"] * per_k, 3),
    }
    return out


def start_receiver(port: int, processes: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`bench/receiver.py` on `port` in `processes` processes (its pid is the parent of the others)."""
    command = [sys.executable, "-m", "nexus_lab.bench.receiver", "--port", str(port), "--processes", str(processes)]
    return subprocess.Popen(command, env=env)  # noqa: S603 - our own receiver


async def bench_delivery(
    admin_url: str, embedded: EmbeddedPostgres | None, notifications: int, concurrencies: Sequence[int],
    latency_s: float, on_row: Callable[[Row], None], processes: Sequence[int] = (1,), receiver_processes: int = 1,
) -> list[Row]:  # fmt: skip
    """Each worker count with 1 and then 2 (`processes`) dispatcher processes, to the bench's own receiver
    (`bench/receiver.py`, `receiver_processes` of it; its ceiling is far above these rates)."""
    module: Any = load("delivery", "nexus.delivery.dispatcher")
    secret = module.generate_secret()
    port = module.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    receiver = start_receiver(port, receiver_processes, env)
    rows: list[Row] = []
    try:
        module.wait_http(f"http://127.0.0.1:{port}/healthz", timeout=120)
        for conc in concurrencies:
            for procs in processes:
                r: dict[str, Any] = await module.run_one(
                    admin_url, embedded, conc, notifications, f"http://127.0.0.1:{port}", secret, latency_s, procs,
                    [receiver.pid],
                )  # fmt: skip
                out = row("delivery", f"delivery outbox -> webhook, {procs} dispatcher process(es)", conc,
                          notifications, notifications / r["rate"], [], "notification")  # fmt: skip
                out.update(
                    p50_ms=round(float(r["p50"]), 2),
                    p99_ms=round(float(r["p99"]), 2),
                    offered_per_s=round(r["offered"]),
                    cpu_s_per_1000=r["cpu_s_per_1000"],
                )
                rows.append(out)
                on_row(out)
    finally:
        receiver.terminate()
        try:
            receiver.wait(10)
        except subprocess.TimeoutExpired:
            receiver.kill()
    return rows
