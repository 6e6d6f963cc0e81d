"""One frozen `Settings`, built at the edge from `NEXUS_*` variables and flags, passed down.

Nothing deeper than the CLI and app wiring reads `os.environ`. Every interval and timeout is a setting so
tests can shrink it.

`Settings` is a pydantic-settings model: pydantic-settings derives the variable of a field
(`env_prefix="NEXUS_"`: `NEXUS_` + its name in capitals; every name is public, and docs/settings.md, made by
`make settings-doc` from the fields and their docstrings, lists them) and converts and checks each value by
the field's type. Building `Settings(...)` directly reads no environment (tests and tools pass their values
explicitly); `Settings.from_env()` is the one place variables are read, with flags applied on top; `to_env()`
is its inverse (a child process's environment). A malformed value raises `ConfigurationError` with one line
per bad variable, naming it (or the setting, when it came from a flag), which `nexus` reports without a
traceback. Beside the fields: `NEXUS_SERVICE_<NAME>_URL` (any name; merged into `service_urls`) and
`otel_variables()`, the standard `OTEL_*` variables the OpenTelemetry SDK reads itself. The lab's and the
clients' variables (`NEXUS_LLM_*`, `NEXUS_API_KEY`, `NEXUS_GATEWAY_URL`) are read by the lab's planner
settings and the SDK's client configuration, not here; `OTHER_VARIABLES` names them, so that
`unknown_variables` (the warning `nexus serve` gives at start for each `NEXUS_*` variable nobody reads) stays
quiet about them.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from nexus.errors import ConfigurationError
from nexus.settings_sections import (
    FoldThreadSettings,
    KafkaSettings,
    OAuthSettings,
    QuotaSettings,
    RetentionSettings,
    SagaSettings,
)
from nexus_wire.kafka_security import KafkaSecurity

ENV_PREFIX = "NEXUS_"


class Settings(KafkaSettings, SagaSettings, OAuthSettings, QuotaSettings, RetentionSettings, FoldThreadSettings):
    """Configuration of one gateway process."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_ignore_empty=True,
        frozen=True,
        extra="forbid",
        validate_default=True,
        use_attribute_docstrings=True,  # each field's docstring is its meaning in docs/settings.md
    )

    # -- storage -----------------------------------------------------------------------------------------
    database_url: str | None = None
    """PostgreSQL URL (`postgresql://user:password@host:5432/db`); None starts the embedded server under
    `data_dir`, unless `embedded_database` is off."""
    embedded_database: bool = True
    """Whether a missing `database_url` may start the embedded PostgreSQL; off (`0`) in production, so that
    an unset or misspelt URL stops `nexus serve` with one line (exit 2) instead of an empty local database."""
    bootstrap_key_file: str | None = None
    """Where `nexus serve` writes the admin key it creates on a database without keys (mode 0600); unset:
    `<data_dir>/admin.key`; `none`: no key is created (make the first with `nexus keys create`)."""
    data_dir: Path = Path(".nexus")
    """Directory of the embedded PostgreSQL (`pgdata/`), its audit key and the bootstrap admin key."""
    # -- HTTP ingress ------------------------------------------------------------------------------------
    http_host: str = "127.0.0.1"
    """Address the HTTP API binds (127.0.0.1: this machine only; 0.0.0.0: every interface)."""
    http_port: int = 8080
    """Port of the HTTP API."""
    # -- sequencing buffer -------------------------------------------------------------------------------
    buffer_timeout_s: float = 3600.0
    """How long a buffered step waits for its predecessors before it is dead-lettered BUFFER_TIMEOUT."""
    buffer_sweep_interval_s: float = 5.0
    """How often buffered steps past `buffer_timeout_s` are looked for."""
    # -- webhook delivery --------------------------------------------------------------------------------
    webhook_url: str | None = None
    """Receiver of a subscription of every tenant made at start (with `webhook_secret`); unset: none."""
    webhook_secret: str | None = None
    """Signing secret (`whsec_...`) of the subscription made from `webhook_url`."""
    webhook_workers: int = 16
    """Webhook requests one dispatcher process has in flight at once."""
    webhook_timeout_s: float = 10.0
    """Timeout of one webhook request; a timeout is retried."""
    retry_base_ms: int = 500
    """First wait before a failed webhook delivery is retried (doubled each attempt, with jitter)."""
    retry_max_ms: int = 300_000
    """Longest wait between two webhook attempts."""
    max_attempts: int = 10
    """Attempts of one notification to one subscription before it is dead."""
    lease_s: float = 60.0
    """How long a claimed delivery is held by its dispatcher; past it another instance resends it."""
    breaker_threshold: int = 5
    """Consecutive failures of a subscription that open its circuit breaker."""
    breaker_cooldown_s: float = 30.0
    """How long an open breaker waits before letting one probe through (half-open)."""
    dispatcher_poll_s: float = 0.2
    """How often an idle dispatcher looks for due deliveries when no NOTIFY woke it."""
    dispatcher_gauges_s: float = 1.0
    """How often a dispatcher refreshes the breaker and backlog gauges it exports."""
    dispatcher_stop_flush_s: float = 5.0
    """How long a stopping dispatcher may take to write back its last results (then their leases expire)."""
    # -- group commit and pool ---------------------------------------------------------------------------
    batch_max_events: int = 500
    """Most events in one shared transaction of the HTTP ingress (group commit)."""
    batch_window_ms: float = 0.0
    """Extra wait for more requests before a shared transaction; 0 batches only what is already queued."""
    batch_workers: int = 2
    """Concurrent shared transactions; orders are partitioned across them by hash."""
    batch_tenant_events: int = Field(64, ge=1)
    """Most events of one tenant in one shared transaction, by weight (an event weighs one, plus one per 16
    elements of its data's lists); a larger request is split across transactions, so another tenant's step
    waits behind at most this much of a busy tenant's work per transaction."""
    db_pool_size: int = 10
    """PostgreSQL connections of one gateway process at most."""
    # -- logging -----------------------------------------------------------------------------------------
    log_level: str = "INFO"
    """DEBUG, INFO, WARNING or ERROR; logs are JSON lines on stderr."""
    # One retry mechanism (Kafka reconnects, the outbox listener)
    kafka_reconnect_max_ms: int = 5_000
    """Cap of the wait between two attempts to start a Kafka client (the broker is not up yet)."""
    listen_retry_s: float = 1.0
    """Wait before the dispatcher's LISTEN connection (a latency shortcut) is opened again after a loss."""
    listen_check_s: float = 5.0
    """How often an idle LISTEN connection (dispatchers, saga executors, long polls) is checked to be open."""
    # Bounded requests, connection limits, bounded metric labels
    max_body_bytes: int = 1024 * 1024
    """Largest request body; larger: 413 PAYLOAD_TOO_LARGE, nothing written."""
    max_events_per_request: int = 1000
    """More events in one request: 413 BATCH_TOO_LARGE, nothing written."""
    max_nesting_depth: int = 32
    """Deeper JSON (arrays/objects, the outermost counts 1): 400 NESTING_TOO_DEEP, nothing written."""
    max_string_length: int = 65_536
    """A longer key or string anywhere in a request: 413 PAYLOAD_TOO_LARGE, nothing written."""
    parse_in_thread_bytes: int = 8 * 1024
    """Bodies at least this large are decoded and checked in a worker thread, off the event loop (~50 us a KiB)."""
    http_limit_concurrency: int = 1000
    """Requests in flight in one process (counted in a share) beyond which a new one is 503 SERVER_BUSY at once."""
    http_max_connections: int = Field(4096, ge=1)
    """Open connections of one process; a new one beyond closes the oldest idle or head-incomplete one."""
    max_requests_per_tenant: int | None = Field(None, ge=1)
    """Requests of one tenant in flight in one process (a key spanning every tenant counts as one tenant);
    beyond: 429 TENANT_BUSY. None: a quarter of `http_limit_concurrency`. Per process, not divided."""
    processing_slots: int = Field(4, ge=0)
    """Requests one process works on at once (their key checked and body read); the others wait for a slot in
    a queue per tenant, granted round robin weighted by body size, and a wait (long poll, stream, shared
    transaction) gives its slot back. 0: no slots, every admitted request runs at once."""
    max_requests_unauthenticated: int | None = Field(None, ge=1)
    """Requests whose key is still being checked (or has none) in one process; beyond: 429 TENANT_BUSY.
    None: a sixteenth of `http_limit_concurrency`. Per process, not divided."""
    http_keep_alive_s: float = 5.0
    """An idle keep-alive connection is closed after this long."""
    http_read_timeout_s: float = 30.0
    """A request whose head and body have not fully arrived this long after its first byte is dropped."""
    http_backlog: int = 2048
    """Connections the kernel queues for the HTTP listener before refusing."""
    http_max_head_bytes: int = 65_536
    """A request line plus headers larger than this: 431 and the connection is closed."""
    metrics_max_subscriptions: int = 50
    """Subscriptions with their own breaker series; more (by id) share the label `other`."""
    # Process definitions and per-tenant limits
    process_dir: Path | None = None
    """Extra process definitions (*.yaml) registered beside the built-in ones."""
    default_max_order_amount: str = "100000"
    """A tenant's limit on an amount (major units, decimal text) until `nexus tenants set-limit`."""
    # The decision log's signed checkpoints
    audit_checkpoint_s: float = 60.0
    """How often `nexus serve` signs a checkpoint of the chain heads changed since the previous one."""
    audit_signing_key: str | None = None
    """Ed25519 key: base64 of the raw 32-byte seed, or a PKCS#8 PEM; None: <data_dir>/audit_ed25519.key."""
    audit_archive_dir: Path | None = None
    """Where the decision log's trims first write what leaves (`<dir>/<tenant>/<from>_<to>.jsonl`, each segment
    verifiable alone); None: the log is kept whole and nothing is trimmed."""
    # Identity, tenancy, outbound URL guard, rate limits
    auth_cache_ttl_s: float = 1.0
    """How long a key lookup is trusted: a revoked key is refused by every process within this time."""
    metrics_bind: str | None = None
    """host:port serving /metrics without a key on its own address; unset: /metrics needs an operator key."""
    kafka_tenant: str = "default"
    """The tenant the Kafka topic is bound to; an envelope naming another is dead-lettered TENANT_MISMATCH."""
    allow_private_urls: str | None = None
    """`true`, or comma-separated networks, that subscription URLs may reach despite the outbound guard."""
    rate_limit_agent: float = 2000.0
    """Requests per second per key holding the role (burst: one second's worth); 0 = unlimited. A key with
    several roles gets the highest of their limits."""
    rate_limit_operator: float = 200.0
    """Requests per second per key holding the operator role (as `rate_limit_agent`)."""
    rate_limit_approver: float = 50.0
    """Requests per second per key holding the approver role (as `rate_limit_agent`)."""
    rate_limit_admin: float = 20.0
    """Requests per second per key holding the admin role (as `rate_limit_agent`)."""
    rate_limit_tenant: float = Field(4000.0, ge=0)
    """Units of work per second of one tenant, summed over all its keys of any role (a request, an envelope
    of a batch, a numbered step, an MCP tool call, a plan's creation: one unit each); 0 = off. Divided among
    processes as the per-key limits are; beyond: 429 RATE_LIMITED."""
    rate_limit_processes: int | None = None
    """Gateway processes sharing the load: each enforces limit / processes (limits are divided, not shared);
    None: this serve's own processes (`workers`)."""
    # The web console
    console_session_ttl_s: float = 8 * 3600.0
    """How long a console sign-in lasts (a session is a row in PostgreSQL keyed by a hash of its cookie)."""
    console_page_size: int = 50
    """Rows per page of the console's lists."""
    # Every delivery attempt recorded, for a bounded time
    delivery_attempts_retention_s: float = 7 * 86400.0
    """How long the record of each webhook delivery attempt (delivery_attempts) is kept."""
    delivery_attempts_prune_s: float = 300.0
    """How often a dispatching process deletes the attempts older than the retention."""
    console_poll_s: float = 2.0
    """How often an open (visible) order page of the console asks whether the order changed."""
    # Plan lifecycle (waiting, deadlines, approvals, decisions to Kafka)
    wait_max_s: float = 60.0
    """Longest long poll (`GET /v1/orders/{id}?wait=S`): a larger S is clipped to it."""
    repeat_window_s: float = Field(60.0, ge=0)
    """A numbered step proposed without an idempotency key, the same as the order's last applied step
    (step and data) within this many seconds, is answered DUPLICATE instead of applied again."""
    stream_keepalive_s: float = 15.0
    """An SSE stream (`GET /v1/orders/{id}/stream`) with nothing to say sends a comment this often."""
    deadline_sweep_s: float = 1.0
    """How often each gateway looks for live plans past their deadline (and aborts them, abort_code timeout)."""
    plan_start_timeout_s: float = Field(3600.0, gt=0)
    """A plan started with no step yet (`POST /v1/plans`, MCP `start_plan`) gets an implicit deadline this many
    seconds after its start (or its own `deadline_s`, if sooner): the deadline sweeper then ends it as a
    TOMBSTONE with abort_code `timeout`, and no notification."""
    approval_sweep_s: float = 1.0
    """How often each gateway denies approvals past their `expires_s`."""
    decisions_topic: str = "nexus.decisions"
    """Kafka topic of the decisions on Kafka-ingested steps (relayed from the decisions outbox)."""
    decisions_relay_poll_s: float = 0.2
    """How often the decisions relay looks for outbox rows when no NOTIFY woke it."""
    # Past one machine
    sync_standby: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,63}$")
    """`application_name` of a synchronous standby (`nexus db standby --name`): set, the gateway lists it in the
    primary's `synchronous_standby_names` at start (a superuser's right; else it must be set already), every
    commit waits until that standby has it, and `/readyz` answers 503 while it is not streaming. Unset:
    replication, if any, is asynchronous."""
    # MCP at /mcp
    mcp_allowed_origins: str = ""
    """Origins (`scheme://host[:port]`, comma separated) whose pages may call `/mcp`; a request carrying any
    other `Origin` header is refused 403 FORBIDDEN (DNS rebinding). Empty: none; a request without one passes."""
    # Several HTTP processes sharing the port
    workers: int = Field(1, ge=1)
    """HTTP processes of `nexus serve` sharing its port (1: one process, no supervisor). With more, a
    supervisor binds the port and starts them; the background services run in the first one only."""
    workers_stop_s: float = 15.0
    """How long the supervisor waits for its processes to stop after SIGTERM before it kills them."""
    # Draining behind a load balancer (deploy/haproxy.cfg checks /readyz every 1 s, down after 2 failures)
    drain_grace_s: float = Field(3.0, ge=0)
    """After SIGTERM, how long `nexus serve` answers `/readyz` 503 (status `draining`) while it still serves
    every request, so that the load balancer stops sending it new ones first: at least two health-check
    intervals (deploy/haproxy.cfg: `inter 1s fall 2`, down within about 2 s; 3 s leaves one to spare). Then its
    waits answer their current state and end, it stops accepting, and its services stop (Kafka consumers leave
    the group, leases are released). SIGINT, or a second signal, skips what is left of the grace."""
    drain_timeout_s: float = Field(10.0, gt=0)
    """After SIGTERM, the process exits (status 1) this many seconds later at the latest, whatever is still
    running: the hard stop of a drain. Keep it above `drain_grace_s` and below `workers_stop_s`."""
    # tenant safety: caps on waiting, slow request heads, failed authentication, the console's cookies
    max_waits_per_key: int = Field(16, ge=1)
    """Open SSE streams plus waiting long polls one key may hold in one gateway process; beyond: 429
    TOO_MANY_WAITS. A count of connections, so not divided among processes."""
    max_waits_per_tenant: int = Field(64, ge=1)
    """Open SSE streams, long polls and MCP waits of one tenant's keys in one gateway process; beyond: 429
    TOO_MANY_WAITS. Per process, not divided."""
    http_head_timeout_s: float = 5.0
    """A request whose head (request line and headers) has not fully arrived this long after its first
    byte is dropped (slowloris); `http_read_timeout_s` bounds head and body together."""
    auth_failures_per_minute: float = 60.0
    """Failed authentications one source address may make per minute, divided among the processes as the
    rate limits are; beyond: its failed attempts get 429 RATE_LIMITED (a valid key is never refused). 0: no limit."""
    console_secure: bool = False
    """Mark the console's cookies `Secure` (also done for a request that came over https)."""
    # per-tenant bulkheads of the webhook workers (delivery/bulkheads.py)
    delivery_max_inflight_per_tenant: int | None = Field(None, ge=1)
    """Webhook requests one tenant's subscriptions may have in flight at once in one dispatcher process;
    None: half of `webhook_workers` (8 of 16), so another tenant always finds slots free."""
    delivery_max_inflight_per_subscription: int | None = Field(None, ge=1)
    """Webhook requests one subscription may have in flight at once in one dispatcher process; None: all of
    `webhook_workers` (within its tenant's bulkhead)."""

    @model_validator(mode="after")
    def _kafka_security_consistent(self) -> Settings:
        self.kafka_security()  # a ValueError names the variables that disagree
        return self

    def kafka_security(self) -> KafkaSecurity:
        """The TLS and SASL settings every Kafka client of the gateway is built with."""
        return KafkaSecurity(
            self.kafka_security_protocol,
            self.kafka_sasl_mechanism,
            self.kafka_sasl_username,
            self.kafka_sasl_password,
            self.kafka_ssl_cafile,
            self.kafka_ssl_certfile,
            self.kafka_ssl_keyfile,
        )

    def check_database(self) -> None:
        """ConfigurationError when there is no PostgreSQL URL and the embedded server is turned off."""
        if self.database_url is None and not self.embedded_database:
            raise ConfigurationError(
                "NEXUS_DATABASE_URL is not set and NEXUS_EMBEDDED_DATABASE=0 forbids the embedded PostgreSQL"
            )

    def service_url(self, name: str) -> str | None:
        """The base URL of effect service `name`, from `service_urls`."""
        return parse_service_urls(self.service_urls).get(name.lower())

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from `NEXUS_*` variables, then apply explicit overrides (flags) that are not None."""
        for name in overrides:
            if name not in cls.model_fields:
                raise ConfigurationError(f"unknown setting {name!r}")
        source = os.environ if env is None else env
        from_vars = _Variables(cls, source)()
        dynamic = _service_urls(source)  # NEXUS_SERVICE_<NAME>_URL names are not fields
        if dynamic:
            merged = {**parse_service_urls(str(from_vars.get("service_urls", ""))), **dynamic}
            from_vars["service_urls"] = ",".join(f"{k}={v}" for k, v in sorted(merged.items()))
        flags = {name: value for name, value in overrides.items() if value is not None}
        return _validated(cls, {**from_vars, **flags}, from_vars.keys() - flags.keys())

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Only what the caller passes: the environment is read by `from_env` alone, at the edge.
        return (init_settings,)

    def replace(self, **changes: Any) -> Settings:
        """A copy with `changes` applied, validated like any other settings."""
        return _validated(type(self), {**self.model_dump(), **changes}, set())

    def to_env(self) -> dict[str, str]:
        """The `NEXUS_*` variables that make `from_env` rebuild these settings (unset fields left out)."""
        return {env_name(name): str(value) for name, value in self.model_dump().items() if value is not None}


def env_name(field: str) -> str:
    """The variable that sets `field`: pydantic-settings' own derivation (prefix + name; case-insensitive)."""
    return (ENV_PREFIX + field).upper()


