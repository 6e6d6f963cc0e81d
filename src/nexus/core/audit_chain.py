"""The decision log's hash chain: canonical records, chaining, verification. Pure: no I/O, clock passed in.

Every decision the gateway takes about a step is one `Record`. Records form one chain per order, keyed by
(tenant_id, order_id), numbered by `position` from 1::

    canonical(r) = UTF-8 JSON of {"v": 1, "tenant_id", "order_id", "position", "at", "actor", "event_id",
                                  "plan_id", "seq", "event_type", "decision", "code", "check", "message"}
                   with sorted keys and no whitespace (`ensure_ascii=False`; `at` as
                   "YYYY-MM-DDTHH:MM:SS.ffffffZ" in UTC)
    hash(r)      = SHA-256(canonical(r) || prev_hash)          (raw 32-byte digests)
    prev_hash    = hash of the record at position - 1, or 32 zero bytes (GENESIS) at position 1

The storage id, prev_hash, hash and `actor_name` (the name of the key an `actor` `key:<id>` stands for, a
label kept beside the record) are not part of the canonical record. `verify` walks records in storage
order (the table's id, a file's line order) and names the first bad record with one of:

* MODIFIED:  its content no longer yields its hash (a field, the hash or the prev_hash was changed).
* DELETED:   a position is missing: a record claims a later position and no later record fills the gap,
             or a signed checkpoint names a head position the chain no longer reaches.
* REORDERED: a record claims a later position and the missing position does come later in the sequence.
* INSERTED:  a record claims a position already taken, or is well formed (its own hash checks) but does
             not link to its predecessor's hash.

A chain anyone can recompute authenticates nothing by itself: signed checkpoints (`Checkpoint`) commit to
chain heads, so rewriting history before a checkpoint (even with every hash recomputed) is detected as
MODIFIED at the checkpointed head, and dropping a checkpointed tail as DELETED.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import orjson

FORMAT_VERSION = 1
GENESIS = bytes(32)
INGRESS_ORDER = "~ingress"
"""The chain of items that never had an order: unparseable input dead-lettered at ingress. Real order ids
start with a letter or digit, so this one cannot collide with them."""

CANONICAL_FIELDS = (
    "tenant_id",
    "order_id",
    "position",
    "at",
    "actor",
    "event_id",
    "plan_id",
    "seq",
    "event_type",
    "decision",
    "code",
    "check",
    "message",
)


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON: sorted keys, no whitespace, UTF-8 (non-ASCII kept as is)."""
    return _CANONICAL.encode(value).encode()


def format_at(at: dt.datetime) -> str:
    """A timestamp as it enters the canonical record: UTC, microseconds, `Z`."""
    if at.tzinfo is None:
        raise ValueError("decision log timestamps must be timezone-aware")
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Entry(NamedTuple):
    """One decision to log, before it has a place in its chain. (A NamedTuple: one per step on the hot
    path, where it builds in a third of a frozen dataclass's time.)"""

    tenant_id: str
    order_id: str
    decision: str
    event_id: str | None = None
    plan_id: str | None = None
    seq: int | None = None
    event_type: str | None = None
    code: str | None = None
    check: str | None = None
    message: str | None = None
    actor: str | None = None
    actor_name: str | None = None
    """The name of the key an actor `key:<id>` stands for: stored beside the record, not hashed (a label
    that may change; the hash covers `actor`)."""

    @property
    def chain(self) -> tuple[str, str]:
        return (self.tenant_id, self.order_id)


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One row of the decision log: an entry placed in its order's chain."""

    tenant_id: str
    order_id: str
    position: int
    at: str
    actor: str | None
    event_id: str | None
    plan_id: str | None
    seq: int | None
    event_type: str | None
    decision: str
    code: str | None
    check: str | None
    message: str | None
    prev_hash: bytes
    hash: bytes
    id: int | None = None
    """Storage id (table id or line number): where the record sits, not part of what is hashed."""

    @property
    def chain(self) -> tuple[str, str]:
        return (self.tenant_id, self.order_id)

    def canonical(self) -> bytes:
        return canonical_bytes(self)

    def computed_hash(self) -> bytes:
        return hashlib.sha256(self.canonical() + self.prev_hash).digest()

    def as_json(self) -> dict[str, Any]:
        """The record as exported (hashes in hex)."""
        body: dict[str, Any] = {name: getattr(self, name) for name in CANONICAL_FIELDS}
        body.update(id=self.id, prev_hash=self.prev_hash.hex(), hash=self.hash.hex())
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Record:
        values: dict[str, Any] = {name: body.get(name) for name in CANONICAL_FIELDS}
        return cls(
            **values,
            prev_hash=bytes.fromhex(str(body.get("prev_hash", ""))),
            hash=bytes.fromhex(str(body.get("hash", ""))),
            id=body.get("id"),
        )


