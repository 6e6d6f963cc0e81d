"""`nexus bench`: throughput and latency of every path through the gateway, next to two baselines, in one run.

Scenarios (``--suite``, each on its own orders in one fresh database, at every ``--concurrency``):

- ``raw``: the floor, the same writes without the gateway, one transaction per event;
- ``submit``: `Gateway.submit` with one event per call (and batches of 200 at concurrency <= 4);
- ``http``: one event per request to a `nexus serve` process, from two client processes;
- ``wrk``: the same under wrk (``--connections``, ``--duration`` after ``--warmup``), with CPU seconds per
  1,000 events of the gateway and PostgreSQL and pgbench's per-event floor in the same run (`bench/wrk.py`);
- ``peer``: DBOS Transact on the same PostgreSQL, a durable workflow per order, a step per event;
- ``kafka``: produce -> applied through `KafkaIngress` (needs the broker: make kafka-up);
- ``delivery``: outbox -> webhook through `OutboxDispatcher` to a `nexus sink`;
- ``sagas``: `fulfilment` sagas (four effects each) performed by an executor process against `nexus
  services`, executors woken by NOTIFY and by their poll in the same run (`bench/sagas.py`).

Prints a line per scenario as it finishes, then the table and the ratios gateway/raw and gateway/peer;
writes JSON (``--json``) and a PNG plot (``--plot``). Machines here are noisy: compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib.util
import json
import os
import platform
import shlex
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg

from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.embedded import EmbeddedPostgres
from nexus.store.migrate import apply_migrations
from nexus_lab.bench import external, report, wrk
from nexus_lab.bench.cpu import machine_shares, machine_times
from nexus_lab.bench.scenarios import Row, bench_http, bench_raw, bench_submit, start_server

SUITES = ("raw", "submit", "http", "wrk", "peer", "kafka", "delivery", "validation", "sagas")


def with_database(url: str, name: str) -> str:
    """`url` pointing at database `name` (keeps the query, e.g. pgserver's ``?host=/socket/dir``)."""
    return urllib.parse.urlsplit(url)._replace(path=f"/{name}").geturl()


async def create_database(admin_url: str, name: str, *, migrate: bool) -> str:
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    url = with_database(admin_url, name)
    if migrate:
        conn = await asyncpg.connect(url)
        try:
            await apply_migrations(conn)
            from nexus_lab.chaos.harness import register_lab_key

            await register_lab_key(conn)
        finally:
            await conn.close()
    return url


async def drop_database(admin_url: str, name: str) -> None:
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await conn.close()


@contextlib.contextmanager
def admin_postgres() -> Iterator[str]:
    """The PostgreSQL a standalone benchmark (benchmarks/*.py) runs on: NEXUS_DATABASE_URL (an admin URL
    able to CREATE DATABASE), else a throwaway embedded pgserver for as long as the block runs."""
    url = os.environ.get("NEXUS_DATABASE_URL")
    if url:
        yield url
        return
    embedded, admin = start_embedded()
    try:
        yield admin
    finally:
        embedded.close()


@contextlib.asynccontextmanager
async def scratch_database(admin_url: str, prefix: str, *, pool_size: int) -> AsyncIterator[Database]:
    """A fresh, migrated database named `prefix`_<random>, open, dropped when the block ends."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    url = await create_database(admin_url, name, migrate=True)
    db = await Database(Settings(database_url=url, db_pool_size=pool_size)).open(migrate=False)
    try:
        yield db
    finally:
        await db.close()
        await drop_database(admin_url, name)


def start_embedded() -> tuple[EmbeddedPostgres, str]:
    """A throwaway pgserver, with room for the 64-connection scenarios (its default is 100 connections)."""
    embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="nexus-bench-")), cleanup_mode="delete")
    admin = embedded.start()

    async def allow() -> None:
        conn = await asyncpg.connect(admin)
        try:
            await conn.execute("ALTER SYSTEM SET max_connections = 400")
        finally:
            await conn.close()

    asyncio.run(allow())
    embedded.stop_server()
    embedded.resume()
    return embedded, admin


class Bench:
    """One run of the suite on one PostgreSQL server."""

    def __init__(self, args: argparse.Namespace, admin_url: str, embedded: EmbeddedPostgres | None) -> None:
        self.args = args
        self.admin_url = admin_url
        self.embedded = embedded
        self.rows: list[Row] = []
        self.wrk_rows: list[Row] = []
        self.saga_rows: list[Row] = []
        self.skipped: dict[str, str] = {}

    def add(self, r: Row) -> None:
        self.rows.append(r)
        report.progress(r)

    async def run(self, suites: list[str], url: str) -> None:
        for suite in suites:
            try:
                await getattr(self, f"run_{suite}")(url)
            except external.Skipped as exc:
                self.skip(suite, str(exc))
            except Exception as exc:  # noqa: BLE001 - one broken scenario must not lose the others' figures
                self.skip(suite, f"failed: {type(exc).__name__}: {exc}")

    def skip(self, suite: str, why: str) -> None:
        self.skipped[suite] = why
        print(f"  {suite} suite: {why}", flush=True)

    async def run_raw(self, url: str) -> None:
        for conc in self.args.concurrency:
            self.add(await bench_raw(url, self.args.plans, conc))

    async def run_submit(self, url: str) -> None:
        for conc in self.args.concurrency:
            db = await Database(Settings(database_url=url, db_pool_size=conc + 2)).open(migrate=False)
            try:
                self.add(await bench_submit(db, self.args.plans, conc, 1))
                if conc <= 4:
                    self.add(await bench_submit(db, self.args.plans * 4, conc, 200))
            finally:
                await db.close()

    async def run_validation(self, url: str) -> None:
        from nexus_lab.bench.validation import bench_validation, cel_engines

        db = await Database(Settings(database_url=url, db_pool_size=4)).open(migrate=False)
        try:
            rows, summary = await bench_validation(db, self.args.plans * 4, 2)
            for r in rows:
                self.add(r)
            print(f"validation: {summary}", flush=True)
        finally:
            await db.close()
        print(f"CEL engines (us): {cel_engines()}", flush=True)

    async def run_http(self, url: str) -> None:
        db = await Database(Settings(database_url=url, db_pool_size=2)).open(migrate=False)
        server = None if self.args.http_url else start_server(url, self.args.port)
        base = self.args.http_url or f"http://127.0.0.1:{self.args.port}"
        try:
            for conc in self.args.concurrency:
                pid = server.pid if server else None
                self.add(await bench_http(base, self.args.plans, conc, server_pid=pid, db=db))
        finally:
            if server is not None:
                server.terminate()
                server.wait(10)
            await db.close()

    async def run_wrk(self, url: str) -> None:
        command = shlex.split(self.args.gateway_cmd) if self.args.gateway_cmd else None
        server = None if self.args.http_url else start_server(url, self.args.port, command)
        base = self.args.http_url or f"http://127.0.0.1:{self.args.port}"
        try:
            self.wrk_rows = await wrk.bench_wrk(
                url, base, server.pid if server else None, self.args.connections, self.args.duration,
                self.args.warmup, self.add,
            )  # fmt: skip
        finally:
            if server is not None:
                server.terminate()
                server.wait(10)

    async def run_peer(self, url: str) -> None:
        if importlib.util.find_spec("dbos") is None:
            raise external.Skipped("dbos not installed (pip install -e '.[bench]')")
        name = f"bench_dbos_{uuid.uuid4().hex[:8]}"
        command = [sys.executable, "-m", "nexus_lab.bench.peer_dbos", "--url", url, "--plans", str(self.args.plans),
                   "--system-url", with_database(self.admin_url, name)]  # fmt: skip
        for conc in self.args.concurrency:
            command += ["--concurrency", str(conc)]
        proc = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        assert proc.stdout is not None and proc.stderr is not None
        stderr = asyncio.create_task(proc.stderr.read())
        try:
            async for line in proc.stdout:
                self.add(json.loads(line))
            if await proc.wait() != 0:
                tail = (await stderr).decode(errors="replace").strip().splitlines()[-5:]
                raise RuntimeError(f"peer_dbos exited {proc.returncode}: {' / '.join(tail)}")
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await drop_database(self.admin_url, name)

    async def run_kafka(self, url: str) -> None:
        command = shlex.split(self.args.kafka_consumer_cmd) if self.args.kafka_consumer_cmd else None
        await external.bench_kafka(self.admin_url, self.args.plans * 4, self.args.concurrency, self.args.kafka_poll,
                                   self.add, self.args.kafka_consumers or [1], command)  # fmt: skip

    async def run_delivery(self, url: str) -> None:
        await external.bench_delivery(
            self.admin_url, self.embedded, self.args.plans * 5, self.args.concurrency, self.args.delivery_latency_s,
            self.add, self.args.delivery_processes or [1, 2],
        )  # fmt: skip

    async def run_sagas(self, url: str) -> None:
        from nexus_lab.bench.sagas import MODES, SagaOptions, bench_sagas

        workdir = Path(tempfile.mkdtemp(prefix="nexus-bench-sagas-"))
        modes = [m.strip() for m in self.args.saga_wakeups.split(",") if m.strip() in MODES] or list(MODES)
        options = SagaOptions(
            latency_ms=self.args.saga_latency_ms,
            executors=self.args.saga_executors,
            executor_cmd=tuple(shlex.split(self.args.gateway_cmd)) if self.args.gateway_cmd else None,
        )
        self.saga_rows = await bench_sagas(
            url, self.args.concurrency, self.args.sagas, modes, workdir, self.add, options
        )


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plans", type=int, default=None, help="plans (5 events each) per scenario (default 500)")
    parser.add_argument("--concurrency", type=int, action="append", help="repeatable (default 1, 4, 16, 64)")
    parser.add_argument("--suite", default=",".join(SUITES), help=f"comma list of {','.join(SUITES)}")
    parser.add_argument("--quick", action="store_true", help="small plans, concurrency 1 and 16: under a minute")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/suite.json"))
    parser.add_argument("--plot", default="benchmarks/results/suite.png", help="PNG path ('' for none)")
    parser.add_argument("--port", type=int, default=18080, help="port of the `nexus serve` the bench starts")
    parser.add_argument("--http-url", default=None, help="drive this running server instead (e.g. under py-spy)")
    parser.add_argument("--connections", type=int, action="append", help="wrk: repeatable (default 16, 64)")
    parser.add_argument("--duration", type=float, default=None, help="wrk: measured seconds (default 15)")
    parser.add_argument("--warmup", type=float, default=None, help="wrk: warm-up seconds first (default 3)")
    parser.add_argument(
        "--gateway-cmd",
        default=None,
        help="wrk: start the gateway, sagas: the executor process, with this command (e.g. another checkout's)",
    )
    parser.add_argument("--kafka-poll", type=int, default=500, help="max records per poll (kafka scenario)")
    parser.add_argument("--sagas", type=int, default=None, help="sagas per run of the sagas suite (default 100)")
    parser.add_argument("--saga-latency-ms", type=float, default=0.0, help="sagas: delay of every service answer")
    parser.add_argument(
        "--saga-executors",
        default=None,
        help="sagas: NEXUS_SAGA_EXECUTORS of the executor process (default: the concurrency; 'default': unset)",
    )
    parser.add_argument("--saga-wakeups", default="notify,poll", help="sagas: comma list of notify,poll")
    parser.add_argument("--delivery-latency-s", type=float, default=None, help="delivery latency run (default 5 s)")
    parser.add_argument(
        "--delivery-processes", type=int, action="append", help="dispatcher processes, repeatable (default 1, 2)"
    )
    # The consumer group made of several gateway processes
    parser.add_argument(
        "--kafka-consumers",
        type=int,
        action="append",
        help="gateway processes in the Kafka consumer group, repeatable (default 1)",
    )
    parser.add_argument(
        "--kafka-consumer-cmd",
        default=None,
        help="kafka: run every gateway process of the group with this Python command, e.g. another checkout's: "
        "'env PYTHONPATH=../base/src .venv/bin/python' (latency then: a lane batch from poll to commit)",
    )


def run(args: argparse.Namespace) -> int:
    suites = [s.strip() for s in args.suite.split(",") if s.strip()]
    unknown = sorted(set(suites) - set(SUITES))
    if unknown:
        print(f"nexus bench: unknown suite(s) {unknown}; choose from {','.join(SUITES)}", file=sys.stderr)
        return 2
    _apply_defaults(args)
    started = time.perf_counter()
    load_before = os.getloadavg()
    times_before = machine_times()

    admin_url = os.environ.get("NEXUS_DATABASE_URL")
    embedded = None
    if admin_url is None:
        embedded, admin_url = start_embedded()
    bench = Bench(args, admin_url, embedded)
    name = f"bench_{uuid.uuid4().hex[:8]}"
    print(f"nexus bench: {args.plans} plans ({args.plans * 5} events) per scenario, concurrency "
          f"{args.concurrency}, suites {','.join(suites)}", flush=True)  # fmt: skip
    try:
        url = asyncio.run(create_database(admin_url, name, migrate=True))
        asyncio.run(bench.run(suites, url))
    finally:
        if embedded is not None:
            embedded.close()
    elapsed = time.perf_counter() - started

    meta: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "nexus bench " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else sys.argv[1:]),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "postgres": "embedded pgserver (PostgreSQL 16)" if embedded else "NEXUS_DATABASE_URL",
        "plans": args.plans,
        "concurrency": args.concurrency,
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "cpu_percent": machine_shares(times_before, machine_times()),  # of the whole run, every core
        "seconds": round(elapsed, 1),
    }
    _print_results(args, bench, meta, elapsed)
    return 0


def _apply_defaults(args: argparse.Namespace) -> None:
    """The sizes left unset: a `--quick` run's or a full run's."""
    args.plans = args.plans or (40 if args.quick else 500)
    args.concurrency = args.concurrency or ([1, 16] if args.quick else [1, 4, 16, 64])
    args.sagas = args.sagas or (20 if args.quick else 100)
    args.delivery_latency_s = args.delivery_latency_s or (1.0 if args.quick else 5.0)
    args.connections = args.connections or ([16] if args.quick else [16, 64])
    args.duration = args.duration if args.duration is not None else (3.0 if args.quick else 15.0)
    args.warmup = args.warmup if args.warmup is not None else (1.0 if args.quick else 3.0)


def _print_results(args: argparse.Namespace, bench: Bench, meta: dict[str, Any], elapsed: float) -> None:
    """The tables of the run, then its JSON (and plot) written, and the machine's load meanwhile."""
    print()
    print(report.table(bench.rows))
    entries = report.ratios(bench.rows)
    if entries:
        print("\nevents/s ratios, same concurrency, same run:\n")
        print(report.ratio_table(entries))
    if bench.wrk_rows:
        print()
        print(wrk.wrk_table(bench.wrk_rows))
    if bench.saga_rows:
        from nexus_lab.bench.sagas import sagas_table

        print("\nsagas, same run (wake-ups alternating):\n")
        print(sagas_table(bench.saga_rows))
    for suite, why in bench.skipped.items():
        print(f"\n{suite} suite: {why}")
    report.write_json(args.json, meta, bench.rows, bench.skipped)
    print(f"\nwrote {args.json}", end="")
    if args.plot and bench.rows:
        report.plot(Path(args.plot), bench.rows, f"nexus bench, {meta['machine']}, {meta['date'][:10]}")
        print(f" and {args.plot}", end="")
    shares = meta["cpu_percent"]
    print(
        f" in {elapsed:.0f} s (load average {meta['load_avg_before'][0]} -> {meta['load_avg_after'][0]}; machine CPU"
        f" {shares['busy']} % busy, {shares['idle']} % idle, {shares['steal']} % stolen by the host)"
    )
