"""Bulkheads: how many of a dispatcher's worker slots one tenant, and one subscription, may hold. Pure.

A worker slot is held for as long as its request runs: a subscriber that hangs holds it until the request
timeout. Without bulkheads, one tenant's slow or hanging endpoints (20 subscriptions that never answer)
take every slot and another tenant's deliveries wait behind them for as long as the hangs last. So:

* a tenant holds at most `per_tenant` slots at once (`NEXUS_DELIVERY_MAX_INFLIGHT_PER_TENANT`, default
  half of the webhook workers: 8 of 16), whatever number of subscriptions it has;
* a subscription holds at most `per_subscription` (`NEXUS_DELIVERY_MAX_INFLIGHT_PER_SUBSCRIPTION`,
  default all the workers: alone, a subscriber is served as fast as before);
* claims are shared fairly: each claim round offers the free slots to the tenants in turn (the first
  tenant of a round is the next one each time), each tenant's share to its subscriptions in turn.

While only one tenant has subscriptions (enabled ones, whatever their breakers say) there is nobody to
protect: its bulkhead is all the workers, so a single-tenant gateway delivers as fast as before. As soon
as a second tenant has a subscription, every tenant is held to `per_tenant` again (slots already held
beyond it are not taken back: they end with their requests, within the webhook timeout).

The tenant of a slot is the subscription's (its owner's endpoint is what holds it); a subscription of
every tenant (an operator's, tenant NULL) is a tenant of its own, `*`. The counts are this process's:
each dispatcher process has its own workers and its own bulkheads, so the limits are per process and are
not divided by the process count (a tenant holds at most `per_tenant` slots in each process).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TypeVar

from nexus.auth.roles import ALL_TENANTS

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class BulkheadConfig:
    """The caps, validated: at least one slot each, never more than the workers."""

    workers: int
    per_tenant: int
    per_subscription: int

    @classmethod
    def of(cls, workers: int, per_tenant: int | None, per_subscription: int | None) -> BulkheadConfig:
        """Defaults: half the workers (at least 1) per tenant, all the workers per subscription."""
        workers = max(1, workers)
        tenant = per_tenant if per_tenant is not None else max(1, workers // 2)
        subscription = per_subscription if per_subscription is not None else workers
        if tenant < 1 or subscription < 1:
            raise ValueError("a bulkhead holds at least one slot")
        return cls(workers, min(tenant, workers), min(subscription, workers))


def tenant_key(tenant_id: str | None) -> str:
    """The bulkhead of a subscription's tenant (None: every tenant's subscription, a bulkhead of its own)."""
    return ALL_TENANTS if tenant_id is None else tenant_id


class Bulkheads:
    """The slots held now, per tenant and per subscription, and how many more each may take."""

    def __init__(self, config: BulkheadConfig) -> None:
        self.config = config
        self._tenants: Counter[str] = Counter()
        self._subscriptions: Counter[int] = Counter()
        self.shared = True
        """Whether more than one tenant has subscriptions (else the one there is may use every worker)."""

    def tenant_room(self, tenant: str) -> int:
        cap = self.config.per_tenant if self.shared else self.config.workers
        return max(0, cap - self._tenants[tenant])

    def room(self, tenant: str, subscription_id: int) -> int:
        """How many more slots the subscription may take now (its tenant's room included)."""
        return min(
            self.tenant_room(tenant), max(0, self.config.per_subscription - self._subscriptions[subscription_id])
        )

    def take(self, tenant: str, subscription_id: int) -> None:
        self._tenants[tenant] += 1
        self._subscriptions[subscription_id] += 1

    def release(self, tenant: str, subscription_id: int) -> None:
        self._tenants[tenant] -= 1
        self._subscriptions[subscription_id] -= 1
        if self._tenants[tenant] <= 0:
            del self._tenants[tenant]
        if self._subscriptions[subscription_id] <= 0:
            del self._subscriptions[subscription_id]

    def held(self, tenant: str) -> int:
        return self._tenants[tenant]


def in_turn(subscriptions: Iterable[tuple[int, str]], turn: int) -> list[tuple[str, list[int]]]:
    """The claimable subscriptions grouped by tenant, the tenants and each tenant's subscriptions rotated by
    `turn` so that every one of them goes first in its turn (the order of the input is kept otherwise)."""
    groups: dict[str, list[int]] = {}
    for subscription_id, tenant in subscriptions:
        groups.setdefault(tenant, []).append(subscription_id)
    tenants = _rotated(list(groups), turn)
    return [(tenant, _rotated(groups[tenant], turn)) for tenant in tenants]


def share(left: int, among: int) -> int:
    """An even share of `left` slots among `among` takers, rounded up (the last ones get what remains)."""
    return -(-left // among) if among > 0 else 0


def _rotated(items: Sequence[T], turn: int) -> list[T]:
    if not items:
        return []
    k = turn % len(items)
    return [*items[k:], *items[:k]]
