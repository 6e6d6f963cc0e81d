"""One frozen `Settings`, built at the edge from `NEXUS_*` variables and flags, passed down.

Nothing deeper than the CLI and app wiring reads `os.environ`. Every interval and timeout is a setting so
tests can shrink it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nexus.errors import ConfigurationError

_ENV_NAMES: dict[str, str] = {
    "database_url": "NEXUS_DATABASE_URL",
    "data_dir": "NEXUS_DATA_DIR",
    "http_host": "NEXUS_HTTP_HOST",
    "http_port": "NEXUS_HTTP_PORT",
    "kafka_bootstrap": "NEXUS_KAFKA_BOOTSTRAP",
    "kafka_topic": "NEXUS_KAFKA_TOPIC",
    "kafka_dlq_topic": "NEXUS_KAFKA_DLQ_TOPIC",
    "kafka_group": "NEXUS_KAFKA_GROUP",
    "kafka_max_poll_records": "NEXUS_KAFKA_MAX_POLL_RECORDS",
    "kafka_poll_timeout_ms": "NEXUS_KAFKA_POLL_TIMEOUT_MS",
    "kafka_revoke_wait_s": "NEXUS_KAFKA_REVOKE_WAIT_S",
    "kafka_session_timeout_ms": "NEXUS_KAFKA_SESSION_TIMEOUT_MS",
    "kafka_heartbeat_interval_ms": "NEXUS_KAFKA_HEARTBEAT_INTERVAL_MS",
    "kafka_max_poll_interval_ms": "NEXUS_KAFKA_MAX_POLL_INTERVAL_MS",
    "buffer_timeout_s": "NEXUS_BUFFER_TIMEOUT_S",
    "buffer_sweep_interval_s": "NEXUS_BUFFER_SWEEP_INTERVAL_S",
    "webhook_url": "NEXUS_WEBHOOK_URL",
    "webhook_secret": "NEXUS_WEBHOOK_SECRET",
    "webhook_workers": "NEXUS_WEBHOOK_WORKERS",
    "webhook_timeout_s": "NEXUS_WEBHOOK_TIMEOUT_S",
    "retry_base_ms": "NEXUS_RETRY_BASE_MS",
    "retry_max_ms": "NEXUS_RETRY_MAX_MS",
    "max_attempts": "NEXUS_MAX_ATTEMPTS",
    "lease_s": "NEXUS_LEASE_S",
    "breaker_threshold": "NEXUS_BREAKER_THRESHOLD",
    "breaker_cooldown_s": "NEXUS_BREAKER_COOLDOWN_S",
    "dispatcher_poll_s": "NEXUS_DISPATCHER_POLL_S",
    "batch_max_events": "NEXUS_BATCH_MAX_EVENTS",
    "batch_window_ms": "NEXUS_BATCH_WINDOW_MS",
    "batch_workers": "NEXUS_BATCH_WORKERS",
    "db_pool_size": "NEXUS_DB_POOL_SIZE",
    "llm_base_url": "NEXUS_LLM_BASE_URL",
    "llm_model": "NEXUS_LLM_MODEL",
    "llm_api_key": "NEXUS_LLM_API_KEY",
    "log_level": "NEXUS_LOG_LEVEL",
    # issue 12: process definitions and per-tenant limits
    "process_dir": "NEXUS_PROCESS_DIR",
    "default_max_order_amount": "NEXUS_DEFAULT_MAX_ORDER_AMOUNT",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """Configuration of one gateway process."""

    database_url: str | None = None
    """PostgreSQL URL; None starts the embedded server under `data_dir`."""
    data_dir: Path = Path(".nexus")
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    kafka_bootstrap: str = "127.0.0.1:9092"
    kafka_topic: str = "nexus.events"
    kafka_dlq_topic: str = "nexus.events.dlq"
    kafka_group: str = "nexus-gateway"
    kafka_max_poll_records: int = 2000
    kafka_poll_timeout_ms: int = 200
    kafka_revoke_wait_s: float = 10.0
    """How long in-flight work of revoked partitions may finish (and be committed) at a rebalance."""
    kafka_session_timeout_ms: int = 10_000
    kafka_heartbeat_interval_ms: int = 3_000
    kafka_max_poll_interval_ms: int = 300_000
    buffer_timeout_s: float = 3600.0
    buffer_sweep_interval_s: float = 5.0
    webhook_url: str | None = None
    webhook_secret: str | None = None
    webhook_workers: int = 16
    webhook_timeout_s: float = 10.0
    retry_base_ms: int = 500
    retry_max_ms: int = 300_000
    max_attempts: int = 10
    lease_s: float = 60.0
    breaker_threshold: int = 5
    breaker_cooldown_s: float = 30.0
    dispatcher_poll_s: float = 0.2
    batch_max_events: int = 500
    batch_window_ms: float = 0.0
    """Extra wait for more requests before a shared transaction; 0 batches only what is already queued."""
    batch_workers: int = 2
    """Concurrent shared transactions; orders are partitioned across them by hash."""
    db_pool_size: int = 10
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = None
    log_level: str = "INFO"
    # issue 12: process definitions and per-tenant limits
    process_dir: Path | None = None
    """Extra process definitions (*.yaml) registered beside the built-in ones."""
    default_max_order_amount: str = "100000"
    """A tenant's limit on an amount (major units, decimal text) until `nexus tenants set-limit`."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from `NEXUS_*` variables, then apply explicit overrides (flags) that are not None."""
        source = os.environ if env is None else env
        values: dict[str, Any] = {}
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name, var in _ENV_NAMES.items():
            raw = source.get(var)
            if raw is None or raw == "":
                continue
            values[name] = _convert(name, var, raw, fields[name].type)
        for name, value in overrides.items():
            if name not in fields:
                raise ConfigurationError(f"unknown setting {name!r}")
            if value is not None:
                values[name] = value
        return cls(**values)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


def _convert(name: str, var: str, raw: str, annotation: Any) -> Any:
    kind = str(annotation)
    try:
        if kind.startswith("int"):
            return int(raw)
        if kind.startswith("float"):
            return float(raw)
        if kind.startswith("Path"):  # also "Path | None"
            return Path(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{var}={raw!r} is not a valid {kind} for {name}") from exc
    return raw
