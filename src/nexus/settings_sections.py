"""Sections of `nexus.settings.Settings` declared apart (it inherits them): the Kafka clients' and the sagas'.
Each field's docstring is its meaning in docs/settings.md; the variables are `NEXUS_` + the field's name."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class KafkaSettings(BaseSettings):
    """The Kafka ingress's consumer, its lanes, and how every Kafka client reaches the broker."""

    model_config = SettingsConfigDict(use_attribute_docstrings=True)

    # -- Kafka ingress -----------------------------------------------------------------------------------
    kafka_bootstrap: str = "127.0.0.1:9092"
    """Kafka brokers (`host:port`, comma separated) of the consumer and every producer."""
    kafka_topic: str = "nexus.events"
    """Topic of agents' steps consumed by `nexus serve --kafka` (key: the order id)."""
    kafka_dlq_topic: str = "nexus.events.dlq"
    """Topic the Kafka ingress writes dead letters to (before committing their offsets)."""
    kafka_group: str = "nexus-gateway"
    """Consumer group of the gateway instances sharing the topic's partitions."""
    kafka_max_poll_records: int = 2000
    """Most records one poll of the consumer returns."""
    kafka_poll_timeout_ms: int = 200
    """How long an idle poll of the consumer waits for records."""
    kafka_revoke_wait_s: float = 10.0
    """How long in-flight work of revoked partitions may finish (and be committed) at a rebalance."""
    kafka_session_timeout_ms: int = 10_000
    """The consumer's session timeout: silent this long, it leaves the group."""
    kafka_heartbeat_interval_ms: int = 3_000
    """How often the consumer sends heartbeats to the group coordinator."""
    kafka_max_poll_interval_ms: int = 300_000
    """Longest time between two polls before the consumer is considered stuck."""
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """How every Kafka client of the gateway reaches the broker (docs/kafka.md); SSL and SASL_SSL use TLS."""
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    """With SASL_*: the mechanism (None: PLAIN)."""
    kafka_sasl_username: str | None = None
    """With SASL_*: the user (required)."""
    kafka_sasl_password: str | None = Field(None, repr=False)
    """With SASL_*: its password (required)."""
    kafka_ssl_cafile: str | None = None
    """With SSL or SASL_SSL: the CA bundle (PEM) of the broker's certificate; None: the system's CAs."""
    kafka_ssl_certfile: str | None = None
    """A client certificate (PEM), for brokers that ask for one; its key in `kafka_ssl_keyfile`."""
    kafka_ssl_keyfile: str | None = None
    """The private key (PEM) of `kafka_ssl_certfile`."""
    # Kafka lanes
    kafka_lanes: int = 1
    """Concurrent `submit` transactions of one Kafka consumer; each takes the records of many partitions. One
    by default: a second lane in the same event loop waits on the first's fold for its statements and offset
    commits (measured: benchmarks/history/notebook.md, "Kafka lanes: where a slice's time goes"); scale out with
    processes in the consumer group instead."""
    kafka_slice_ms: float = Field(100.0, ge=0)
    """How long one lane's `submit` should take: a lane sizes its slices from its measured time per record
    (at most `kafka_max_poll_records`) and commits after each; 0 always takes up to the poll size."""


class SagaSettings(BaseSettings):
    """Effects performed by the gateway's saga executors."""

    model_config = SettingsConfigDict(use_attribute_docstrings=True)

    # Sagas (effects performed by the gateway's executors)
    service_urls: str = ""
    """`name=url` pairs, comma separated; `from_env` adds every `NEXUS_SERVICE_<NAME>_URL` (trusted config)."""
    saga_secret: str | None = Field(None, repr=False)
    """HMAC secret of the effects' Idempotency-Keys (each step's keys computed when it is recorded, and kept);
    None: a random secret made once and kept in PostgreSQL, shared by every instance (store/saga_keys)."""
    saga_executors: int = Field(64, ge=0)
    """Sagas one `nexus serve` process works on at once, each in its own task (0: this process performs no
    effects). One claim loop per process leases due sagas in batches up to the free tasks."""
    saga_max_inflight_per_service: int = Field(16, ge=1)
    """Calls one process has in flight to one service at most; a saga whose next call would exceed it is
    released at once (no task, no lease) and due again after `saga_retry_base_ms`."""
    saga_poll_s: float = 2.0
    """How often an idle executor looks for due saga work when nothing woke it (the fallback of `saga_listen`;
    with it off, the only way work is found)."""
    saga_lease_s: float = 30.0
    """How long a claimed saga is held by its executor; past it another executor may take it (crash)."""
    saga_call_timeout_s: float = 5.0
    """Timeout of one call to a service; a call timed out has an unknown outcome."""
    saga_retry_base_ms: float = 200.0
    """First wait before a failed saga call is retried (doubled each attempt, with jitter)."""
    saga_retry_max_ms: float = 10_000.0
    """Longest wait between two attempts of a saga call."""
    saga_max_attempts: int = 5
    """Attempts of one call before the pivot (and at a pivot whose outcomes are all known), the first
    included, before the step fails and the saga compensates (core/saga.py's table)."""
    saga_retry_budget_s: float = Field(86_400.0, ge=0)
    """How long a step after the pivot, an uncertain pivot or a compensation is retried on transient failures,
    from the step's first attempt (an open breaker's time included); then the saga escalates (compensations:
    FAILED). A redrive starts a new budget."""
    saga_breaker_threshold: int = 5
    """Consecutive failures of one service that open its breaker (its calls wait, uncounted)."""
    saga_breaker_cooldown_s: float = 10.0
    """How long an open service breaker waits before letting one call through."""
    # Executors woken by LISTEN/NOTIFY, the poll as the fallback
    saga_listen: bool = True
    """Idle executors LISTEN on `nexus_sagas` and wake at once when a step is recorded (or a saga made due);
    off: they find work by polling every `saga_poll_s` only."""


