"""Webhook subscriptions and dead deliveries: the operations behind the CLI and the HTTP API.

A subscription is an endpoint (url, secret, optional event-type filter). `Gateway.submit` writes one
delivery per (notification, enabled subscription) in the applying transaction, so each subscriber has
its own queue (a bulkhead): a dead or slow one never delays another. A subscription added later does
not receive notifications created before it; a disabled one keeps its pending deliveries, unsent,
until it is enabled again (the upsert of the same name re-enables it).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import uuid
from collections.abc import Sequence
from typing import Any

from nexus.auth.urlguard import PrivateAllowance, check_url, redact
from nexus.core.breaker import BreakerState
from nexus.core.delivery import DeliveryState, redrive
from nexus.delivery.formats import FORMATS, NATIVE
from nexus.delivery.signing import parse_secret
from nexus.errors import ConfigurationError, NotFoundError
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.found import require_row
from nexus.store.queries import query
from nexus.store.rows import row_json
from nexus_wire.envelope import is_safe_identifier

log = logging.getLogger(__name__)

DEFAULT_NAME = "default"


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    id: int
    name: str
    url: str
    event_types: tuple[str, ...] | None
    enabled: bool
    created_at: dt.datetime
    breaker_state: BreakerState = BreakerState.CLOSED
    tenant_id: str | None = None  # None: every tenant (an operator's subscription)
    format: str = NATIVE

    @classmethod
    def of(cls, row: Any) -> Subscription:
        types = row["event_types"]
        return cls(
            id=row["id"],
            name=row["name"],
            url=row["url"],
            event_types=tuple(types) if types is not None else None,
            enabled=row["enabled"],
            created_at=row["created_at"],
            breaker_state=BreakerState(row.get("breaker_state") or BreakerState.CLOSED),
            tenant_id=row.get("tenant_id"),
            format=row.get("format", NATIVE),
        )

    def as_json(self) -> dict[str, Any]:
        """The public view: never the secret, nor credentials in the URL (query values are redacted)."""
        return {
            "id": self.id,
            "name": self.name,
            "url": redact(self.url),
            "tenant": self.tenant_id if self.tenant_id is not None else "*",
            "format": self.format,
            "event_types": list(self.event_types) if self.event_types is not None else None,
            "enabled": self.enabled,
            "created_at": self.created_at.isoformat(),
            "breaker_state": self.breaker_state.value,
        }


def _validate(url: str, secret: str, fmt: str, allowance: PrivateAllowance | None) -> None:
    """`allowance` None: a URL from configuration (trusted, only its scheme is checked)."""
    if allowance is None:
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError("webhook url must be http(s)")
    else:
        check_url(url, allowance)
    if fmt not in FORMATS:
        raise ConfigurationError(f"format must be one of {', '.join(FORMATS)}")
    parse_secret(secret)


async def add_subscription(
    db: Database,
    name: str,
    url: str,
    secret: str,
    event_types: Sequence[str] | None = None,
    *,
    replace: bool = False,
    tenant_id: str | None = None,
    fmt: str = NATIVE,
    trusted: bool = False,
) -> Subscription:
    """Create a subscription (or, with `replace`, update the one of the same name and enable it).

    `tenant_id` None: it receives every tenant's notifications. Unless `trusted` (configuration), the URL
    goes through the outbound guard (NEXUS_ALLOW_PRIVATE_URLS from the database's settings)."""
    if not is_safe_identifier(name):
        raise ConfigurationError("a subscription name is 1-200 characters of A-Za-z0-9._:@- (letter or digit first)")
    allowance = None if trusted else PrivateAllowance.parse(db.settings.allow_private_urls)
    _validate(url, secret, fmt, allowance)
    types = list(event_types) if event_types else None
    sql = query("delivery.sql", "upsert_subscription" if replace else "insert_subscription")
    row = await db.fetchrow(sql, name, url, secret, types, tenant_id, fmt)
    assert row is not None
    await db.execute(query("delivery.sql", "ensure_breakers"), [row["id"]])
    return Subscription.of(row)


async def list_subscriptions(db: Database, tenant_id: str | None = None) -> list[Subscription]:
    """Every subscription, or (with `tenant_id`) that tenant's."""
    return [Subscription.of(r) for r in await db.fetch(query("delivery.sql", "list_subscriptions"), tenant_id)]


async def disable_subscription(db: Database, id_or_name: str, tenant_id: str | None = None) -> Subscription:
    """Stop claiming for a subscription; its pending deliveries stay pending."""
    sql = query("delivery.sql", "disable_subscription")
    return Subscription.of(await require_row(db, sql, id_or_name, tenant_id, missing=f"no subscription {id_or_name!r}"))


async def ensure_default_subscription(db: Database, settings: Settings) -> Subscription | None:
    """The subscription named "default" from NEXUS_WEBHOOK_URL and NEXUS_WEBHOOK_SECRET, if the URL is set.

    Every gateway process calls this at start, so it is an upsert: concurrent starts agree, and a
    changed URL or secret in the environment replaces the stored one.
    """
    if not settings.webhook_url:
        return None
    if not settings.webhook_secret:
        raise ConfigurationError("NEXUS_WEBHOOK_URL is set but NEXUS_WEBHOOK_SECRET (whsec_...) is not")
    sub = await add_subscription(
        db, DEFAULT_NAME, settings.webhook_url, settings.webhook_secret, replace=True, trusted=True
    )
    log.info("default subscription", extra={"action": "subscription", "subscription": sub.name, "url": redact(sub.url)})
    return sub


def _dead_json(row: Any) -> dict[str, Any]:
    return row_json(row, _DEAD_FIELDS)


_DEAD_FIELDS = (
    "outbox_id", "subscription_id", "subscription", "order_id", "position", "event_type", "attempts",
    "last_status", "last_error", "dead_reason", "dead_at",
)  # fmt: skip


async def list_dead_deliveries(
    db: Database, subscription_id: int | None = None, limit: int = 100, offset: int = 0, tenant_id: str | None = None
) -> list[dict[str, Any]]:
    rows = await db.fetch(query("delivery.sql", "dead_deliveries"), subscription_id, limit, offset, tenant_id)
    return [_dead_json(r) for r in rows]


async def redrive_delivery(
    db: Database, outbox_id: uuid.UUID, subscription_id: int, tenant_id: str | None = None
) -> dict[str, Any]:
    """Send a dead delivery again, with fresh attempts, when it is its order's oldest pending one."""
    with wrap_db_errors():
        async with db.pool.acquire() as conn, conn.transaction():
            found = await conn.fetchrow(query("delivery.sql", "delivery_order"), outbox_id, subscription_id, tenant_id)
            row = None
            if found is not None:
                tenant, order_id = found["tenant_id"], found["order_id"]
                # Under the order's advisory lock, like every change of an order's head (migration 0003).
                await conn.execute(query("gateway.sql", "lock_orders"), [tenant], [order_id])
                row = await conn.fetchrow(
                    query("delivery.sql", "redrive_delivery"),
                    outbox_id,
                    subscription_id,
                    redrive(DeliveryState.DEAD).value,
                    DeliveryState.DEAD.value,
                )
                if row is not None:
                    await conn.execute(query("delivery.sql", "clear_heads"), subscription_id, order_id, tenant)
                    await conn.execute(query("delivery.sql", "promote_heads"), [subscription_id], [order_id], [tenant])
    if row is None:
        raise NotFoundError(f"no dead delivery {outbox_id}/{subscription_id}")
    log.info(
        "delivery redriven",
        extra={"action": "redrive", "order_id": row["order_id"], "outbox_id": str(outbox_id)},
    )
    return {"outbox_id": str(row["outbox_id"]), "subscription_id": row["subscription_id"], "state": "pending"}


async def accounting(db: Database, tenant_id: str | None = None) -> list[dict[str, Any]]:
    """Per subscription of `tenant_id` (None: every tenant): total deliveries and how many are delivered, dead,
    pending, counted in SQL."""
    return [dict(r) for r in await db.fetch(query("delivery.sql", "accounting"), tenant_id)]
