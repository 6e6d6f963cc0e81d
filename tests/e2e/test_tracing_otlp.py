"""`nexus serve` with the standard OTEL_* variables exports its spans over OTLP/HTTP to a collector."""

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
from tests.conftest import NexusProcess, api_headers, free_port, settings_env, wait_http
from tests.factories import step_json


class Collector(http.server.ThreadingHTTPServer):
    """A minimal OTLP/HTTP trace receiver: keeps each request's content type and decoded span names."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, list[str], str]] = []
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        request = ExportTraceServiceRequest.FromString(body)
        names = [s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
        resources = [rs.resource for rs in request.resource_spans]
        service = next((a.value.string_value for r in resources for a in r.attributes if a.key == "service.name"), "")
        self.server.requests.append((self.path, self.headers.get("content-type", ""), names, service))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_serve_exports_spans_over_otlp_http(settings: Settings, collector: Collector, tmp_path: Path) -> None:
    """With OTEL_EXPORTER_OTLP_ENDPOINT set, a submitted step's spans (HTTP server, batch, decision) reach the
    collector as OTLP protobuf at /v1/traces under OTEL_SERVICE_NAME."""
    port = free_port()
    env = settings_env(settings.replace(http_port=port))
    env |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
        "OTEL_SERVICE_NAME": "nexus-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    proc = NexusProcess(["serve", "--no-dispatcher"], env, tmp_path / "serve.log").start()
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", proc=proc)
        answer = httpx.post(
            base + "/v1/events",
            json=step_json("otlp-o1", "otlp-p1", 1),
            headers=api_headers(traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        )
        assert answer.status_code == 200
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any("nexus.decision" in r[2] for r in collector.requests):
            time.sleep(0.1)
    finally:
        proc.terminate()
    names = {n for r in collector.requests for n in r[2]}
    assert {"POST /v1/events", "nexus.submit", "nexus.decision"} <= names
    assert all(path == "/v1/traces" and ctype == "application/x-protobuf" for path, ctype, _, _ in collector.requests)
    assert {service for *_, service in collector.requests} == {"nexus-under-test"}
