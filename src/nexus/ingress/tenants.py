"""The tenant of a step comes from its caller, never from its body.

An HTTP caller's key names one tenant (or every tenant); a Kafka topic is bound to one tenant by
configuration (`NEXUS_KAFKA_TENANT`). An envelope that names no tenant takes the caller's; one that names
another is a TENANT_MISMATCH (HTTP: the request is refused with 403 and nothing is written; Kafka: the
record is dead-lettered).
"""

from __future__ import annotations

import dataclasses

from nexus.core import wording
from nexus.core.decide.items import Incoming
from nexus.errors import ErrorCode, InvalidEventError


def bind(
    item: Incoming,
    tenant: str | None,
    actor: str | None = None,
    actor_name: str | None = None,
    *,
    weight: int = 0,
) -> Incoming | None:
    """`item` bound to `tenant` (None: a caller spanning every tenant, the envelope's own tenant stands) and
    to who proposed it (`actor`, `actor_name`: the decision log's, core/actors.py), with its `weight` when its
    parser weighed it (`Incoming.weight`; 0 keeps the item's); None if the envelope explicitly names another
    tenant."""
    env = item.envelope
    weight = weight or item.weight
    if env is None:
        return dataclasses.replace(
            item, tenant_id=tenant or "default", actor=actor, actor_name=actor_name, weight=weight
        )
    if tenant is None:
        return dataclasses.replace(item, tenant_id=env.tenant_id, actor=actor, actor_name=actor_name, weight=weight)
    if "tenant_id" in env.model_fields_set and env.tenant_id != tenant:
        return None
    if env.tenant_id != tenant:
        env = env.model_copy(update={"tenant_id": tenant})
    return dataclasses.replace(item, envelope=env, tenant_id=tenant, actor=actor, actor_name=actor_name, weight=weight)


def bind_or_dead_letter(
    item: Incoming, tenant: str, actor: str | None = None, actor_name: str | None = None
) -> Incoming:
    """Kafka: a record naming another tenant than its topic's becomes a TENANT_MISMATCH dead letter."""
    bound = bind(item, tenant, actor, actor_name)
    if bound is not None:
        return bound
    assert item.envelope is not None
    error = InvalidEventError(wording.tenant_mismatch(tenant), code=ErrorCode.TENANT_MISMATCH)
    return dataclasses.replace(item, envelope=None, error=error, tenant_id=tenant, actor=actor, actor_name=actor_name)
