"""Fuzzing a real `nexus serve` (bounded, part of `make test`; `make fuzz` runs it longer via NEXUS_FUZZ_EXAMPLES).

* schemathesis, every operation of /openapi.json with keys of every role, its five checks (no 5xx;
  status, content type, body and headers as published), no driver text in a body;
* Hypothesis, arbitrary JSON (deep nesting, huge numbers, odd strings) sent as events while valid
  traffic runs beside it: every valid event applies once and every answer has the one error shape.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from nexus.auth.keys import hash_key
from tests.conftest import (
    NexusProcess,
    PostgresForTests,
    api_headers,
    fast_settings,
    free_port,
    settings_env,
    wait_http,
)
from tests.factories import step_json

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("NEXUS_FUZZ_EXAMPLES", "8"))
DRIVER_WORDS = ("asyncpg", "Traceback", "SQLSTATE", "pkey", "psycopg", "UniqueViolation", "DataError")


# Keys of every role the fuzz calls with: each role of tenant "default", and the keys spanning every
# tenant (operator, admin). Created in the test database before the server starts.
ROLE_KEYS = {
    "agent": ("default", "agent"),
    "operator": ("default", "operator"),
    "approver": ("default", "approver"),
    "admin": ("default", "admin"),
    "every-tenant operator": (None, "operator"),
    "every-tenant admin": (None, "admin"),
}
# The five checks, every one of them: the answer is no 5xx, its status, content type, body and headers
# are the ones the document declares for the operation.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


async def _add_keys(database_url: str) -> dict[str, str]:
    conn = await asyncpg.connect(database_url)
    try:
        made = {}
        for name, (tenant, role) in ROLE_KEYS.items():
            key = f"nxk_fuzz-{uuid.uuid4().hex}"
            await conn.execute(
                "INSERT INTO api_keys (name, tenant_id, roles, key_hash) VALUES ($1, $2, $3, $4)",
                f"fuzz-{name}",
                tenant,
                [role],
                hash_key(key),
            )
            made[name] = key
        # The one a generated revoke may take: any other id would revoke a key these requests carry.
        await conn.execute(
            "INSERT INTO api_keys (name, tenant_id, roles, key_hash) VALUES ('sacrificial', 'default', $1, $2)",
            ["agent"],
            hash_key(f"nxk_fuzz-{uuid.uuid4().hex}"),
        )
        return made
    finally:
        await conn.close()


@pytest.fixture
def fuzz_server(pg: PostgresForTests, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """One `nexus serve` per test (a fresh database: one test's requests cannot change another's keys or
    orders); yields (base url, database url). Rate limits and the failed-authentication throttle are off:
    the fuzz sends far more than a client would."""
    database_url = asyncio.run(pg.new_database())
    port = free_port()
    settings_ = fast_settings(
        database_url,
        http_port=port,
        max_events_per_request=50,
        rate_limit_agent=0.0,
        rate_limit_operator=0.0,
        rate_limit_approver=0.0,
        rate_limit_admin=0.0,
        rate_limit_tenant=0.0,
        auth_failures_per_minute=0.0,
        stream_keepalive_s=0.2,
    )
    env = settings_env(settings_)
    log = tmp_path_factory.mktemp("fuzz") / "serve.log"
    proc = NexusProcess(["serve", "--no-dispatcher"], env, Path(log)).start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/healthz", proc=proc)
        yield base, database_url
    finally:
        proc.terminate()
    text = Path(log).read_text(errors="replace")
    assert "Exception in ASGI application" not in text
    assert "request failed" not in text  # every 5xx is logged so


def no_driver_text(response: Any) -> None:
    """No database driver's words in any answer."""
    found = [w for w in DRIVER_WORDS if w in response.text]
    assert not found, f"driver text {found} in {response.text[:300]}"


