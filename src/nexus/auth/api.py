"""HTTP API of API keys (role admin): create (the key is in the answer, once), list, revoke.

An admin key of one tenant manages that tenant's keys only; an admin key spanning every tenant (the
bootstrap key) manages all."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from nexus.auth import keys
from nexus.auth.middleware import principal_of
from nexus.auth.oauth import OAuthVerifier
from nexus.auth.roles import InvalidKeyNameError, InvalidTenantError, parse_roles
from nexus.error_shape import error_response
from nexus.errors import ErrorCode
from nexus.store.database import Database
from nexus_wire.envelope import INT64_MAX

router = APIRouter(tags=["keys"])


class NewKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(min_length=1, max_length=200, description="a tenant (an identifier), or '*' for every tenant")
    roles: list[str] = Field(min_length=1, max_length=8, description="agent, operator, approver, admin")
    name: str | None = Field(default=None, max_length=200)


def _db(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


@router.post("/v1/keys", status_code=201)
async def create_key(request: Request, body: NewKey) -> JSONResponse:
    own = principal_of(request).tenant_id
    if own is not None and body.tenant != own:
        return error_response(403, ErrorCode.FORBIDDEN, "this key manages keys of its own tenant only")
    try:
        roles = parse_roles(body.roles)
        record, key = await keys.create_key(_db(request), body.tenant, roles, body.name)
    except (InvalidTenantError, InvalidKeyNameError) as exc:
        return error_response(422, ErrorCode.INVALID_IDENTIFIER, str(exc))
    except ValueError:
        message = "roles are agent, operator, approver, admin; only operator or admin keys may span every tenant"
        return error_response(422, ErrorCode.INVALID_REQUEST, message)
    return JSONResponse({**record.as_json(), "key": key}, status_code=201)


@router.get("/v1/identity")
async def identity(request: Request) -> dict[str, Any]:
    """The calling key (or access token) as the gateway sees it: its key id (null for a token), name, tenant
    (null: every tenant), roles (any role; a client such as `nexus mcp --stdio` shows only what its key may
    call) and its decision-log actor."""
    principal = principal_of(request)
    roles = sorted(role.value for role in principal.roles)
    key_id = principal.key_id if principal.issuer is None else None
    tenant = principal.tenant_id
    return {"key_id": key_id, "name": principal.name, "tenant": tenant, "roles": roles, "actor": principal.actor}


@router.get("/.well-known/oauth-protected-resource", include_in_schema=False)
@router.get("/.well-known/oauth-protected-resource/mcp", include_in_schema=False)
async def protected_resource(request: Request) -> JSONResponse:
    """RFC 9728's Protected Resource Metadata (one document for the API and `/mcp`, whose tokens are the same);
    404 while OAuth is off."""
    oauth: OAuthVerifier | None = request.app.state.oauth
    if oauth is None:
        return error_response(404, ErrorCode.NOT_FOUND, "OAuth is off here (NEXUS_PUBLIC_URL is unset)")
    return JSONResponse(oauth.resource.metadata(), headers={"cache-control": "public, max-age=300"})


@router.get("/v1/keys")
async def list_keys(request: Request) -> dict[str, Any]:
    listed = await keys.list_keys(_db(request), principal_of(request).tenant_id)
    return {"keys": [k.as_json() for k in listed]}


@router.post("/v1/keys/{key_id}/revoke")
async def revoke_key(request: Request, key_id: Annotated[int, Path(ge=1, le=INT64_MAX)]) -> dict[str, Any]:
    return (await keys.revoke_key(_db(request), key_id, principal_of(request).tenant_id)).as_json()
