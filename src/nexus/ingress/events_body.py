"""The body of `POST /v1/events`: media type, size, strict JSON, limits, and its items.

A body is refused as a whole, writing nothing, when it is not `application/json` (415), too large (413
PAYLOAD_TOO_LARGE, or BATCH_TOO_LARGE by events, or a string beyond the limit), or nested too deep (400
NESTING_TOO_DEEP). A body that is not strict JSON is one PARSE_ERROR dead letter (the stream goes on);
every other problem stays with its item (a NUL character in any of its strings: INVALID_EVENT).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from fastapi import Request

from nexus.core import strict_json, wording
from nexus.core.decide.items import Incoming
from nexus.core.strict_json import InputLimits
from nexus.errors import ErrorCode, InvalidEventError
from nexus.settings import Settings


@dataclasses.dataclass(frozen=True, slots=True)
class Parsed:
    """A request's items; `single`: the body was one envelope (or unreadable), answered with that item's status."""

    items: list[Incoming]
    single: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """The request as a whole is refused; nothing is written."""

    status: int
    code: ErrorCode
    message: str


_LIMITS: dict[int, tuple[Settings, InputLimits]] = {}
"""`limits_of` by the id of its (frozen) settings, the settings kept so that the id stays theirs."""


def limits_of(settings: Settings) -> InputLimits:
    """The input limits of `settings` (built once per settings object: they are frozen)."""
    known = _LIMITS.get(id(settings))
    if known is not None and known[0] is settings:
        return known[1]
    limits = InputLimits(
        max_depth=settings.max_nesting_depth,
        max_string_length=settings.max_string_length,
        max_events=settings.max_events_per_request,
    )
    if len(_LIMITS) >= 16:  # the oldest goes: a settings object in use stays known (clearing all lost it too)
        del _LIMITS[next(iter(_LIMITS))]
    _LIMITS[id(settings)] = (settings, limits)
    return limits


def media_type_refusal(content_type: str | None) -> Refusal | None:
    """None when the Content-Type is application/json (optionally `; charset=utf-8`)."""
    if content_type == "application/json":  # what nearly every client sends: no parsing
        return None
    if content_type is not None:
        media, _, params = content_type.partition(";")
        charset = params.strip().lower()
        if media.strip().lower() == "application/json" and charset in ("", "charset=utf-8", 'charset="utf-8"'):
            return None
    return Refusal(415, ErrorCode.UNSUPPORTED_MEDIA_TYPE, "Content-Type must be application/json (UTF-8)")


async def read_body(request: Request, max_bytes: int) -> bytes | Refusal:
    """The body, or a refusal once it exceeds `max_bytes` (declared or streamed)."""
    too_large = Refusal(413, ErrorCode.PAYLOAD_TOO_LARGE, wording.body_too_large(max_bytes))
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        return too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            return too_large
        chunks.append(chunk)
    return b"".join(chunks)


class Disconnected(Exception):
    """The client went away before its body arrived."""


async def receive_body(receive: Any, limit: int) -> bytes | None:
    """The body of an ASGI request, or None once it exceeds `limit` bytes (the rest is left unread);
    `Disconnected` when the client goes away first. The events fast path and the request guard read so."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def parse_body(body: bytes, traceparent: str | None, limits: InputLimits) -> Parsed | Refusal:
    """Decode and validate a body: CPU-bound, so large ones run in a worker thread (`fast_events.answer_events`)."""
    try:
        obj = strict_json.loads(body, limits)
    except InvalidEventError as exc:
        if exc.code is ErrorCode.NESTING_TOO_DEEP:
            return Refusal(400, exc.code, exc.message)
        return Parsed([Incoming(body.decode("utf-8", "replace"), None, exc, traceparent)], single=True)
    if len(body) > limits.max_string_length:  # a decoded string is never longer than the bytes it came from
        try:
            strict_json.check_strings(obj, limits)
        except InvalidEventError as exc:
            return Refusal(413, exc.code, exc.message)
    events: list[Any]
    if isinstance(obj, dict) and "events" in obj and isinstance(obj["events"], list):
        events, single = obj["events"], False
    elif isinstance(obj, list):
        events, single = obj, False
    else:
        events, single = [obj], True
    if len(events) > limits.max_events:
        return Refusal(
            413, ErrorCode.BATCH_TOO_LARGE, f"{len(events)} events in one request; at most {limits.max_events}"
        )
    # A NUL reaches a decoded string only from the escape \u0000 (JSON strings hold no raw control character).
    nul = b"\\u0000" in body
    return Parsed([_item(e, traceparent, limits, nul) for e in events], single)


def has_nul(value: Any) -> bool:
    """Whether a NUL character is in any key or string of a decoded JSON value (iterative)."""
    return strict_json.any_string(value, lambda text: "\x00" in text)


def _item(event: Any, traceparent: str | None, limits: InputLimits, nul: bool) -> Incoming:
    if isinstance(event, dict):
        item = Incoming.parse(event, traceparent, limits)
        if item.envelope is not None and nul and has_nul(event):
            # PostgreSQL text and jsonb hold no NUL: an INVALID_EVENT of its own, before the database (a
            # NUL in an identifier is already INVALID_IDENTIFIER, by the envelope's own rule).
            error = InvalidEventError("a string of the envelope contains a NUL character (U+0000)")
            return Incoming(item.raw, None, error, traceparent)
        return item
    # Not an object: an INVALID_EVENT of its own (a string is not decoded again as JSON).
    return Incoming(json.dumps(event), None, InvalidEventError("an envelope is a JSON object"), traceparent)


def in_thread(body: bytes, settings: Settings) -> bool:
    """Whether `body` is decoded in a worker thread (a large one: the GIL is handed back every few milliseconds,
    so the event loop keeps answering meanwhile); a smaller one is decoded at once."""
    return len(body) >= settings.parse_in_thread_bytes