def test_every_operation_with_keys_of_every_role(fuzz_server: tuple[str, str]) -> None:
    """Generated requests to every operation of /openapi.json, with keys of every role (each of one tenant,
    and spanning every tenant): schemathesis' five checks pass (no 5xx; status, content type, body and
    headers as declared) and no answer carries driver text."""
    base, database_url = fuzz_server
    keys = asyncio.run(_add_keys(database_url))
    sacrificial = len(ROLE_KEYS) + 3  # ids: the tests' two keys, the role keys, then this one
    schema = schemathesis.openapi.from_url(base + "/openapi.json", headers=api_headers())
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    document = httpx.get(base + "/openapi.json", headers=api_headers()).json()
    bearer = document["components"]["securitySchemes"]["bearer"]
    assert (bearer["type"], bearer["scheme"]) == ("http", "bearer") and document["security"] == [{"bearer": []}]
    assert "202" in document["paths"]["/v1/events"]["post"]["responses"]
    assert list(document["paths"]["/v1/orders/{order_id}/stream"]["get"]["responses"]["200"]["content"]) == [
        "text/event-stream"
    ]

    for operation in operations:
        for role, key in keys.items():
            try:
                fuzz_operation(operation, key, sacrificial)
            except Exception as exc:
                exc.add_note(f"operation {operation.method.upper()} {operation.path}, key of role {role}")
                raise


def fuzz_operation(operation: Any, key: str, sacrificial_key_id: int) -> None:
    """EXAMPLES generated requests to `operation` with `key`, each checked by the five checks."""
    streamed = operation.path.endswith("/stream")

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(case=operation.as_strategy())
    def run(case: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {key}"}
        if case.path_parameters and "key_id" in case.path_parameters:
            case.path_parameters["key_id"] = sacrificial_key_id
        if case.query and "wait" in case.query:
            case.query["wait"] = "0.1"  # a long poll waits by design; its shape is what is fuzzed
        # A stream never ends by design: read until the timeout, then check what came (its status and headers,
        # and the keepalive comments sent every 0.2 s meanwhile).
        response = case.call(timeout=0.5 if streamed else 30)
        case.validate_response(response, checks=CHECKS)
        no_driver_text(response)

    run()


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=30),
    st.sampled_from(["\u0000", "\ud7ff", "a/b", "x\ny", "é", "0001-01-01T00:00+14:00", "2026-01-01"]),
)
any_json = st.recursive(
    json_leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)
hostile_body = st.one_of(
    any_json.map(lambda v: json.dumps(v).encode()),
    st.builds(lambda d: b"[" * d + b"]" * d, st.integers(min_value=30, max_value=3000)),
    st.sampled_from([b"[NaN]", b"[1e309]", b'{"a":1,"a":2}', b"\xff\xfe", b"{", b'"\\ud800"', b"1" * 5000]),
    any_json.map(
        lambda v: json.dumps({"events": [v, step_json("o-h", "p", 1, data=v if isinstance(v, dict) else {})]})
    ).map(str.encode),
)


def test_arbitrary_json_beside_valid_traffic(fuzz_server: tuple[str, str]) -> None:
    """Hostile bodies sent while valid plans run beside them: every valid event applies once, every error
    answer has the one shape, and no answer is a 5xx."""
    base, database_url = fuzz_server
    applied: list[str] = []
    client = httpx.Client(base_url=base, timeout=30, headers=api_headers())

    @settings(max_examples=EXAMPLES * 6, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(body=hostile_body)
    def run(body: bytes) -> None:
        order = f"o-fz-{uuid.uuid4().hex[:10]}"
        valid = step_json(order, "p-fz", 1)
        with httpx.Client(base_url=base, timeout=30, headers=api_headers()) as side:
            hostile = client.post("/v1/events", content=body, headers={"content-type": "application/json"})
            good = side.post("/v1/events", json=valid)
        assert hostile.status_code < 500, hostile.text[:300]
        if hostile.status_code >= 400:
            answer = hostile.json()
            assert {"code", "message", "request_id"} <= set(answer), answer
        assert not any(w in hostile.text for w in DRIVER_WORDS), hostile.text[:300]
        assert good.status_code == 200 and good.json()["results"][0]["decision"] == "APPLY", good.text
        applied.append(order)

    try:
        run()
    finally:
        client.close()

    async def outbox_rows() -> dict[str, int]:
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch(
                "SELECT order_id, count(*) AS n FROM outbox WHERE order_id = ANY($1) GROUP BY 1", applied
            )
        finally:
            await conn.close()
        return {r["order_id"]: r["n"] for r in rows}

    assert asyncio.run(outbox_rows()) == dict.fromkeys(applied, 1)
