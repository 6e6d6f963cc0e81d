"""The OpenAPI document at `/openapi.json`, finished where the framework's own leaves it short.

FastAPI derives each operation from its route; this adds what the routes cannot say themselves: the
bearer key (`securitySchemes`, required on every operation but `/healthz` and `/readyz`), every error
answer as the one JSON shape (`/metrics` answers text, its errors do not), 431 for an oversized head,
and `POST /v1/events`' 202 (a single envelope HELD for a person's approval). schemathesis checks the
running gateway against this document (tests/integration/test_fuzz.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

PUBLIC_PATHS = frozenset({"/healthz", "/readyz"})
_ERROR_SCHEMA = {"$ref": "#/components/schemas/ErrorBody"}
_RESULTS = {
    "type": "object",
    "required": ["results"],
    "properties": {"results": {"type": "array", "items": {"type": "object"}}},
}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR_SCHEMA}}}


def document(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document, built once."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, routes=app.routes, description=app.description)
    components = doc.setdefault("components", {})
    components.setdefault("securitySchemes", {})["bearer"] = {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key (`nxk_...`); its roles and tenant decide what it may call and see.",
    }
    doc["security"] = [{"bearer": []}]
    for path, operations in doc.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            for status, response in list(responses.items()):
                if status[:1] in ("4", "5"):
                    responses[status] = _error(response.get("description", "Error"))
            responses.setdefault("431", _error("Request line and headers too large (INVALID_REQUEST)"))
            if path in PUBLIC_PATHS:
                operation["security"] = []
            if (method, path) == ("post", "/v1/events"):
                responses["200"] = {
                    "description": "The decision for each envelope",
                    "content": {"application/json": {"schema": _RESULTS}},
                }
                responses["202"] = {
                    "description": "A single envelope HELD for a person's approval (`approval_id` in its result)",
                    "content": {"application/json": {"schema": _RESULTS}},
                }
    app.openapi_schema = doc
    return doc


def install(app: FastAPI) -> None:
    app.openapi = lambda: document(app)  # type: ignore[method-assign]  # FastAPI's documented way to replace the schema builder
