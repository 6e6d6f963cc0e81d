"""The decision log's hash chain: canonical records, chaining, verification. Pure: no I/O, clock passed in.

Every decision the gateway takes about a step is one `Record`. Records form one chain per order, keyed by
(tenant_id, order_id), numbered by `position` from 1::

    canonical(r) = UTF-8 JSON of {"v": 1, "tenant_id", "order_id", "position", "at", "actor", "event_id",
                                  "plan_id", "seq", "event_type", "decision", "code", "check", "message"}
                   with sorted keys and no whitespace (`ensure_ascii=False`; `at` as
                   "YYYY-MM-DDTHH:MM:SS.ffffffZ" in UTC)
    hash(r)      = SHA-256(canonical(r) || prev_hash)          (raw 32-byte digests)
    prev_hash    = hash of the record at position - 1, or 32 zero bytes (GENESIS) at position 1

The storage id, prev_hash and hash are not part of the canonical record. `verify` walks records in storage
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
import enum
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from nexus.core.envelope import EventEnvelope
from nexus.core.sequencing import Decision, Rejection, Resolution, code_of, is_deadline_abort
from nexus.errors import ErrorCode

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
        digest = hashlib.sha256(_CANONICAL.encode(fields).encode() + prev).digest()
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


class Fault(enum.StrEnum):
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    INSERTED = "INSERTED"
    REORDERED = "REORDERED"
    BAD_SIGNATURE = "BAD_SIGNATURE"
    """A checkpoint whose signature does not verify, or signed by a key that is not trusted."""
    CHECKPOINT_CHAIN = "CHECKPOINT_CHAIN"
    """A checkpoint that does not follow its predecessor (one was deleted, changed or reordered)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    """The first bad record (or checkpoint) and what is wrong with it."""

    fault: Fault
    tenant_id: str | None
    order_id: str | None
    position: int | None
    record_id: int | None
    detail: str

    def describe(self) -> str:
        if self.order_id is None:  # a checkpoint: its id is in the detail
            return f"{self.fault.value}: {self.detail}"
        rid = f" (record id {self.record_id})" if self.record_id is not None else ""
        where = f"order ({self.tenant_id}, {self.order_id}) position {self.position}{rid}"
        return f"{self.fault.value}: {where}: {self.detail}"


@dataclasses.dataclass(frozen=True, slots=True)
class Verification:
    records: int
    chains: int
    checkpoints: int
    finding: Finding | None

    @property
    def ok(self) -> bool:
        return self.finding is None


def verify_records(records: Sequence[Record]) -> tuple[Finding | None, dict[tuple[str, str], list[Record]]]:
    """Walk records in storage order; return the first fault (or None) and each chain's records by position."""
    remaining: dict[tuple[str, str], list[int]] = defaultdict(list)
    for r in reversed(records):
        remaining[r.chain].append(r.position)  # a stack per chain: the last element is the next record's
    expected: dict[tuple[str, str], tuple[int, bytes]] = {}
    seen: dict[tuple[str, str], dict[int, Record]] = defaultdict(dict)
    for r in records:
        remaining[r.chain].pop()
        position, prev = expected.get(r.chain, (0, GENESIS))
        want = position + 1

        def finding(fault: Fault, detail: str, r: Record = r) -> Finding:
            return Finding(fault, r.tenant_id, r.order_id, r.position, r.id, detail)

        if r.position in seen[r.chain] or r.position < want:
            return finding(Fault.INSERTED, f"position {r.position} is already taken in this chain"), {}
        if r.position > want:
            if want in remaining[r.chain]:
                return finding(Fault.REORDERED, f"found position {r.position} where {want} was due"), {}
            missing = f"{want}" if r.position == want + 1 else f"{want}..{r.position - 1}"
            return finding(Fault.DELETED, f"position(s) {missing} missing before this record"), {}
        self_ok = r.computed_hash() == r.hash
        if not self_ok:
            return finding(Fault.MODIFIED, "content does not match its hash"), {}
        if r.prev_hash != prev:
            return finding(Fault.INSERTED, "well-formed record that does not link to its predecessor"), {}
        expected[r.chain] = (r.position, r.hash)
        seen[r.chain][r.position] = r
    return None, {chain: [by_pos[p] for p in sorted(by_pos)] for chain, by_pos in seen.items()}