def otel_variables(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The standard `OTEL_*` variables: the OpenTelemetry SDK reads them itself; `nexus serve` looks at them
    only to decide whether to install it (`tracing.configure`)."""
    source = os.environ if env is None else env
    return {key: value for key, value in source.items() if key.startswith("OTEL_")}


class _Variables(EnvSettingsSource):
    """pydantic-settings' reading of `NEXUS_*` variables, from a given mapping instead of `os.environ`."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._given = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # An empty variable means "not set", as it always did (`env_ignore_empty` applies to os.environ only).
        return {key.lower(): value for key, value in self._given.items() if value != ""}


def _validated(cls: type[Settings], values: dict[str, Any], from_vars: set[str] | Any) -> Settings:
    try:
        return cls(**values)
    except ValidationError as exc:
        problems: dict[str, str] = {}
        for error in exc.errors():
            if not error["loc"]:  # a rule across settings: its message names them
                problems.setdefault(error["msg"], str(error["msg"]).removeprefix("Value error, "))
                continue
            field = str(error["loc"][0])
            where = env_name(field) if field in from_vars else f"setting {field}"
            problems.setdefault(where, f"{where}={error.get('input')!r}: {error['msg']}")
        if len(problems) == 1:
            raise ConfigurationError(next(iter(problems.values()))) from None
        lines = "".join(f"\n  {problem}" for problem in problems.values())
        raise ConfigurationError(f"{len(problems)} bad settings:{lines}") from None


# --- variables of other tools that share the prefix ------------------------------------------------

OTHER_VARIABLES = frozenset(
    {
        # the SDK and `nexus mcp --stdio`
        "NEXUS_API_KEY",
        "NEXUS_GATEWAY_URL",
        # the lab's LLM planner (its settings module)
        "NEXUS_LLM_BASE_URL",
        "NEXUS_LLM_MODEL",
        "NEXUS_LLM_API_KEY",
        "NEXUS_LLM_EXTRA_HEADERS",
        "NEXUS_LLM_TEMPERATURE",
        "NEXUS_LLM_MAX_TOKENS",
        "NEXUS_LLM_MAX_REQUESTS",
        "NEXUS_LLM_MAX_CORRECTIONS",
        "NEXUS_LLM_TIMEOUT_S",
        "NEXUS_LLM_RETRY_BASE_MS",
        "NEXUS_LLM_RETRY_MAX_MS",
        "NEXUS_LLM_RETRY_ATTEMPTS",
        "NEXUS_LLM_TOOL_MODE",
        "NEXUS_LLM_STREAM",
        "NEXUS_LLM_PROCESS",
        # scripts/kafka.sh, the Makefile, the benches and the tests
        "NEXUS_KAFKA_PORT",
        "NEXUS_KAFKA_BROKERS",
        "NEXUS_KAFKA_LIBS",
        "NEXUS_KAFKA_CONTROLLER_PORT",
        "NEXUS_KAFKA_SASL_PORT",
        "NEXUS_KAFKA_HOME",
        "NEXUS_KAFKA_HEAP_OPTS",
        "NEXUS_KAFKA_JVM_OPTS",
        "NEXUS_KAFKA_PYTHON",
        "NEXUS_KAFKA_START_TIMEOUT",
        "NEXUS_KAFKA_STOP_TIMEOUT",
        "NEXUS_KAFKA_TOPICS",
        "NEXUS_KAFKA_TOPIC_PARTITIONS",
        "NEXUS_WRK",
        "NEXUS_TEST_DATABASE_URL",
        "NEXUS_FUZZ_EXAMPLES",
        "NEXUS_BROWSER_TESTS",
    }
)
"""`NEXUS_*` variables read by the SDK, the lab and the scripts, not by `Settings`: known, so never warned about."""


def known_variables() -> frozenset[str]:
    """Every variable `nexus serve` knows: the settings' and `OTHER_VARIABLES` (and any
    `NEXUS_SERVICE_<NAME>_URL`, see `unknown_variables`)."""
    return frozenset(env_name(name) for name in Settings.model_fields) | OTHER_VARIABLES


def unknown_variables(env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Each `NEXUS_*` variable of `env` nobody reads, with the nearest known name (difflib), sorted: what
    `nexus serve` warns about at start (a warning, not a refusal: other tools use the prefix too)."""
    source = os.environ if env is None else env
    known = known_variables()
    found = []
    for name in sorted(source):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known or _is_service_url(upper):
            continue
        nearest = difflib.get_close_matches(upper, known, n=1, cutoff=0.0)
        found.append((name, nearest[0] if nearest else ""))
    return found


def _is_service_url(name: str) -> bool:
    prefix, suffix = "NEXUS_SERVICE_", "_URL"
    return name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix) + len(suffix)


# --- effect services' base URLs -------------------------------------------------------------


def parse_service_urls(text: str) -> dict[str, str]:
    """`name=url,name=url` as a mapping (names in lower case)."""
    urls: dict[str, str] = {}
    for item in text.split(","):
        name, sep, url = item.strip().partition("=")
        if sep and name.strip() and url.strip():
            urls[name.strip().lower()] = url.strip().rstrip("/")
    return urls


def _service_urls(env: Mapping[str, str]) -> dict[str, str]:
    """Every `NEXUS_SERVICE_<NAME>_URL` variable (`NEXUS_SERVICE_URLS` excluded) as name -> URL."""
    found = {}
    for key, value in env.items():
        if key.startswith("NEXUS_SERVICE_") and key.endswith("_URL") and value and key != "NEXUS_SERVICE_URLS":
            name = key[len("NEXUS_SERVICE_") : -len("_URL")].lower()
            if name:
                found[name] = value.rstrip("/")
    return found
