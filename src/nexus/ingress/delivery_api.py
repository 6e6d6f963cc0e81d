"""HTTP API of webhook subscriptions and dead deliveries (a FastAPI router the app includes).

The Database comes from ``request.app.state.db``, so the router needs nothing else from the app.
Secrets are accepted on creation and never returned.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from nexus.auth.middleware import principal_of
from nexus.auth.roles import ALL_TENANTS, TENANT_PATTERN
from nexus.delivery import subscriptions as subs
from nexus.delivery.signing import generate_secret
from nexus.error_shape import error_response
from nexus.errors import ConfigurationError, PermanentDatabaseError
from nexus.store.database import Database
from nexus_wire.envelope import SAFE_IDENTIFIER_PATTERN

router = APIRouter(tags=["delivery"])


INT64_MAX = 2**63 - 1
# A subscription's name is a metric label and a CLI argument: the identifier character set.
Name = Annotated[str, Field(min_length=1, max_length=200, pattern=SAFE_IDENTIFIER_PATTERN)]


class NewSubscription(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name
    url: str
    secret: str | None = Field(default=None, description="whsec_<base64>; generated and returned if absent")
    event_types: list[str] | None = None
    format: str = Field(default="native", description="native | cloudevents (CloudEvents 1.0 structured)")
    tenant: str | None = Field(
        default=None,
        max_length=200,
        pattern=TENANT_PATTERN,
        description="only for keys spanning every tenant: bind the subscription to one tenant ('*': every tenant)",
    )


def _db(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


@router.get("/v1/subscriptions")
async def list_subscriptions(request: Request) -> dict[str, Any]:
    tenant = principal_of(request).tenant_id
    return {"subscriptions": [s.as_json() for s in await subs.list_subscriptions(_db(request), tenant)]}


@router.post("/v1/subscriptions", status_code=201)
async def create_subscription(request: Request, body: NewSubscription) -> JSONResponse:
    secret = body.secret or generate_secret()
    principal = principal_of(request)
    # A tenant's key makes its tenant's subscription; a key spanning every tenant may bind one or span all.
    tenant = principal.tenant_id if principal.tenant_id is not None else body.tenant
    if tenant == ALL_TENANTS:
        tenant = None
    try:
        sub = await subs.add_subscription(
            _db(request), body.name, body.url, secret, body.event_types, tenant_id=tenant, fmt=body.format
        )
    except ConfigurationError as exc:
        return error_response(422, exc.code, exc.message)
    except PermanentDatabaseError as exc:  # the name is taken in this tenant (names are unique per tenant)
        return error_response(409, exc.code, "a subscription of this tenant already has this name")
    content = sub.as_json()
    if body.secret is None:
        content["secret"] = secret  # shown once, so the subscriber can verify signatures
    return JSONResponse(content, status_code=201)


@router.post("/v1/subscriptions/{id_or_name}/disable")
async def disable_subscription(
    request: Request, id_or_name: Annotated[str, Path(pattern=SAFE_IDENTIFIER_PATTERN, max_length=200)]
) -> dict[str, Any]:
    tenant = principal_of(request).tenant_id
    return (await subs.disable_subscription(_db(request), id_or_name, tenant)).as_json()


@router.get("/v1/deliveries/dead")
async def dead_deliveries(
    request: Request,
    subscription_id: Annotated[int | None, Query(ge=1, le=INT64_MAX)] = None,
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0, le=INT64_MAX),
) -> dict[str, Any]:
    tenant = principal_of(request).tenant_id
    rows = await subs.list_dead_deliveries(_db(request), subscription_id, limit, offset, tenant)
    return {"deliveries": rows}


@router.post("/v1/deliveries/{outbox_id}/{subscription_id}/redrive")
async def redrive(
    request: Request, outbox_id: uuid.UUID, subscription_id: Annotated[int, Path(ge=1, le=INT64_MAX)]
) -> dict[str, Any]:
    return await subs.redrive_delivery(_db(request), outbox_id, subscription_id, principal_of(request).tenant_id)