class OAuthSettings(BaseSettings):
    """OAuth 2.1 access tokens beside API keys (nexus.auth.oauth; docs/mcp.md)."""

    model_config = SettingsConfigDict(use_attribute_docstrings=True)

    public_url: str | None = Field(None, pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$")
    """This gateway's public URL (`https://gateway.example`): the audience an access token must name (RFC
    8707) and the `resource` of `/.well-known/oauth-protected-resource`. Unset: OAuth is off (keys only)."""
    oauth_issuers: str = ""
    """Issuer URLs (comma separated) whose JWT access tokens are accepted once `public_url` is set; each
    one's discovery document and JWKS are fetched and cached."""
    oauth_tenant_claim: str = "tenant"
    """The access token's claim naming its tenant (an identifier); a token without it is refused 401."""
    oauth_roles_claim: str = "roles"
    """The access token's claim listing its roles; a role counts only with its scope too (`nexus:<role>`)."""
    oauth_jwks_ttl_s: float = Field(300.0, gt=0)
    """How long an issuer's discovery document and JWKS are used before they are fetched again."""
    oauth_jwks_refetch_s: float = Field(10.0, ge=0)
    """Least time between two fetches of an issuer's JWKS caused by a token whose `kid` is unknown (a key
    rotated in is found at once; a flood of made-up kids costs one fetch per this interval)."""
    oauth_fetch_timeout_s: float = Field(5.0, gt=0)
    """Timeout of one fetch of an issuer's discovery document or JWKS."""

    @model_validator(mode="after")
    def _oauth_has_issuers(self) -> OAuthSettings:
        if self.public_url is not None and not self.issuer_urls():
            raise ValueError("NEXUS_PUBLIC_URL turns OAuth on: NEXUS_OAUTH_ISSUERS must name at least one issuer")
        return self

    def issuer_urls(self) -> tuple[str, ...]:
        """`oauth_issuers` as a tuple of URLs, each without a trailing slash."""
        return tuple(u.strip().rstrip("/") for u in self.oauth_issuers.split(",") if u.strip())


class QuotaSettings(BaseSettings):
    """Quotas on what one tenant stores (nexus.auth.quotas): counted in PostgreSQL, global across processes
    (not divided), each overridable per tenant with `nexus tenants set-limit`. Beyond one: the whole request
    is refused 429 QUOTA_EXCEEDED naming the quota, nothing written."""

    model_config = SettingsConfigDict(use_attribute_docstrings=True)

    quota_live_orders: int = Field(100_000, ge=0)
    """Orders of one tenant not finished (not in a terminal state, not tombstoned) it may store; 0 = no quota."""
    quota_unstarted_plans: int = Field(10_000, ge=0)
    """Plans of one tenant started (`POST /v1/plans`, MCP `start_plan`) that have no step yet; 0 = no quota."""
    quota_buffered_steps: int = Field(100_000, ge=0)
    """Steps of one tenant buffered ahead of a gap; a step that adds none (the missing one) is never refused
    by it; 0 = no quota."""
    quota_dead_letters: int = Field(100_000, ge=0)
    """Dead letters of one tenant stored; at it, every request that could write one is refused; 0 = no quota."""
    quota_active_keys: int = Field(100, ge=0)
    """Unrevoked API keys bound to one tenant (keys spanning every tenant are not counted); 0 = no quota."""
    quota_refresh_s: float = Field(1.0, ge=0)
    """How old a process's snapshot of a tenant's usage and quotas may grow before it is read again; a request
    far from every limit by the snapshot is admitted without a query, one within its own worth of a limit runs
    the exact check; 0 = the exact check on every request."""
    metrics_max_tenants: int = Field(50, ge=1)
    """Tenants with their own `nexus_tenant_quota_*` series (the most used); the rest share the label `other`."""


class RetentionSettings(BaseSettings):
    """How long finished orders stay (docs/retention.md), and the remover that takes them away."""

    model_config = SettingsConfigDict(use_attribute_docstrings=True)

    retention_s: int = Field(2_592_000, ge=1)
    """A finished order (completed, aborted, tombstoned) and everything about it leave this long after it
    finished (30 days); a tenant's own period: `nexus tenants set-limit T --retention-s N`. The decision log's
    chains that never finish and its old checkpoints are trimmed after it too (with `audit_archive_dir`)."""
    removed_order_memory_s: int = Field(604_800, ge=1)
    """How long a removed order's marker is kept (7 days): while it lives, a late step of the order is
    answered from it (DUPLICATE or DISCARD ORDER_REMOVED) and its order id cannot start again."""
    retention_batch: int = Field(200, ge=1)
    """Orders one remover transaction takes away at most (short transactions, bounded locks)."""
    retention_sweep_s: float = Field(60.0, gt=0)
    """How often the remover looks for orders due for removal once it has removed every due one."""
    retention_duty: float = Field(0.2, gt=0, le=1)
    """The share of its time the remover works through a backlog: after a batch that took t seconds it pauses
    t*(1-d)/d (at least 0.05 s, at most 10 s), so the hot path keeps the machine; 1 = no pause (full speed)."""


class FoldThreadSettings(BaseSettings):
    """What keeps one tenant's work from delaying another's: where a shared transaction's fold runs
    (`nexus.fold_thread`), how many request heads and closes the HTTP server handles in one turn of the loop
    (`nexus.ingress.turns`), and who gets the pool's connections (`nexus.store.fair_pool`)."""

    model_config = SettingsConfigDict(use_attribute_docstrings=True)

    fold_thread_weight: int = Field(32, ge=0)
    """A shared transaction weighing at least this much (one per event, plus one per 16 elements of its data's
    lists) is folded on one worker thread, so the event loop serves other requests meanwhile. 0: always inline."""
    fold_thread_switch_ms: float = Field(0.1, ge=0)
    """The interpreter's switch interval while the fold thread is on: about the longest the event loop waits
    for the GIL behind a fold, at each of its awaits. 0: Python's own (5 ms)."""
    heavy_db_connections: int = Field(1, ge=0)
    """PostgreSQL connections of the heavy lanes, a pool of their own beside `NEXUS_DB_POOL_SIZE`: at most this
    many heavy transactions in PostgreSQL at once. 0: the heavy lanes share the main pool."""
    heavy_duty: float = Field(0.5, gt=0.0, le=1.0)
    """While two or more tenants submitted to the group commit within the last second, the heavy lanes work at most
    this share of the time: after a heavy transaction of t seconds the next starts t*(1-d)/d later (at most 1 s),
    and the event loop and the light lanes have the interpreter meanwhile. 1: no pause; a tenant alone is never
    paused."""
    db_connections_per_tenant: int = Field(0, ge=0)
    """Most of the pool's connections one tenant's requests hold at once while another tenant used the pool
    within the last second (a tenant alone keeps the whole pool); 0: a quarter of NEXUS_DB_POOL_SIZE, at least
    one. The pool's connections go round the tenants waiting for one. The group commit is not a tenant's."""
    batch_tenant_events_contended: int = Field(16, ge=1)
    """NEXUS_BATCH_TENANT_EVENTS while two or more tenants submitted to the group commit within the last second
    (a tenant alone keeps the larger share): a busy tenant's large requests are cut into slices this small and a
    shared transaction holds at most this much of its work, so another tenant's commit follows less of its WAL."""
    http_heads_per_turn: int = Field(1, ge=0)
    """New request heads and connection closes handled in one turn of the event loop while another tenant has
    requests in flight or a connection open; the rest wait in a queue per tenant, taken round robin on the next
    turns. 0: off. More per turn: a little more throughput while several tenants saturate the gateway (8: about
    1.09x), another tenant's latency under one tenant's burst of connections worse (8: C's p99 about 1.7x)."""
