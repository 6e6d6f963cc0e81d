"""Transport hygiene of the MCP doors: `/mcp` refuses a browser `Origin` it was not told to trust (403 in the
API's error shape), answers a version or header mismatch with the specification's JSON-RPC error (HTTP 400),
and `nexus mcp --stdio` keeps every identifier inside its own path segment."""

from __future__ import annotations

import http.server
import json
import sys
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters

from nexus.settings import Settings
from nexus_lab.mcp_client import answer_of
from tests.e2e.test_mcp import agent_key, stdio_env

ACCEPT = "application/json, text/event-stream"
MODERN = "2026-07-28"


def modern(key: str, method: str, params: dict[str, Any], **headers: str) -> tuple[dict[str, str], dict[str, Any]]:
    """A 2026-07-28 request's headers (`headers` replace or, as "", drop the routing ones) and body."""
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    routing = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if "name" in params:
        routing["Mcp-Name"] = params["name"]
    routing |= headers
    sent = {"Authorization": f"Bearer {key}", "Accept": ACCEPT} | {k: v for k, v in routing.items() if v}
    return sent, {"jsonrpc": "2.0", "id": 7, "method": method, "params": {**params, "_meta": meta}}


async def test_a_foreign_origin_is_refused_in_the_error_shape(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """With NEXUS_MCP_ALLOWED_ORIGINS naming one origin, /mcp answers a request from another (a valid key
    notwithstanding) 403 FORBIDDEN in `{code, message, request_id}`, and serves the named origin and a
    request with no Origin; by default (none named) any Origin is refused."""
    _, base = start_gateway("--no-dispatcher", settings_=settings.replace(mcp_allowed_origins="https://ops.example"))
    key = await agent_key(settings, "acme")
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Authorization": f"Bearer {key}", "Accept": ACCEPT}
    foreign = httpx.post(f"{base}/mcp", json=rpc, headers=headers | {"Origin": "http://evil.example"})
    assert foreign.status_code == 403, foreign.text
    assert foreign.json()["code"] == "FORBIDDEN" and set(foreign.json()) == {"code", "message", "request_id"}
    assert "evil" not in foreign.text
    for allowed in ({"Origin": "https://OPS.example"}, {}):
        answer = httpx.post(f"{base}/mcp", json=rpc, headers=headers | allowed)
        assert answer.status_code == 200 and len(answer.json()["result"]["tools"]) == 8, answer.text
    _, default = start_gateway("--no-dispatcher")
    refused = httpx.post(f"{default}/mcp", json=rpc, headers=headers | {"Origin": "https://ops.example"})
    assert (refused.status_code, refused.json()["code"]) == (403, "FORBIDDEN")


async def test_version_and_header_mismatches_are_http_400_json_rpc_errors(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """A 2026-07-28 request whose Mcp-Method, Mcp-Name or MCP-Protocol-Version header disagrees with its body
    (or is missing) is HTTP 400 with JSON-RPC error -32020 (header mismatch) for its id; a version the server
    does not speak is 400 with -32022 naming the supported ones; the matching request is answered."""
    _, base = start_gateway("--no-dispatcher")
    key = await agent_key(settings, "acme")
    call = {"name": "list_processes", "arguments": {}}
    for params, headers in (
        (call, {"Mcp-Method": "tools/list"}),
        (call, {"Mcp-Name": ""}),
        (call, {"Mcp-Name": "get_order"}),
        ({}, {"Mcp-Method": ""}),
    ):
        sent, body = modern(key, "tools/call" if params else "tools/list", params, **headers)
        answer = httpx.post(f"{base}/mcp", json=body, headers=sent)
        assert answer.status_code == 400, (headers, answer.text)
        assert (answer.json()["id"], answer.json()["error"]["code"]) == (7, -32020), (headers, answer.text)
    sent, body = modern(key, "tools/call", call, **{"MCP-Protocol-Version": "2099-01-01"})
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
    unsupported = httpx.post(f"{base}/mcp", json=body, headers=sent)
    assert unsupported.status_code == 400 and unsupported.json()["error"]["code"] == -32022, unsupported.text
    assert MODERN in unsupported.json()["error"]["data"]["supported"]
    sent, body = modern(key, "tools/call", call)
    served = httpx.post(f"{base}/mcp", json=body, headers=sent)
    assert served.status_code == 200 and not served.json()["result"]["isError"], served.text


class Recorder(http.server.ThreadingHTTPServer):
    """A stand-in REST API over real HTTP: records each request's raw path, answers 404 NOT_FOUND."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Recorder

    def _answer(self) -> None:
        self.server.paths.append(self.path)
        body = json.dumps({"code": "NOT_FOUND", "message": "no such thing", "request_id": "r"}).encode()
        self.send_response(404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


async def test_stdio_keeps_identifiers_inside_their_path_segment(recorder: Recorder) -> None:
    """`nexus mcp --stdio` refuses `.`, `..` and empty identifiers with INVALID_IDENTIFIER (isError) before
    any HTTP call, and percent-encodes every other one whole (`/`, `?`, `#`, `%` stay in their segment)."""
    env = stdio_env("nxk_test", f"http://127.0.0.1:{recorder.server_address[1]}")
    server = StdioServerParameters(command=sys.executable, args=["-m", "nexus_cli", "mcp", "--stdio"], env=env)
    async with Client(server) as session:
        for tool, arguments in (
            ("get_order", {"order_id": ".."}),
            ("get_order", {"order_id": "."}),
            ("describe_process", {"name": ".."}),
            ("propose_step", {"order_id": "..", "step": "OrderCreated", "data": {}}),
            ("abort_plan", {"order_id": ".", "reason": "r"}),
            ("wait_for_order", {"order_id": "..", "timeout_s": 0}),
        ):
            answer, text, error = answer_of(await session.call_tool(tool, arguments))
            assert error and answer["code"] == "INVALID_IDENTIFIER", (tool, text)
        calls = [p for p in recorder.paths if p != "/v1/identity"]  # the key's roles, asked once at start
        assert calls == []
        answer, _, error = answer_of(await session.call_tool("get_order", {"order_id": "a/../b?c#d%"}))
        assert error and answer["code"] == "NOT_FOUND"
    calls = [p for p in recorder.paths if p != "/v1/identity"]
    assert calls[0] == "/v1/orders/a%2F..%2Fb%3Fc%23d%25", recorder.paths
