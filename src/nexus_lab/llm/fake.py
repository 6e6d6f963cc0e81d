"""`nexus fake-llm`: a real HTTP server speaking the Chat Completions protocol, answering from a script.

    nexus fake-llm --port P (--seed S | --script FILE) [--log FILE] [faults...]

`POST /v1/chat/completions` (also `/chat/completions`) answers as an OpenAI-compatible server would:
non-streaming (`chat.completion` with `usage`) or streaming (`stream: true`: SSE `chat.completion.chunk`
deltas, tool-call arguments split over chunks, a usage chunk when `stream_options.include_usage`, then
`data: [DONE]`); tool calls when `tools` are offered, JSON content under `response_format: json_object`,
text for a refusal. `GET /v1/models` lists the one model; `GET /healthz` says it is up.

`--behaviours mcp_agent` plays a model driving the gateway's MCP tools (`nexus_lab.llm.behaviours.mcp_reply`).

Each new order (its `order_id` in the conversation's `<order>` block) gets the next behaviour of the script
(`nexus_lab.llm.behaviours`), cycled; the same order keeps its behaviour for the server's life, so a
restarted planner meets the same model. `--seed S` makes a script of every behaviour in a seeded order;
`--script FILE` reads a JSON (or YAML) list of behaviour names, or `{"behaviours": [...]}`.

Faults on schedule, counted over all requests from 1: `--storm 429:5 --storm 500:3` answers the first 5
requests 429 (with `Retry-After`), the next 3 with 500; `--rate-limit-every N` and `--server-error-every
N` answer every N-th request so; `--hang-every N --hang-s S` waits S seconds before answering (a client
timeout); `--delay-ms` slows every answer; `--no-tools` answers 400 to any request offering tools (a server
without tool calling).

`--log FILE` appends one JSON line per request: its number, path, the request body, the header names
(never their values), the fault or behaviour applied and the reply, so tests assert what the planner sent.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from nexus_lab.llm import behaviours as bh

MODEL = "nexus-fake-1"


@dataclasses.dataclass(frozen=True, slots=True)
class Faults:
    """Which requests fail, and how."""

    no_tools: bool = False
    """Answer 400 to any request that offers tools."""
    storms: tuple[tuple[int, int], ...] = ()
    """(status, count) runs from the first request on."""
    rate_limit_every: int = 0
    server_error_every: int = 0
    retry_after_s: int = 1
    hang_every: int = 0
    hang_s: float = 0.0
    delay_ms: float = 0.0

    def status_for(self, n: int) -> int | None:
        start = 1
        for status, count in self.storms:
            if start <= n < start + count:
                return status
            start += count
        if self.rate_limit_every and n % self.rate_limit_every == 0:
            return 429
        if self.server_error_every and n % self.server_error_every == 0:
            return 500
        return None


class FakeModel:
    """The server's state: the script, who got which behaviour, the request counter and the log."""

    def __init__(self, script: Sequence[str], faults: Faults, log_path: Path | None = None) -> None:
        unknown = sorted(set(script) - set(bh.BEHAVIOURS) - set(bh.MCP_BEHAVIOURS))
        if unknown or not script:
            raise ValueError(f"unknown behaviours {unknown}; known: {', '.join(bh.BEHAVIOURS + bh.MCP_BEHAVIOURS)}")
        self.script = list(script)
        self.faults = faults
        self.log_path = log_path
        self.assigned: dict[str, str] = {}
        self.requests = 0

    def behaviour_of(self, order_key: str) -> str:
        if order_key not in self.assigned:
            self.assigned[order_key] = self.script[len(self.assigned) % len(self.script)]
        return self.assigned[order_key]

    def log(self, record: Mapping[str, Any]) -> None:
        if self.log_path is not None:
            with self.log_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record, default=str) + "\n")

    async def completions(self, request: Request) -> Response:
        self.requests += 1
        n = self.requests
        record: dict[str, Any] = {"n": n, "path": request.url.path, "headers": sorted(request.headers.keys())}
        try:
            body = json.loads(await request.body())
        except ValueError:
            record["status"] = 400
            self.log(record)
            return _error(400, "the body is not JSON", "invalid_request_error")
        record["body"] = body
        if self.faults.delay_ms:
            await asyncio.sleep(self.faults.delay_ms / 1000)
        if self.faults.hang_every and n % self.faults.hang_every == 0:
            record["fault"] = "hang"
            await asyncio.sleep(self.faults.hang_s)
        status = self.faults.status_for(n)
        if status is not None:
            record.update(status=status, fault=status)
            self.log(record)
            if status == 429:
                return _error(429, "rate limited", "rate_limit_error", {"retry-after": str(self.faults.retry_after_s)})
            return _error(status, "the fake model failed on schedule", "server_error")
        if self.faults.no_tools and body.get("tools"):
            record.update(status=400, fault="no_tools")
            self.log(record)
            return _error(400, "tools are not supported by this model", "invalid_request_error")
        messages = body.get("messages") or []
        order, _, _ = bh.read_conversation(messages)
        key = str(order.get("order_id") or json.dumps(order, sort_keys=True))
        behaviour = self.behaviour_of(key)
        answer = bh.reply(behaviour, messages)
        json_mode = not body.get("tools") and (body.get("response_format") or {}).get("type") == "json_object"
        record.update(status=200, behaviour=behaviour, order_key=key, reply=dataclasses.asdict(answer))
        self.log(record)
        message = _message(answer, json_mode)
        prompt_tokens = max(1, len(json.dumps(messages)) // 4)
        completion_tokens = max(1, len(json.dumps(message)) // 4)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = _chunks(message, prompt_tokens, completion_tokens, include_usage)
            return StreamingResponse(chunks, media_type="text/event-stream")
        finish = "tool_calls" if answer.calls and not json_mode else "stop"
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model") or MODEL,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": _usage(prompt_tokens, completion_tokens),
            }
        )


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _error(status: int, message: str, kind: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def _message(answer: bh.Reply, json_mode: bool) -> dict[str, Any]:
    if json_mode:
        return {"role": "assistant", "content": bh.as_json_content(answer)}
    if answer.text is not None:
        return {"role": "assistant", "content": answer.text}
    calls = [
        {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function", "function": {"name": name, "arguments": raw}}
        for name, raw in answer.calls
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


async def _chunks(
    message: Mapping[str, Any], prompt_tokens: int, completion_tokens: int, include_usage: bool
) -> AsyncIterator[str]:
    base = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion.chunk", "created": int(time.time())}
    base["model"] = MODEL

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> str:
        payload = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(payload)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    content = message.get("content")
    if content:
        half = len(content) // 2
        for piece in (content[:half], content[half:]):
            yield chunk({"content": piece})
    for i, call in enumerate(message.get("tool_calls") or []):
        raw = call["function"]["arguments"]
        half = len(raw) // 2
        function = {"name": call["function"]["name"], "arguments": raw[:half]}
        head = {"index": i, "id": call["id"], "type": "function", "function": function}
        yield chunk({"tool_calls": [head]})
        yield chunk({"tool_calls": [{"index": i, "function": {"arguments": raw[half:]}}]})
    yield chunk({}, "tool_calls" if message.get("tool_calls") else "stop")
    if include_usage:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': _usage(prompt_tokens, completion_tokens)})}\n\n"
    yield "data: [DONE]\n\n"


def create_app(model: FakeModel) -> Starlette:
    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "nexus"}]})

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "requests": model.requests})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", model.completions, methods=["POST"]),
            Route("/chat/completions", model.completions, methods=["POST"]),
            Route("/v1/models", models),
            Route("/healthz", healthz),
        ]
    )


