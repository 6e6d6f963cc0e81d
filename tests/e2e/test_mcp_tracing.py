"""Protocol 2026-07-28 carries a call's trace context in `params._meta` rather than an HTTP header: the
gateway's spans of an MCP tool call (the SDK's `tools/call` span and the queries made under it) join that
trace."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from nexus.settings import Settings
from tests.conftest import NexusProcess, free_port, settings_env, wait_http
from tests.e2e.test_mcp import CREATED, agent_key

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


class SpanCollector(http.server.ThreadingHTTPServer):
    """A minimal OTLP/HTTP trace receiver: keeps each span's (name, trace id in hex)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str]] = []
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: SpanCollector

    def do_POST(self) -> None:
        request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers.get("content-length", "0"))))
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                self.server.spans.extend((s.name, s.trace_id.hex()) for s in ss.spans)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[SpanCollector]:
    server = SpanCollector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def modern_call(base: str, key: str, request_id: int, name: str, arguments: dict[str, object]) -> httpx.Response:
    """One self-contained 2026-07-28 `tools/call` POST, the trace context in `_meta` only (no header)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "traceparent": TRACEPARENT,
    }
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": meta},
    }
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    return httpx.post(f"{base}/mcp", json=body, headers=headers, timeout=30)


async def test_trace_context_in_meta_parents_the_tool_calls_spans(
    settings: Settings, collector: SpanCollector, tmp_path: Path
) -> None:
    """2026-07-28 tools/calls whose `_meta` names a trace (no traceparent header) are answered, and the SDK's
    `tools/call` spans and the queries of `get_order` (asyncpg's instrumentation) are exported in that trace."""
    port = free_port()
    env = settings_env(settings.replace(http_port=port))
    env |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
        "OTEL_SERVICE_NAME": "nexus-mcp-trace",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    key = await agent_key(settings, "acme")
    proc = NexusProcess(["serve", "--no-dispatcher"], env, tmp_path / "serve.log").start()
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", proc=proc)
        started = modern_call(base, key, 1, "start_plan", {"order_id": "trace-1"})
        assert started.status_code == 200 and not started.json()["result"]["isError"], started.text
        step = {"order_id": "trace-1", "step": "OrderCreated", "data": CREATED}
        answer = modern_call(base, key, 2, "propose_step", step)
        assert answer.json()["result"]["structuredContent"]["decision"] == "APPLY", answer.text
        order = modern_call(base, key, 3, "get_order", {"order_id": "trace-1"})
        assert order.json()["result"]["structuredContent"]["last_seq"] == 1, order.text
        wanted = {(f"tools/call {tool}", TRACE_ID) for tool in ("start_plan", "propose_step", "get_order")}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not wanted <= set(collector.spans):
            time.sleep(0.1)
    finally:
        proc.stop()
    assert wanted <= set(collector.spans), sorted(set(collector.spans))
    queries = [name for name, trace in collector.spans if trace == TRACE_ID and not name.startswith("tools/call")]
    assert queries, sorted(set(collector.spans))