# --- signed checkpoints -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Head:
    tenant_id: str
    order_id: str
    position: int
    hash: bytes

    def as_json(self) -> list[Any]:
        return [self.tenant_id, self.order_id, self.position, self.hash.hex()]

    @classmethod
    def from_json(cls, value: Sequence[Any]) -> Head:
        return cls(str(value[0]), str(value[1]), int(value[2]), bytes.fromhex(str(value[3])))


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint:
    """A signed commitment to the heads of the chains changed since the previous checkpoint.

    digest = SHA-256(canonical JSON of {"v", "at", "prev_digest" (hex), "heads": [[tenant, order, position,
    hash hex], ...] sorted}); the signature is Ed25519 over the 32 digest bytes. Each checkpoint names its
    predecessor's digest, so together they commit to every head ever checkpointed.
    """

    at: str
    prev_digest: bytes
    heads: tuple[Head, ...]
    digest: bytes
    signature: bytes
    key_id: str
    public_key: bytes
    id: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "prev_digest": self.prev_digest.hex(),
            "heads": [h.as_json() for h in self.heads],
            "digest": self.digest.hex(),
            "signature": self.signature.hex(),
            "key_id": self.key_id,
            "public_key": self.public_key.hex(),
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Checkpoint:
        return cls(
            at=str(body["at"]),
            prev_digest=bytes.fromhex(body["prev_digest"]),
            heads=tuple(Head.from_json(h) for h in body["heads"]),
            digest=bytes.fromhex(body["digest"]),
            signature=bytes.fromhex(body["signature"]),
            key_id=str(body["key_id"]),
            public_key=bytes.fromhex(body["public_key"]),
            id=body.get("id"),
        )


def checkpoint_digest(at: str, prev_digest: bytes, heads: Iterable[Head]) -> bytes:
    ordered = sorted(heads, key=lambda h: (h.tenant_id, h.order_id))
    body = {"v": FORMAT_VERSION, "at": at, "prev_digest": prev_digest.hex(), "heads": [h.as_json() for h in ordered]}
    return hashlib.sha256(canonical_json(body)).digest()