def read_script(path: Path) -> list[str]:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if isinstance(raw, dict):
        raw = raw.get("behaviours")
    if not isinstance(raw, list) or not all(isinstance(b, str) for b in raw):
        raise ValueError(f"{path}: a script is a list of behaviour names (or {{behaviours: [...]}})")
    return raw


def _storm(text: str) -> tuple[int, int]:
    status, _, count = text.partition(":")
    try:
        pair = int(status), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a storm is STATUS:COUNT, e.g. 429:5, not {text!r}") from None
    if pair[0] not in (429, 500, 502, 503, 504):
        raise argparse.ArgumentTypeError("a storm's status is 429 or a 5xx")
    return pair


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--host", default="127.0.0.1")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--seed", default=None, help="a script of every behaviour in a seeded order")
    source.add_argument("--script", type=Path, default=None, help="JSON/YAML list of behaviour names")
    parser.add_argument("--behaviours", default=None, help="comma-separated behaviours, cycled (instead of a script)")
    parser.add_argument("--log", type=Path, default=None, help="append one JSON line per request here")
    parser.add_argument("--storm", type=_storm, action="append", default=[], help="STATUS:COUNT from request 1")
    parser.add_argument("--rate-limit-every", type=int, default=0, help="answer every N-th request 429")
    parser.add_argument("--server-error-every", type=int, default=0, help="answer every N-th request 500")
    parser.add_argument("--retry-after", type=int, default=1, help="Retry-After seconds of a 429")
    parser.add_argument("--hang-every", type=int, default=0, help="hang every N-th request --hang-s seconds")
    parser.add_argument("--hang-s", type=float, default=30.0)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="delay of every answer")
    parser.add_argument("--no-tools", action="store_true", help="refuse requests offering tools (400)")


def model_from(args: argparse.Namespace) -> FakeModel:
    if args.behaviours:
        script = [b.strip() for b in args.behaviours.split(",") if b.strip()]
    elif args.script is not None:
        script = read_script(args.script)
    else:
        script = bh.script_for_seed(args.seed or "0")
    faults = Faults(
        storms=tuple(args.storm),
        rate_limit_every=args.rate_limit_every,
        server_error_every=args.server_error_every,
        retry_after_s=args.retry_after,
        hang_every=args.hang_every,
        hang_s=args.hang_s,
        delay_ms=args.delay_ms,
        no_tools=args.no_tools,
    )
    return FakeModel(script, faults, args.log)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    try:
        model = model_from(args)
    except (OSError, ValueError) as exc:
        print(f"nexus fake-llm: {exc}")
        return 2
    print(f"fake-llm listening on http://{args.host}:{args.port}/v1 (script: {', '.join(model.script)})", flush=True)
    uvicorn.run(create_app(model), host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0
