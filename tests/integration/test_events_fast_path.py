"""`POST /v1/events` answered by the fast path is the framework route's answer, byte for byte."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any

import httpx

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.gateway import Gateway
from nexus.ingress.fast_events import EventsFastPath
from nexus.ingress.http import create_app
from nexus.ingress.http_server import _OneWritePerResponse
from nexus.settings import Settings
from tests.conftest import api_headers
from tests.factories import plan_json, step_json

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _framework_only(app: Any) -> Any:
    """The same app without the fast path: POST /v1/events goes through the framework's route."""
    app.user_middleware = [m for m in app.user_middleware if m.cls is not EventsFastPath]
    return app


def _comparable(response: httpx.Response) -> tuple[int, list[tuple[str, str]], Any]:
    headers = sorted((k, v) for k, v in response.headers.items() if k not in ("x-request-id", "content-length"))
    body = response.json()
    if isinstance(body, dict):
        body.pop("request_id", None)
    return response.status_code, headers, body


async def test_fast_path_answers_as_the_framework_route(db: Any, settings: Settings) -> None:
    """Applied, duplicate, rejected, malformed, refused (415, 413, 403 tenant, 401, 403 role) and batched
    requests get the same status, headers and body from the fast path as from the framework route; the
    request id is the caller's in both."""
    record, outsider = await create_key(db, "other", frozenset({Role.AGENT}), "outsider")
    _, operator = await create_key(db, "default", frozenset({Role.OPERATOR}), "operator")
    small = settings.replace(max_body_bytes=4096)
    fast = httpx.ASGITransport(app=create_app(db, Gateway(db), settings=small))
    slow = httpx.ASGITransport(app=_framework_only(create_app(db, Gateway(db), settings=small)))

    def cases(tag: str) -> list[tuple[str, dict[str, str], bytes | None, Any]]:
        order, plan = f"o-{tag}", f"p-{tag}"
        first = step_json(order, plan, 1)
        wrong = step_json(order, plan, 2, data={"warehouse_id": "w", "reserved_items": [{"product_id": "x"}]})
        return [
            ("apply", {}, None, first),
            ("duplicate", {}, None, first),
            ("buffer", {}, None, step_json(order, plan, 3)),
            ("rejected or invalid", {}, None, wrong),
            ("plan mismatch", {}, None, step_json(order, "other-plan", 2)),
            ("batch", {}, None, {"events": plan_json(f"b-{tag}", f"pb-{tag}", 3)}),
            ("parse error", {"content-type": "application/json"}, b'{"a": 1, "a": 2}', None),
            ("nesting", {"content-type": "application/json"}, b"[" * 64 + b"]" * 64, None),
            ("media type", {"content-type": "text/plain"}, b"{}", None),
            ("too large", {"content-type": "application/json"}, b" " * 5000 + b"{}", None),
            ("tenant", {}, None, step_json(order, plan, 2, tenant_id="someone-else")),
            ("no key", {"authorization": ""}, None, first),
            ("unknown key", {"authorization": "Bearer nxk_nope"}, None, first),
            ("role", {"authorization": f"Bearer {operator}"}, None, first),
            ("other tenant's key", {"authorization": f"Bearer {outsider}"}, None, first),
        ]

    answers: dict[str, list[Any]] = {}
    for name, transport in (("fast", fast), ("slow", slow)):
        tag = uuid.uuid4().hex[:8]  # each app its own orders: the same story, told twice
        async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=api_headers()) as api:
            answers[name] = []
            for label, extra, content, body in cases(tag):
                rid = f"req-{label.replace(' ', '-')}"
                headers = {"x-request-id": rid, **extra}
                if content is None:
                    response = await api.post("/v1/events", json=body, headers=headers)
                else:
                    response = await api.post("/v1/events", content=content, headers=headers)
                shown = response.json()
                if response.status_code >= 400 and "code" in shown:
                    assert shown["request_id"] == rid, (name, label, shown)
                shape = _UUID.sub("UUID", json.dumps(_comparable(response)).replace(tag, "TAG"))
                answers[name].append((label, json.loads(shape)))
    assert answers["fast"] == answers["slow"]
    statuses = {label: status for label, (status, _, _) in answers["fast"]}
    assert statuses == {
        "apply": 200, "duplicate": 200, "buffer": 200, "rejected or invalid": 422, "plan mismatch": 409,
        "batch": 200, "parse error": 400, "nesting": 400, "media type": 415, "too large": 413, "tenant": 403,
        "no key": 401, "unknown key": 401, "role": 403, "other tenant's key": 200,
    }  # fmt: skip
    assert record.tenant_id == "other"


async def test_bodies_bound_and_answers_rendered_in_a_thread_answer_as_the_framework_route(
    db: Any, settings: Settings
) -> None:
    """Every body decoded and bound in a worker thread (`parse_in_thread_bytes` 1) and answers of 64 results or more
    built and rendered in one: a 70-envelope batch, one naming another tenant (403, nothing written) and one with a
    malformed envelope get the framework route's answers, and the batch's 70 orders are applied."""
    threaded = settings.replace(parse_in_thread_bytes=1)
    fast = httpx.ASGITransport(app=create_app(db, Gateway(db), settings=threaded))
    slow = httpx.ASGITransport(app=_framework_only(create_app(db, Gateway(db), settings=threaded)))
    answers: dict[str, list[Any]] = {}
    for name, transport in (("fast", fast), ("slow", slow)):
        tag = uuid.uuid4().hex[:8]
        batch = [step_json(f"o-{tag}-{i}", f"p-{tag}-{i}", 1) for i in range(70)]
        bodies = {
            "batch": batch,
            "tenant": [*batch[:3], step_json(f"t-{tag}", f"pt-{tag}", 1, tenant_id="someone-else")],
            "malformed": [step_json(f"m-{tag}", f"pm-{tag}", 1), {"event_id": "not a uuid"}],
        }
        async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=api_headers()) as api:
            answers[name] = []
            for label, body in bodies.items():
                response = await api.post("/v1/events", json=body)
                shape = _UUID.sub("UUID", json.dumps(_comparable(response)).replace(tag, "TAG"))
                answers[name].append((label, json.loads(shape)))
    assert answers["fast"] == answers["slow"]
    (_, (status, _, body)), (_, (tenant_status, _, _)), _ = answers["fast"]
    assert status == 200 and len(body["results"]) == 70
    assert {r["decision"] for r in body["results"]} == {"APPLY"}
    assert tenant_status == 403


async def test_one_write_per_response_sends_head_and_body_together() -> None:
    """A response head is held until its body is written (one write); a head alone goes out on the next turn
    of the loop, and close() writes it first."""
    loop = asyncio.get_running_loop()
    written: list[bytes] = []
    closed: list[bool] = []

    class Recording(asyncio.Transport):
        def write(self, data: Any) -> None:
            written.append(bytes(data))

        def close(self) -> None:
            closed.append(True)

    writer = _OneWritePerResponse(Recording(), loop)
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    writer.write(b"{}")
    assert written == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
    assert len(written) == 1
    await asyncio.sleep(0)
    assert written[1] == b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
    writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
    writer.close()
    assert written[2] == b"HTTP/1.1 204 No Content\r\n\r\n" and closed == [True]