def canonical_bytes(record: Record | Mapping[str, Any]) -> bytes:
    """The canonical form of a record's fields (see the module docstring)."""
    get = record.get if isinstance(record, Mapping) else lambda name: getattr(record, name)
    body: dict[str, Any] = {name: get(name) for name in CANONICAL_FIELDS}
    body["v"] = FORMAT_VERSION
    return canonical_json(body)


def chain_hash(record: Record | Mapping[str, Any], prev_hash: bytes) -> bytes:
    return hashlib.sha256(canonical_bytes(record) + prev_hash).digest()


def place(
    entries: Sequence[Entry],
    heads: Mapping[tuple[str, str], tuple[int, bytes]],
    at: dt.datetime,
) -> tuple[list[int], list[bytes], list[bytes]]:
    """Place entries, in order, at the end of their chains: each one's position, prev_hash and hash.

    `heads` maps a chain to its last (position, hash). This is the hot path of every `Gateway.submit`.
    """
    stamp = format_at(at)
    current = dict(heads)
    positions: list[int] = []
    prevs: list[bytes] = []
    hashes: list[bytes] = []
    for e in entries:
        chain = (e.tenant_id, e.order_id)
        position, prev = current.get(chain, (0, GENESIS))
        position += 1
        # the canonical form of `canonical_bytes`, built directly
        fields = {
            "tenant_id": e.tenant_id,
            "order_id": e.order_id,
            "position": position,
            "at": stamp,
            "actor": e.actor,
            "event_id": e.event_id,
            "plan_id": e.plan_id,
            "seq": e.seq,
            "event_type": e.event_type,
            "decision": e.decision,
            "code": e.code,
            "check": e.check,
            "message": e.message,
            "v": FORMAT_VERSION,
        }
        try:  # orjson's bytes are the canonical form's for these values (str, int, None), in C
            canonical = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # what it refuses (an integer beyond 64 bits): the standard encoder's answer
            canonical = _CANONICAL.encode(fields).encode()
        digest = hashlib.sha256(canonical + prev).digest()
        positions.append(position)
        prevs.append(prev)
        hashes.append(digest)
        current[chain] = (position, digest)
    return positions, prevs, hashes


def append(
    entries: Sequence[Entry],
    heads: Mapping[tuple[str, str], tuple[int, bytes]],
    at: dt.datetime,
) -> list[Record]:
    """`place`, as records."""
    stamp = format_at(at)
    return [
        Record(
            tenant_id=e.tenant_id,
            order_id=e.order_id,
            position=position,
            at=stamp,
            actor=e.actor,
            event_id=e.event_id,
            plan_id=e.plan_id,
            seq=e.seq,
            event_type=e.event_type,
            decision=e.decision,
            code=e.code,
            check=e.check,
            message=e.message,
            prev_hash=prev,
            hash=digest,
        )
        for e, position, prev, digest in zip(entries, *place(entries, heads, at), strict=True)
    ]