def key_id(public_key: bytes) -> str:
    """A public key's short name: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(public_key).hexdigest()[:16]


def verify_checkpoints(
    checkpoints: Sequence[Checkpoint],
    chains: Mapping[tuple[str, str], Sequence[Record]],
    signature_ok: Any,
    *,
    complete: bool = True,
) -> Finding | None:
    """Check each checkpoint's digest, signature (`signature_ok(checkpoint) -> bool`) and link to its
    predecessor, then that every head it names is still in its chain with the same hash.

    `complete` is False when only some chains were loaded (`--order`): heads of other chains are skipped.
    """
    prev = GENESIS
    for c in checkpoints:

        def bad(fault: Fault, detail: str, c: Checkpoint = c) -> Finding:
            return Finding(fault, None, None, None, c.id, f"checkpoint {c.id}: {detail}")

        if c.prev_digest != prev:
            return bad(Fault.CHECKPOINT_CHAIN, "does not follow the previous checkpoint")
        if checkpoint_digest(c.at, c.prev_digest, c.heads) != c.digest:
            return bad(Fault.BAD_SIGNATURE, "its heads do not match its digest")
        if not signature_ok(c):
            return bad(Fault.BAD_SIGNATURE, f"signature does not verify with key {c.key_id}")
        prev = c.digest
        for h in c.heads:
            chain = chains.get((h.tenant_id, h.order_id))
            if chain is None and not complete:
                continue
            chain = chain or []
            if len(chain) < h.position:
                return Finding(
                    Fault.DELETED,
                    h.tenant_id,
                    h.order_id,
                    len(chain) + 1,
                    None,
                    f"checkpoint {c.id} signed a head at position {h.position}; the chain ends at {len(chain)}",
                )
            record = chain[h.position - 1]
            if record.hash != h.hash:
                return Finding(
                    Fault.MODIFIED,
                    h.tenant_id,
                    h.order_id,
                    h.position,
                    record.id,
                    f"chain rewritten: hash differs from the one checkpoint {c.id} signed",
                )
    return None


# --- what the gateway logs for one order's batch ------------------------------------------------------


def resolution_entries(
    resolution: Resolution,
    pending: Mapping[int, EventEnvelope],
    *,
    actor: str | None = None,
) -> list[Entry]:
    """One entry per decision of one order's batch, in the order they were taken.

    Besides each arriving step's decision: a buffered step that applies when its gap fills is logged as an
    APPLY right after the step that drained it (a drained step the process refuses as a REJECTED); an
    abort the gateway writes when a plan reaches its process's `max_rejections` as an APPLY after the
    rejection that caused it; a buffered step dropped by an abort as a DISCARD right after the abort.
    `resolution.applied` and `resolution.rejections` are chronological, so each decision consumes, in
    order, the applications and rejections it caused.
    """
    applied = list(resolution.applied)
    rejections = list(resolution.rejections)
    held = list(resolution.held)
    waiting: dict[int, EventEnvelope] = dict(pending)
    entries: list[Entry] = []

    def drop_waiting(cause: str = "abort") -> None:
        for seq in sorted(waiting):
            dropped = waiting.pop(seq)
            entries.append(_entry(dropped, Decision.DISCARD.value, None, f"buffered step dropped by {cause}", actor))

    def rejected(rejection: Rejection, note: str | None = None) -> None:
        verdict = rejection.verdict
        message = f"{verdict.message} ({note})" if note else verdict.message
        entries.append(
            _entry(rejection.event, Decision.REJECTED.value, verdict.code.value, message, actor, verdict.check)
        )

    def policy_abort() -> None:
        # Only a rejection applies an abort of the gateway's own: it follows the rejection at once.
        if applied and applied[0].event.is_abort and not applied[0].drained:
            abort = applied.pop(0).event
            entries.append(_entry(abort, Decision.APPLY.value, None, "plan aborted: max_rejections reached", actor))
            drop_waiting()

    for event, decision, after in resolution.decisions:
        if applied and is_deadline_abort(applied[0].event) and applied[0].event.event_id != event.event_id:
            # issue 13: a deadline passed before this step: the gateway's timeout abort went first
            timeout = applied.pop(0).event
            entries.append(_entry(timeout, Decision.APPLY.value, None, "plan aborted: deadline passed", actor))
            drop_waiting("deadline")
        if decision is Decision.REJECTED:
            rejected(rejections.pop(0))
            policy_abort()
            continue
        if decision is Decision.HELD:
            if held and held[0][0].event_id == event.event_id:
                held.pop(0)
            entries.append(_entry(event, decision.value, None, "awaiting approval", actor))
            continue
        code = code_of(decision, event, after)
        message = None
        if decision is Decision.PLAN_MISMATCH:
            message = f"order {event.order_id} follows plan {resolution.before.plan_id}, not {event.plan_id}"
        elif code is ErrorCode.PLAN_SUPERSEDED:
            message = f"plan {event.plan_id} was replaced by plan {after.plan_id}"
        elif decision is Decision.APPLY and event.is_replan:
            message = f"plan {event.plan_id} replaced by {event.new_plan_id} at seq {after.last_seq}"
        entries.append(_entry(event, decision.value, code.value if code else None, message, actor))
        if decision is Decision.BUFFER and event.seq_id is not None:
            waiting[event.seq_id] = event
        elif decision is Decision.TOMBSTONE:
            drop_waiting()
        elif decision is Decision.APPLY:
            applied.pop(0)  # the step itself
            if event.is_abort or event.is_replan:
                drop_waiting("replan" if event.is_replan else "abort")
                continue
            while applied and applied[0].drained:
                drained = applied.pop(0).event
                waiting.pop(drained.seq_id or 0, None)
                entries.append(_entry(drained, Decision.APPLY.value, None, "drained from the buffer", actor))
            if rejections and rejections[0].drained:
                refused = rejections.pop(0)
                waiting.pop(refused.event.seq_id or 0, None)
                rejected(refused, "drained from the buffer")
                policy_abort()
            elif held and held[0][1]:
                waiting_step = held.pop(0)[0]
                waiting.pop(waiting_step.seq_id or 0, None)
                entries.append(
                    _entry(waiting_step, Decision.HELD.value, None, "drained from the buffer; awaiting approval", actor)
                )
    return entries


def _entry(
    event: EventEnvelope,
    decision: str,
    code: str | None,
    message: str | None,
    actor: str | None,
    check: str | None = None,
) -> Entry:
    return Entry(
        tenant_id=event.tenant_id,
        order_id=event.order_id,
        decision=decision,
        event_id=str(event.event_id),
        plan_id=event.plan_id,
        seq=event.seq_id,
        event_type=str(event.event_type),
        code=code,
        check=check,
        message=message,
        actor=actor,
    )
