"""Prometheus metrics (names from the main seed). Labelled series are born at zero.

An event is counted once it is resolved: a retried batch is not counted twice, and a dead letter sent
to Kafka is counted after the broker's acknowledgement.

with `nexus serve --workers N` every process writes its series to files in
PROMETHEUS_MULTIPROC_DIR (prometheus_client's multiprocess mode, chosen when prometheus_client is first
imported: the supervisor sets the variable before it starts the processes), and `/metrics` of any of them
shows `exposition()`: counters and histograms summed over the processes, each gauge by its
`multiprocess_mode` (read-at-scrape gauges: the most recent value written, by whichever process answered).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest

from nexus.core.envelope import EventEnvelope
from nexus.core.quotas import Quota
from nexus.errors import ErrorCode
from nexus_wire.codes import Decision


# What `record_outcomes` reads of the gateway's `Incoming` and `Outcome`, as protocols: metrics is imported
# by the gateway, so it must not import the gateway back.
class _Item(Protocol):
    @property
    def envelope(self) -> EventEnvelope | None: ...


class _Outcome(Protocol):
    @property
    def decision(self) -> Decision: ...
    @property
    def code(self) -> ErrorCode | None: ...
    @property
    def dead_letter_id(self) -> int | None: ...


# The *_created series double the exposition and no dashboard reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it untyped
REGISTRY = CollectorRegistry(auto_describe=True)
# Every metric lives in REGISTRY; every gauge is one reading that one process sets (or the scrape takes),
# so across processes its most recent value is the answer.
_counter = functools.partial(Counter, registry=REGISTRY)
_histogram = functools.partial(Histogram, registry=REGISTRY)
_gauge = functools.partial(Gauge, registry=REGISTRY, multiprocess_mode="mostrecent")

EVENTS_PROCESSED = _counter(
    "nexus_events_processed_total",
    "Events resolved by the gateway, by kind (event type) and outcome (decision).",
    ["kind", "outcome"],
)
EVENTS_DRAINED = _counter(
    "nexus_events_drained_total",
    "Buffered events applied when their predecessor arrived.",
)
DEAD_LETTERS = _counter(
    "nexus_dead_letters_total",
    "Items recorded in the dead_letters table, by code.",
    ["code"],
)
DLQ_MESSAGES = _counter(
    "nexus_dlq_messages_total",
    "Messages acknowledged by the Kafka dead-letter topic, by code.",
    ["code"],
)
AUTH_FAILURES = _counter(
    "nexus_auth_failures_total",
    "Failed authentications of API requests, by reason (missing, malformed, unknown, revoked, invalid_token).",
    ["reason"],
)
CONSUMER_RETRIES = _counter(
    "nexus_consumer_retries_total",
    "Transient failures retried in place by an ingress.",
)
EVENT_SETTLE = _histogram(
    "nexus_event_settle_seconds",
    "From first processing until the event is resolved, retries included.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
CONSUMER_LAG = _gauge(  # one consumer (the first process) sets it
    "nexus_consumer_lag",
    "Records behind the high watermark, after each batch.",
    ["topic", "partition"],
)
BLOCKED_ACTIONS = _counter(
    "nexus_blocked_actions_total",
    "Steps REJECTED by their order's process (the blocked actions), by code.",
    ["code"],
)
HTTP_BATCH_SIZE = _histogram(
    "nexus_http_batch_events",
    "Events per shared transaction of the HTTP ingress (group commit).",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)

_OUTCOMES = [d.value.lower() for d in Decision]
# The step types counted by name (`born_event_kinds`); any other is "other".
_KNOWN_KINDS: set[str] = set()


def born_event_kinds(kinds: Iterable[str]) -> None:
    """Count `kinds` (the gateway passes the shipped definitions' step types and the built-in steps) and
    "unknown" by name, each born at zero with every outcome; idempotent."""
    for kind in [*kinds, "unknown"]:
        if kind not in _KNOWN_KINDS:
            _KNOWN_KINDS.add(kind)
            for outcome in _OUTCOMES:
                EVENTS_PROCESSED.labels(kind=kind, outcome=outcome)


for _code in ErrorCode:
    DEAD_LETTERS.labels(code=_code.value)
    DLQ_MESSAGES.labels(code=_code.value)
BLOCKED_CODES = ("INVALID_TRANSITION", "AFTER_TERMINAL", "UNKNOWN_STEP", "CHECK_FAILED", "LIMIT_EXCEEDED")
for _blocked in BLOCKED_CODES:
    BLOCKED_ACTIONS.labels(code=_blocked)
for _reason in ("missing", "malformed", "unknown", "revoked", "invalid_token"):
    AUTH_FAILURES.labels(reason=_reason)


# The counters' children by (kind, decision), looked up once each (children are never removed).
_PROCESSED_CHILDREN: dict[tuple[str, Decision], Counter] = {}


def _processed(kind: str, decision: Decision) -> Counter:
    child = _PROCESSED_CHILDREN.get((kind, decision))
    if child is None:
        child = _PROCESSED_CHILDREN[(kind, decision)] = EVENTS_PROCESSED.labels(
            kind=kind, outcome=decision.value.lower()
        )
    return child


def record_outcomes(items: Sequence[_Item], outcomes: Sequence[_Outcome], drained: int) -> None:
    for item, outcome in zip(items, outcomes, strict=True):
        kind = str(item.envelope.event_type) if item.envelope is not None else "unknown"
        if kind not in _KNOWN_KINDS:
            kind = "other"  # an invented step type must not grow the label set without bound
        _processed(kind, outcome.decision).inc()
        if outcome.decision is Decision.REJECTED and outcome.code is not None:
            BLOCKED_ACTIONS.labels(code=outcome.code.value).inc()
        if outcome.dead_letter_id is not None and outcome.code is not None:
            DEAD_LETTERS.labels(code=outcome.code.value).inc()
    if drained:
        EVENTS_DRAINED.inc(drained)


def record_blocked(codes: Sequence[ErrorCode]) -> None:
    """Buffered steps rejected when drained: blocked, though their own answer was BUFFER."""
    for code in codes:
        BLOCKED_ACTIONS.labels(code=code.value).inc()


def record_buffer_timeouts(count: int) -> None:
    DEAD_LETTERS.labels(code=ErrorCode.BUFFER_TIMEOUT.value).inc(count)


PENDING_EVENTS = _gauge(  # the scrape's own reading, whichever process answers it
    "nexus_pending_events",
    "Events in the reordering buffer (read from Postgres at scrape).",
)
OUTBOX_ENTRIES = _gauge(
    "nexus_outbox_entries",
    "Undelivered notifications by state, pending or dead (read from Postgres at scrape).",
    ["state"],
)
for _state in ("pending", "dead"):
    OUTBOX_ENTRIES.labels(state=_state)
OUTBOX_OLDEST_PENDING = _gauge(
    "nexus_outbox_oldest_pending_seconds",
    "Age of the oldest undelivered (pending) notification, 0 when none (read from Postgres at scrape).",
)
READY = _gauge(
    "nexus_ready",
    "1 when the gateway's database answered at this scrape (as /readyz asks it), else 0.",
)
HTTP_ERRORS = _counter(
    "nexus_http_errors_total",
    "Answers of the HTTP API in the error shape, by code (DATABASE_UNAVAILABLE: the database was unreachable).",
    ["code"],
)
for _code in ErrorCode:
    HTTP_ERRORS.labels(code=_code.value)


def record_http_error(code: str) -> None:
    """An answer in the error shape; a code outside `ErrorCode` (none is expected) counts as `other`."""
    HTTP_ERRORS.labels(code=code if code in _ERROR_CODES else "other").inc()


_ERROR_CODES = frozenset(code.value for code in ErrorCode)

# The HTTP server's turn budget (nexus.ingress.turns).
HTTP_DEFERRED = _counter(
    "nexus_http_deferred_total",
    "Request heads and connection closes the HTTP server put off to a later turn of its event loop, by what.",
    ["what"],
)
HTTP_DEFERRED_BY_WHAT = {what: HTTP_DEFERRED.labels(what=what) for what in ("head", "close")}
"""Its series (born at zero), by what is put off."""

# Webhook delivery (nexus.delivery.dispatcher).
DELIVERY_RESULTS = ("delivered", "retry_scheduled", "dead_max_attempts", "dead_rejected", "released")
WEBHOOK_DELIVERIES = _counter(
    "nexus_webhook_deliveries_total",
    "Result of each webhook delivery attempt, as recorded in Postgres.",
    ["result"],
)
WEBHOOK_REQUEST_SECONDS = _histogram(
    "nexus_webhook_request_seconds",
    "Duration of webhook requests, from send to response or failure.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
CIRCUIT_BREAKER_STATE = _gauge(  # one dispatcher (the first process) sets it
    "nexus_circuit_breaker_state",
    "Circuit breaker of each subscription: 0 closed, 1 half-open, 2 open.",
    ["subscription"],
)
CIRCUIT_BREAKER_TRANSITIONS = _counter(
    "nexus_circuit_breaker_transitions_total",
    "Circuit breaker state changes made by this instance, by the state entered.",
    ["to"],
)
OTHER_SUBSCRIPTIONS = "other"
_breaker_labels: set[str] = set()


def set_breaker_states(states: dict[str, int], max_series: int) -> None:
    """One breaker series per enabled subscription, for the first `max_series` (the dict's order);
    the rest share the series `other` (their worst state). Series of subscriptions gone or disabled
    are removed, so the label set stays bounded whoever creates subscriptions."""
    names = list(states)
    own = names[:max_series]
    wanted = {name: states[name] for name in own}
    rest = [states[name] for name in names[max_series:]]
    if rest:
        wanted[OTHER_SUBSCRIPTIONS] = max(rest)
    for stale in _breaker_labels - set(wanted):
        if _multiprocess_dir is None:
            CIRCUIT_BREAKER_STATE.remove(stale)
        else:  # prometheus_client cannot remove a series from its files: a gone subscription reads closed
            CIRCUIT_BREAKER_STATE.labels(subscription=stale).set(0)
    for name, gauge in wanted.items():
        CIRCUIT_BREAKER_STATE.labels(subscription=name).set(gauge)
    _breaker_labels.clear()
    _breaker_labels.update(wanted)


def set_breaker_state(name: str, gauge: int) -> None:
    """A transition seen by this instance, on an existing series only (never a new label)."""
    if name in _breaker_labels:
        CIRCUIT_BREAKER_STATE.labels(subscription=name).set(gauge)


for _result in DELIVERY_RESULTS:
    WEBHOOK_DELIVERIES.labels(result=_result)
for _to in ("closed", "open", "half_open"):
    CIRCUIT_BREAKER_TRANSITIONS.labels(to=_to)


# --- sagas ------------------------------------------------------------------------------------
SAGA_STEPS = _counter(
    "nexus_saga_steps_total",
    "Calls of saga steps to services, by action (forward, compensate) and result (core.saga labels).",
    ["action", "result"],
)
SAGAS = _gauge("nexus_sagas", "Sagas by status.", ["status"])
for _status in ("PENDING", "RUNNING", "COMPLETED", "COMPENSATING", "COMPENSATED", "FAILED", "ESCALATED"):
    SAGAS.labels(status=_status).set(0)


def record_saga_step(action: str, result: str) -> None:
    SAGA_STEPS.labels(action=action, result=result).inc()


def set_saga_counts(counts: dict[str, int]) -> None:
    for status in ("PENDING", "RUNNING", "COMPLETED", "COMPENSATING", "COMPENSATED", "FAILED", "ESCALATED"):
        SAGAS.labels(status=status).set(counts.get(status, 0))


# --- the database's tables (read from the catalog at scrape: no table is scanned) ---------------
TABLE_ROWS = _gauge("nexus_table_rows", "Approximate rows per table (the planner's estimate).", ["table"])
TABLE_BYTES = _gauge("nexus_table_bytes", "Bytes per table, its indexes and TOAST included.", ["table"])


def set_table_stats(rows: dict[str, int], sizes: dict[str, int]) -> None:
    """One series per table of the gateway's schema (a bounded set: the migrations make them)."""
    for table, count in rows.items():
        TABLE_ROWS.labels(table=table).set(count)
    for table, size in sizes.items():
        TABLE_BYTES.labels(table=table).set(size)


SAGA_RETRYING = _gauge(
    "nexus_saga_retrying",
    "Open sagas whose current call to the service failed at least once and has not succeeded yet (from PostgreSQL).",
    ["service"],
)
SAGA_RETRYING_OLDEST = _gauge(
    "nexus_saga_retrying_oldest_seconds",
    "Seconds since the longest-retrying saga of the service began retrying (0: none retrying).",
    ["service"],
)
_retrying_services: set[str] = set()


def born_saga_services(services: Iterable[str]) -> None:
    """The effect services of the registered processes, at zero until a saga retries: the alert's series exist
    from the start (the gateway calls this once its processes are registered)."""
    set_saga_retrying({service: (0, 0.0) for service in services})


def set_saga_retrying(rows: dict[str, tuple[int, float]]) -> None:
    """Per service, (retrying sagas, seconds the oldest has retried); a service seen before and absent now: 0."""
    _retrying_services.update(rows)
    for service in _retrying_services:
        count, oldest_s = rows.get(service, (0, 0.0))
        SAGA_RETRYING.labels(service=service).set(count)
        SAGA_RETRYING_OLDEST.labels(service=service).set(oldest_s)


# --- quotas on what a tenant stores (read at scrape from PostgreSQL: nexus.auth.quotas) -----------------
TENANT_QUOTA_USED = _gauge(
    "nexus_tenant_quota_used", "What a tenant stores, by quota (from PostgreSQL's usage table).", ["tenant", "quota"]
)
TENANT_QUOTA_LIMIT = _gauge(
    "nexus_tenant_quota_limit", "A tenant's quota, by quota name (0: no quota).", ["tenant", "quota"]
)
OTHER_TENANTS = "other"
_QUOTA_NAMES = tuple(quota.value for quota in Quota)
_quota_tenants: set[str] = set()


def set_tenant_quotas(tenants: dict[str, tuple[dict[str, int], dict[str, int]]], max_series: int) -> None:
    """Per tenant (the dict's order, most used first) its (used, limit) by quota, for the first `max_series`;
    the rest share the series `other` (their sums). Series of tenants no longer listed read 0, so the label
    set stays bounded whoever creates tenants (as the breaker series of subscriptions)."""
    names = list(tenants)
    wanted = {name: tenants[name] for name in names[:max_series]}
    rest = [tenants[name] for name in names[max_series:]]
    if rest:
        wanted[OTHER_TENANTS] = (
            {q: sum(used.get(q, 0) for used, _ in rest) for q in rest[0][0]},
            {q: sum(limits.get(q, 0) for _, limits in rest) for q in rest[0][1]},
        )
    for stale in _quota_tenants - set(wanted):
        for quota in _QUOTA_NAMES:
            TENANT_QUOTA_USED.labels(tenant=stale, quota=quota).set(0)
    for name, (used, limits) in wanted.items():
        for quota in _QUOTA_NAMES:
            TENANT_QUOTA_USED.labels(tenant=name, quota=quota).set(used.get(quota, 0))
            TENANT_QUOTA_LIMIT.labels(tenant=name, quota=quota).set(limits.get(quota, 0))
    _quota_tenants.clear()
    _quota_tenants.update(wanted)


# --- one exposition for several processes --------------------------------------------
_multiprocess_dir: str | None = None
_exposed: CollectorRegistry = REGISTRY


def expose_all_processes(directory: str) -> None:
    """Make `exposition()` read every process's series from `directory` (PROMETHEUS_MULTIPROC_DIR, set
    before prometheus_client was imported) instead of this process's registry."""
    from prometheus_client.multiprocess import MultiProcessCollector

    global _exposed, _multiprocess_dir  # set once at a worker's start, before it serves
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]  # prometheus_client leaves it untyped
    _exposed, _multiprocess_dir = registry, directory


def exposition() -> bytes:
    """The text of /metrics: this process's series, or every worker's (`expose_all_processes`)."""
    return generate_latest(_exposed)


# --- retention (nexus.retention: set by the process running the remover) --------------------------
RETENTION_REMOVED = _counter("nexus_retention_removed_orders_total", "Finished orders removed after their period.")
RETENTION_OLDEST_FINISHED = _gauge(
    "nexus_retention_oldest_finished_seconds", "Age of the oldest finished order not yet removed (0: none)."
)
RETENTION_OVERDUE = _gauge(
    "nexus_retention_overdue_seconds",
    "How far past its retention period the most overdue finished order still present is (0: none is due).",
)
